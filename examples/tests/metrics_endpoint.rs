//! The example's `/metrics` endpoint serves what a spec with
//! `telemetry.metrics.enabled` records, through a Prometheus recorder. One
//! test in this binary: the recorder is the process's.

use std::future::IntoFuture;

use examples::http::{get, Server};
use examples::petstore::PetClient;
use metrics_exporter_prometheus::PrometheusBuilder;

#[tokio::test]
async fn metrics_count_the_calls_and_retries_of_a_recovered_lookup(
) -> Result<(), Box<dyn std::error::Error>> {
    // Installed before the registry is built: that is when each spec's
    // metric handles are registered.
    let prometheus = PrometheusBuilder::new().install_recorder()?;
    let toml = "[resilient.retry.pet]
delay = \"1ms\"
attempts = 2
telemetry = { metrics = { enabled = true } }
[resilient.circuitbreaker.pet]
failure_rate_threshold = 100
minimum_required_calls = 10
wait_duration_in_open_state = \"1m\"
permitted_calls_in_half_open_state = 1
count_based = { window_size = 10 }
[resilient.timeout.pet]
duration = \"2s\"
[resilient.concurrency.pets]
limit = 8";
    let registry = examples::petstore::registry(toml)?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let endpoint = tokio::spawn(
        axum::serve(
            listener,
            examples::health::routes(registry.clone(), Some(prometheus)),
        )
        .into_future(),
    );

    // Two 503s, then a 200: three requests, two retries, one success.
    let server = Server::failing_first(2, "{\"id\": 7}").await?;
    let client = PetClient::new(server.addr());
    registry.scope(client.lookup(7)).await?;
    assert_eq!(server.hits(), 3);

    let page = get(addr, "/metrics").await?;
    assert_eq!(page.status, 200);
    let value = |series: &str| {
        page.body
            .lines()
            .find(|l| l.starts_with(series))
            .and_then(|l| l.rsplit(' ').next())
            .map(str::to_owned)
    };
    let labels = "spec=\"PetRetry\",path=\"resilient.retry.pet\"";
    assert_eq!(
        value(&format!(
            "resilient_calls_total{{{labels},kind=\"retry\",outcome=\"success\"}}"
        )),
        Some("1".to_owned()),
        "{}",
        page.body
    );
    assert_eq!(
        value(&format!("resilient_retries_total{{{labels}}}")),
        Some("2".to_owned()),
        "{}",
        page.body
    );
    // The breaker spec leaves metrics off: none of its series.
    assert!(!page.body.contains("PetBreaker"), "{}", page.body);
    endpoint.abort();
    Ok(())
}
