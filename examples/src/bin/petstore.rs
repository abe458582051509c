//! Looks up a pet from a loopback store that fails twice, then answers; then
//! from one that is down, where a fallback answers instead; then edits its
//! configuration file, which it watches and reloads; then serves its
//! `/health` and `/metrics`.
//!
//! Run with `cargo run -p examples --bin petstore`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use examples::http::Server;
use examples::petstore::{PetBreaker, PetClient};
use metrics_exporter_prometheus::PrometheusBuilder;
use resilient_core::{CircuitBreakerSpec, Registry};

/// The configuration: the file, then `APP__...` environment overrides.
fn load(file: &Path) -> Result<config::Config, config::ConfigError> {
    config::Config::builder()
        .add_source(config::File::from(file).format(config::FileFormat::Toml))
        .add_source(config::Environment::with_prefix("APP").separator("__"))
        .build()
}

/// The example's configuration file, written where it can edit it.
struct ConfigFile(PathBuf);

impl Drop for ConfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let original = include_str!("../../resilient.toml");
    let file =
        ConfigFile(std::env::temp_dir().join(format!("petstore-{}.toml", std::process::id())));
    std::fs::write(&file.0, original)?;
    let settings = load(&file.0)?;
    // Metrics go to a Prometheus recorder, installed before the registry
    // resolves each spec's metric handles.
    let prometheus = PrometheusBuilder::new().install_recorder()?;
    // Validates every spec linked into this binary; reports every problem at once.
    resilient_config::init(&settings)?;
    // Reloads the settings whenever the file changes.
    let path = file.0.clone();
    let mut watch = examples::reload::watch(file.0.clone(), Duration::from_millis(20), move || {
        load(&path)
    });
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

    // An edit with a mistake: refused, the running settings stay.
    std::fs::write(&file.0, original.replace("attempts = 2", "attempts = -2"))?;
    if let Some(Err(e)) = watch.reloads.recv().await {
        println!("edit: attempts = -2 -> {e}");
    }
    // A valid edit: applied to the calls that start from now on.
    let edited = original
        .replace("attempts = 2", "attempts = 3")
        .replace("duration = \"2s\"", "duration = \"1s\"");
    std::fs::write(&file.0, edited)?;
    if let Some(Ok(reloaded)) = watch.reloads.recv().await {
        println!("edit: attempts = 3, duration = \"1s\" -> reloaded");
        for change in reloaded.specs {
            println!("  {}: {}", change.spec, change.keys.join("; "));
        }
    }
    watch.task.abort();

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
