//! Looks up a pet from a loopback store that fails twice, then answers; then
//! from one that is down, where a fallback answers instead.
//!
//! Run with `cargo run -p examples --bin petstore`.

use examples::http::Server;
use examples::petstore::{PetBreaker, PetClient};
use metrics_exporter_prometheus::PrometheusBuilder;
use resilient_core::{CircuitBreakerSpec, Registry};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let settings = config::Config::builder()
        .add_source(config::File::from_str(
            include_str!("../../resilient.toml"),
            config::FileFormat::Toml,
        ))
        .add_source(config::Environment::with_prefix("APP").separator("__"))
        .build()?;
    // Metrics go to a Prometheus recorder, installed before the registry
    // resolves each spec's metric handles.
    let prometheus = PrometheusBuilder::new().install_recorder()?;
    // Validates every spec linked into this binary; reports every problem at once.
    resilient_config::init(&settings)?;
    // `/health`: every spec's state, from the installed registry; `/metrics`.
    let health = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let health_addr = health.local_addr()?;
    let registry = Registry::installed().ok_or("the registry was just installed")?;
    tokio::spawn(examples::health::serve(
        health,
        registry.clone(),
        Some(prometheus),
    ));

    let server = Server::failing_first(2, "{\"id\": 7, \"name\": \"Rex\"}").await?;
    let client = PetClient::new(server.addr());
    let pet = client.find(7).await?;
    println!("server hits: {}", server.hits());
    println!("result: {} {}", pet.status, pet.body);
    println!("breaker: {}", PetBreaker::get()?.state());

    let down = Server::failing_first(u32::MAX, "").await?;
    let cached = PetClient::new(down.addr()).find_or_cached(8).await?;
    println!("store down, hits: {}", down.hits());
    println!("fallback: {}", cached.body);

    let health = examples::http::get(health_addr, "/health").await?;
    println!("GET /health: {}\n{}", health.status, health.body);
    let metrics = examples::http::get(health_addr, "/metrics").await?;
    println!("GET /metrics: {}", metrics.status);
    // The calls that happened, in a stable order.
    let mut calls: Vec<&str> = metrics
        .body
        .lines()
        .filter(|l| l.starts_with("resilient_calls_total") && !l.ends_with(" 0"))
        .collect();
    calls.sort_unstable();
    for line in calls {
        println!("{line}");
    }
    Ok(())
}
