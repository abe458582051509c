//! The example's `/health` endpoint serves the registry's snapshot as JSON.

use std::future::IntoFuture;

use examples::http::{get, Server};
use examples::petstore::PetClient;
use resilient_core::{circuit_breakable, CircuitBreakerSpec, ConcurrencyLimitSpec, Registry};
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

#[derive(CircuitBreakerSpec)]
#[spec("resilient.circuitbreaker.hosts")]
struct HostBreaker;

#[derive(ConcurrencyLimitSpec)]
#[spec("resilient.concurrency.hosts")]
struct HostLimit;

#[derive(Debug, thiserror::Error)]
enum HostError {
    #[error("down")]
    Down,
    #[error(transparent)]
    Resilience(#[from] resilient_core::Error),
}

/// Calls that reached each host: `[down, up]`.
static REACHED: [std::sync::atomic::AtomicU32; 2] = [
    std::sync::atomic::AtomicU32::new(0),
    std::sync::atomic::AtomicU32::new(0),
];

#[circuit_breakable(HostBreaker, key = host)]
async fn fetch(host: &str) -> Result<(), HostError> {
    let down = host == "down";
    REACHED[usize::from(!down)].fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    if down {
        Err(HostError::Down)
    } else {
        Ok(())
    }
}

/// A keyed spec's settings in the snapshot hold its `keys` table, every
/// key of it in force (those left out at their defaults; a limit has no
/// `max_open_percent`); a key's open breaker shows the window that opened
/// it.
#[tokio::test]
async fn the_snapshot_shows_a_keyed_spec_s_keys_settings_and_what_opened_a_key(
) -> Result<(), Box<dyn std::error::Error>> {
    let toml = r#"
[resilient.circuitbreaker.hosts]
failure_rate_threshold = 50
minimum_required_calls = 4
wait_duration_in_open_state = "30s"
permitted_calls_in_half_open_state = 1
count_based = { window_size = 10 }
keys = { max = 5, idle_timeout = "1m", max_open_percent = 50 }
[resilient.concurrency.hosts]
limit = 2
"#;
    let config = config::Config::builder()
        .add_source(config::File::from_str(toml, config::FileFormat::Toml))
        .build()?;
    let registry = resilient_config::build(
        Registry::builder()
            .spec::<HostBreaker>()
            .spec::<HostLimit>(),
        &config,
    )?;
    registry
        .scope(async {
            let _ = fetch("up").await;
            for _ in 0..5 {
                let _ = fetch("down").await;
            }
        })
        .await;
    // The fifth call to "down" was rejected.
    let reached = REACHED
        .each_ref()
        .map(|r| r.load(std::sync::atomic::Ordering::SeqCst));
    assert_eq!(reached, [4, 1]);

    let body: serde_json::Value = serde_json::from_str(&examples::health::body(&registry)?)?;
    let (breaker, limit) = (&body["specs"][0], &body["specs"][1]);
    assert_eq!(breaker["path"], "resilient.circuitbreaker.hosts");
    assert_eq!(
        breaker["settings"]["keys"],
        json!({ "max": 5, "idle_timeout": "1m", "label_metrics": false, "max_open_percent": 50 })
    );
    assert_eq!(breaker["settings"]["failure_rate_threshold"], 50);
    assert_eq!(limit["path"], "resilient.concurrency.hosts");
    assert_eq!(
        limit["settings"]["keys"],
        json!({ "max": 1000, "idle_timeout": "10m", "label_metrics": false })
    );
    assert_eq!(breaker["keys"]["count"], 2);
    let shown = &breaker["keys"]["shown"];
    assert_eq!(
        (&shown[0]["key"], &shown[1]["key"]),
        (&json!("down"), &json!("up"))
    );
    assert_eq!(shown[0]["status"]["state"], "open");
    assert_eq!(shown[0]["status"]["window"]["total"], 0);
    assert_eq!(
        shown[0]["status"]["opened_by"],
        json!({
            "window": { "total": 4, "failures": 4, "slow": 0 },
            "failure_rate": 100,
            "slow_rate": 0
        })
    );
    assert_eq!(shown[1]["status"]["state"], "closed");
    assert_eq!(shown[1]["status"].get("opened_by"), None);
    // The spec's own breaker, which no call went through.
    assert_eq!(breaker["status"].get("opened_by"), None);
    Ok(())
}
