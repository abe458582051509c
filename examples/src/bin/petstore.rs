//! The pet store service on a loopback port: an axum server whose
//! `/pets/{id}` looks pets up at an upstream store through reqwest, with a
//! retry that follows `Retry-After`, a breaker, a timeout and a fallback,
//! under a concurrency limit that is a route layer. As its own client, it
//! asks for a pet while the upstream fails twice, then answers; asks again
//! while the upstream fails, and gets the cached pet; edits its
//! configuration file, which it watches and reloads; reads its admin
//! routes (readiness, recent events, the dashboard) and finds the routes
//! that act not mounted; then reads its `/health` and `/metrics`.
//!
//! Run with `cargo run -p examples --bin petstore`. With `-- --serve` it
//! keeps serving after that, and prints its address: the dashboard is at
//! `/resilience` (`GET /pets/7` a few times opens the breaker, the page
//! shows it). With `APP_ADMIN_TOKEN` set, the routes that act (breaker
//! actions, reload) are mounted too, behind `Authorization: Bearer
//! <token>`.

use std::future::IntoFuture;
use std::path::{Path, PathBuf};
use std::time::Duration;

use examples::petstore::{PetBreaker, PetClient};
use metrics_exporter_prometheus::PrometheusBuilder;
use resilient_core::admin::Admin;
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

/// Writes `contents` as the whole file at once, as an editor or a
/// ConfigMap's swap does: written beside it, then renamed over it, so the
/// watch never reads a file half written (`fs::write` truncates first, and
/// a poll between the two saw an empty file and refused it).
fn replace(path: &std::path::Path, contents: &str) -> std::io::Result<()> {
    let beside = path.with_extension("toml.new");
    std::fs::write(&beside, contents)?;
    std::fs::rename(&beside, path)
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
    let registry = Registry::installed().ok_or("the registry was just installed")?;

    // The upstream store: two 503s (the second asks for a second's wait),
    // then pet 7, then 503 from there on.
    let upstream = examples::petstore::flaky_upstream().await?;
    // The service, on a port of its own.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let service = format!("http://{}", listener.local_addr()?);
    // The admin routes: reads for everyone; the routes that act only with
    // a token, and then a reload that reads the file again.
    let token = std::env::var("APP_ADMIN_TOKEN")
        .ok()
        .filter(|t| !t.is_empty());
    let reloads = file.0.clone();
    let admin = Admin::new(registry.clone()).reload_with(move || {
        let config = load(&reloads)?;
        Ok(resilient_config::reload(&config)?)
    });
    let app = examples::petstore::service(
        PetClient::new(upstream.addr()),
        registry.clone(),
        Some(prometheus),
        &admin,
        token.as_deref(),
    );
    tokio::spawn(axum::serve(listener, app).into_future());

    let http = reqwest::Client::new();
    let get = |path: &str| http.get(format!("{service}{path}")).send();
    let pet = get("/pets/7").await?;
    println!(
        "GET /pets/7: {} {}",
        pet.status().as_u16(),
        pet.text().await?
    );
    println!("upstream hits: {}", upstream.hits());
    println!("breaker: {}", PetBreaker::get()?.state());
    let pet = get("/pets/7").await?;
    println!(
        "upstream down; GET /pets/7: {} {}",
        pet.status().as_u16(),
        pet.text().await?
    );
    println!("upstream hits: {}", upstream.hits());
    let unknown = get("/pets/8").await?;
    println!(
        "GET /pets/8: {} (nothing cached)",
        unknown.status().as_u16()
    );

    // An edit with a mistake: refused, the running settings stay.
    replace(&file.0, &original.replace("attempts = 2", "attempts = -2"))?;
    if let Some(Err(e)) = watch.reloads.recv().await {
        println!("edit: attempts = -2 -> {e}");
    }
    // A valid edit: applied to the calls that start from now on.
    let edited = original
        .replace("attempts = 2", "attempts = 3")
        .replace("duration = \"2s\"", "duration = \"1s\"");
    replace(&file.0, &edited)?;
    if let Some(Ok(reloaded)) = watch.reloads.recv().await {
        println!("edit: attempts = 3, duration = \"1s\" -> reloaded");
        for change in reloaded.specs {
            println!("  {}: {}", change.spec, change.keys.join("; "));
        }
    }
    watch.task.abort();

    // What an operator reads: readiness, what happened, the dashboard.
    let ready = get("/resilience/ready").await?;
    let status = ready.status().as_u16();
    let readiness: serde_json::Value = serde_json::from_str(&ready.text().await?)?;
    println!(
        "GET /resilience/ready: {status} {}",
        readiness["status"].as_str().unwrap_or("?")
    );
    let events: serde_json::Value =
        serde_json::from_str(&get("/resilience/events").await?.text().await?)?;
    // Each event as who and what, a run of the same written once.
    let mut runs: Vec<(String, usize)> = Vec::new();
    for e in events.as_array().into_iter().flatten() {
        let what = e["type"].as_str().unwrap_or("?");
        let who = e["spec"].as_str().or(e["function"].as_str());
        let line = who.map_or(what.to_owned(), |who| format!("{who} {what}"));
        match runs.last_mut() {
            Some((last, n)) if *last == line => *n += 1,
            _ => runs.push((line, 1)),
        }
    }
    println!("GET /resilience/events (oldest first):");
    for (line, n) in runs {
        if n > 1 {
            println!("  {line} x{n}");
        } else {
            println!("  {line}");
        }
    }
    let page = get("/resilience").await?;
    println!(
        "GET /resilience: {} {} (the dashboard)",
        page.status().as_u16(),
        page.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    );
    let act = http
        .post(format!(
            "{service}/resilience/breakers/resilient.circuitbreaker.pet/force_open"
        ))
        .send()
        .await?;
    println!(
        "POST /resilience/breakers/resilient.circuitbreaker.pet/force_open: {} ({})",
        act.status().as_u16(),
        if token.is_some() {
            "APP_ADMIN_TOKEN is set: the routes that act need it"
        } else {
            "no APP_ADMIN_TOKEN: the routes that act are not mounted"
        }
    );

    let health = get("/health").await?;
    println!(
        "GET /health: {}\n{}",
        health.status().as_u16(),
        health.text().await?
    );
    let metrics = get("/metrics").await?;
    println!("GET /metrics: {}", metrics.status().as_u16());
    let metrics = metrics.text().await?;
    // The calls that happened, in a stable order.
    let mut calls: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("resilient_calls_total") && !l.ends_with(" 0"))
        .collect();
    calls.sort_unstable();
    for line in calls {
        println!("{line}");
    }
    if std::env::args().any(|a| a == "--serve") {
        println!("serving {service} (the dashboard at {service}/resilience); stop with Ctrl-C");
        std::future::pending::<()>().await;
    }
    Ok(())
}
