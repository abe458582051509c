//! The example's `/health` endpoint serves the registry's snapshot as JSON.

use std::future::IntoFuture;

use examples::http::{get, Server};
use examples::petstore::PetClient;
use resilient_core::Registry;
use serde_json::json;

fn registry() -> Result<Registry, Box<dyn std::error::Error>> {
    let toml = "[resilient.retry.pet]
delay = \"1ms\"
attempts = 1
[resilient.circuitbreaker.pet]
failure_rate_threshold = 100
minimum_required_calls = 1
wait_duration_in_open_state = \"1m\"
permitted_calls_in_half_open_state = 1
count_based = { window_size = 1 }
[resilient.timeout.pet]
duration = \"2s\"
[resilient.concurrency.pets]
limit = 8";
    examples::petstore::registry(toml)
}

#[tokio::test]
async fn health_lists_every_spec_and_shows_an_open_breaker(
) -> Result<(), Box<dyn std::error::Error>> {
    let registry = registry()?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let endpoint = tokio::spawn(
        axum::serve(listener, examples::health::routes(registry.clone(), None)).into_future(),
    );

    let before: serde_json::Value = serde_json::from_str(&get(addr, "/health").await?.body)?;
    let specs = before["specs"].as_array().ok_or("a list of specs")?;
    let paths: Vec<&str> = specs.iter().filter_map(|s| s["path"].as_str()).collect();
    assert_eq!(
        paths,
        [
            "resilient.circuitbreaker.pet",
            "resilient.concurrency.pets",
            "resilient.retry.pet",
            "resilient.timeout.pet"
        ]
    );
    assert_eq!(specs[0]["kind"], "circuit_breaker");
    assert_eq!(specs[0]["status"]["state"], "closed");
    // The settings running, as the config writes them.
    assert_eq!(specs[0]["settings"]["wait_duration_in_open_state"], "1m");
    assert_eq!(specs[1]["status"]["permits_limit"], 8);
    assert_eq!(specs[2]["settings"]["delay"], "1ms");
    assert_eq!(specs[3]["settings"]["duration"], "2s");

    // A store that always fails: the retry gives up, the breaker opens.
    let server = Server::start(|_| (503, "down".to_owned())).await?;
    let client = PetClient::new(server.addr());
    assert!(registry.scope(client.lookup(7)).await.is_err());
    assert_eq!(server.hits(), 2);

    let after: serde_json::Value = serde_json::from_str(&get(addr, "/health").await?.body)?;
    assert_eq!(after["specs"][0]["status"]["state"], "open");
    // Its window is empty now; what opened it is kept beside it.
    assert_eq!(after["specs"][0]["status"]["window"]["total"], 0);
    assert_eq!(
        after["specs"][0]["status"]["opened_by"],
        json!({
            "window": { "total": 1, "failures": 1, "slow": 0 },
            "failure_rate": 100,
            "slow_rate": 0
        })
    );
    assert_eq!(get(addr, "/other").await?.status, 404);
    assert_eq!(
        get(addr, "/metrics").await?.status,
        404,
        "no recorder given"
    );
    endpoint.abort();
    Ok(())
}
