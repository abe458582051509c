//! Specs as tower layers: an HTTP client built as a `tower::ServiceBuilder`
//! stack (retry, breaker, concurrency limit, timeout, outermost first) over
//! a loopback server, then the same breaker spec on an annotated fn. The
//! layers and the fn share the spec's one breaker: when the server goes
//! down, the stack opens it, and the fn is refused without a request.
//!
//! Run with `cargo run -p examples --bin tower_client`.

use std::net::SocketAddr;

use examples::http::Server;
use resilient_core::prelude::*;
use resilient_core::{BoxError, Error, Registry};
use tower::{ServiceBuilder, ServiceExt};

/// A 503 is a failure (`classify = http`): retried, and counted.
#[derive(RetrySpec)]
#[spec("resilient.retry.catalog", classify = http)]
pub struct CatalogRetry;

/// One breaker for the stack and the fn below.
#[derive(CircuitBreakerSpec)]
#[spec("resilient.circuitbreaker.catalog", classify = http)]
pub struct CatalogBreaker;

/// At most 8 requests in flight.
#[derive(ConcurrencyLimitSpec)]
#[spec("resilient.concurrency.catalog")]
pub struct CatalogLimit;

/// Each attempt within a second.
#[derive(TimeoutSpec)]
#[spec("resilient.timeout.catalog")]
pub struct CatalogTimeout;

const CONFIG: &str = r#"
[resilient.retry.catalog]
attempts = 2
delay = "10ms"

[resilient.circuitbreaker.catalog]
failure_rate_threshold = 50
minimum_required_calls = 6
wait_duration_in_open_state = "30s"
permitted_calls_in_half_open_state = 1
count_based = { window_size = 10 }

[resilient.concurrency.catalog]
limit = 8

[resilient.timeout.catalog]
duration = "1s"
"#;

#[derive(Debug, thiserror::Error)]
enum CatalogError {
    #[error(transparent)]
    Http(#[from] reqwest::Error),
    #[error(transparent)]
    Resilience(#[from] Error),
}

/// The same breaker as the stack's, on a fn.
#[circuit_breakable(CatalogBreaker)]
async fn item(addr: SocketAddr, id: u64) -> Result<http::Response<String>, CatalogError> {
    Ok(examples::http::get_response(addr, &format!("/items/{id}")).await?)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BoxError> {
    let config = config::Config::builder()
        .add_source(config::File::from_str(CONFIG, config::FileFormat::Toml))
        .build()?;
    resilient_config::build(
        Registry::builder()
            .spec::<CatalogRetry>()
            .spec::<CatalogBreaker>()
            .spec::<CatalogLimit>()
            .spec::<CatalogTimeout>(),
        &config,
    )?
    .install()?;

    // Fails twice with 503, then answers; later, down for good.
    let server = Server::start(|n| match n {
        1 | 2 => (503, "busy".to_owned()),
        3 => (200, "{\"id\": 7, \"name\": \"lamp\"}".to_owned()),
        _ => (503, "down".to_owned()),
    })
    .await?;
    let addr = server.addr();
    let catalog = ServiceBuilder::new()
        .layer(CatalogRetry::layer())
        .layer(CatalogBreaker::layer())
        .layer(CatalogLimit::layer())
        .layer(CatalogTimeout::layer())
        .service_fn(move |path: String| async move {
            examples::http::get_response(addr, &path)
                .await
                .map_err(BoxError::from)
        });

    let found = catalog.clone().oneshot("/items/7".to_owned()).await?;
    println!("server hits: {}", server.hits());
    println!("result: {} {}", found.status().as_u16(), found.body());

    // Down: a request is tried three times; the breaker opens on the sixth
    // call it counts, and the next request is refused without a call.
    for id in 8..=9 {
        match catalog.clone().oneshot(format!("/items/{id}")).await {
            Ok(response) => println!("item {id}: {}", response.status().as_u16()),
            Err(e) => println!("item {id}: {e}"),
        }
    }
    println!("server hits: {}", server.hits());
    let breaker = CatalogBreaker::get()?;
    println!("breaker: {:?}", breaker.state());
    match item(addr, 10).await {
        Ok(response) => println!("fn: {}", response.status().as_u16()),
        Err(e) => println!("fn: {e}"),
    }
    println!("server hits: {}", server.hits());
    Ok(())
}
