//! Specs as layers of a real axum server, on two workers: a route's rate
//! limit answers 429 with `Retry-After`, and a handler whose error wraps a
//! resilience error answers what that error calls for (504 for a timeout;
//! 500 saying what is missing for a spec without settings), counted at the
//! handler.

use std::future::IntoFuture;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use resilient_core::layer::{Layered, RespondLayer};
use resilient_core::{
    circuit_breakable, timeout, CircuitBreakerSpec, Error, RateLimiterSpec, Registry, TimeoutSpec,
};

#[derive(RateLimiterSpec)]
#[spec("resilient.ratelimiter.search")]
struct SearchRate;

#[derive(TimeoutSpec)]
#[spec("resilient.timeout.report")]
struct ReportTimeout;

/// A spec the test's registry is built without.
#[derive(CircuitBreakerSpec)]
#[spec("resilient.circuitbreaker.ledger")]
struct LedgerBreaker;

const SETTINGS: &str = "
[resilient.ratelimiter.search]
limit_for_period = 2
limit_refresh_period = \"1m\"
[resilient.timeout.report]
duration = \"50ms\"";

/// A handler's error: its own failures, and the resilience errors of the
/// fns it calls, each answered as a client expects.
#[derive(Debug, thiserror::Error)]
enum ApiError {
    #[error(transparent)]
    Resilience(#[from] Error),
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match self {
            ApiError::Resilience(e) => e.into_response(),
        }
    }
}

/// A report that takes a second: longer than its timeout.
#[timeout(ReportTimeout)]
async fn build_report() -> Result<String, ApiError> {
    tokio::time::sleep(Duration::from_secs(1)).await;
    Ok("report".to_owned())
}

/// The ledger's body: never reached while its spec has no settings.
#[circuit_breakable(LedgerBreaker)]
async fn read_ledger(hits: Arc<AtomicUsize>) -> Result<String, ApiError> {
    hits.fetch_add(1, Ordering::SeqCst);
    Ok("ledger".to_owned())
}

#[derive(Clone, Default)]
struct Hits {
    search: Arc<AtomicUsize>,
    report: Arc<AtomicUsize>,
    ledger: Arc<AtomicUsize>,
    ledger_body: Arc<AtomicUsize>,
}

async fn search(State(hits): State<Hits>) -> &'static str {
    hits.search.fetch_add(1, Ordering::SeqCst);
    "results"
}

async fn report(State(hits): State<Hits>) -> Result<String, ApiError> {
    hits.report.fetch_add(1, Ordering::SeqCst);
    build_report().await
}

async fn ledger(State(hits): State<Hits>) -> Result<String, ApiError> {
    hits.ledger.fetch_add(1, Ordering::SeqCst);
    read_ledger(hits.ledger_body.clone()).await
}

/// The registry of the two specs in `SETTINGS` (not `LedgerBreaker`),
/// the default of every thread of a runtime of two workers.
fn runtime() -> Result<tokio::runtime::Runtime, Box<dyn std::error::Error>> {
    let settings = config::Config::builder()
        .add_source(config::File::from_str(SETTINGS, config::FileFormat::Toml))
        .build()?;
    let registry = resilient_config::build(
        Registry::builder()
            .spec::<SearchRate>()
            .spec::<ReportTimeout>(),
        &settings,
    )?;
    Ok(registry
        .set_default_on(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all(),
        )
        .build()?)
}

#[test]
fn a_route_layer_answers_429_and_a_handler_error_504() -> Result<(), Box<dyn std::error::Error>> {
    let runtime = runtime()?;
    let hits = Hits::default();
    let answers = runtime.block_on(async {
        let router = Router::new()
            .route("/search", get(search))
            .route_layer(RespondLayer::new(SearchRate::layer()))
            .route("/report", get(report))
            .with_state(hits.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let server = tokio::spawn(axum::serve(listener, router).into_future());
        let mut answers = Vec::new();
        for path in ["/search", "/search", "/search", "/report"] {
            let response = examples::http::get_response(addr, path).await?;
            let retry_after = response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            answers.push((response.status().as_u16(), retry_after));
        }
        server.abort();
        Ok::<_, Box<dyn std::error::Error>>(answers)
    })?;
    assert_eq!(answers[0], (200, None));
    assert_eq!(answers[1], (200, None));
    let (status, retry_after) = &answers[2];
    assert_eq!(*status, 429);
    let wait: u64 = retry_after.as_deref().unwrap_or("none").parse()?;
    assert!((1..=60).contains(&wait), "Retry-After: {wait}");
    assert_eq!(answers[3], (504, None));
    assert_eq!(
        hits.search.load(Ordering::SeqCst),
        2,
        "the third never reached it"
    );
    assert_eq!(hits.report.load(Ordering::SeqCst), 1);
    Ok(())
}

#[test]
fn a_spec_without_settings_answers_500_saying_which_and_what_to_do(
) -> Result<(), Box<dyn std::error::Error>> {
    let runtime = runtime()?;
    let hits = Hits::default();
    let response = runtime.block_on(async {
        let router = Router::new()
            .route("/ledger", get(ledger))
            .with_state(hits.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let server = tokio::spawn(axum::serve(listener, router).into_future());
        let response = examples::http::get_response(addr, "/ledger").await?;
        server.abort();
        Ok::<_, Box<dyn std::error::Error>>(response)
    })?;
    assert_eq!(response.status(), 500);
    // The error's own message, and nothing else: the spec's type and path
    // (both from the code, never from configuration) and what to do.
    assert_eq!(
        response.body(),
        "`LedgerBreaker` has no settings in the registry in use: build it with this spec \
         (`.spec::<LedgerBreaker>()`, with a section at `resilient.circuitbreaker.ledger`)"
    );
    assert_eq!(
        response.headers().get("content-type").map(|v| v.as_bytes()),
        Some(&b"text/plain; charset=utf-8"[..])
    );
    assert_eq!(response.headers().get("retry-after"), None);
    assert_eq!(hits.ledger.load(Ordering::SeqCst), 1);
    assert_eq!(
        hits.ledger_body.load(Ordering::SeqCst),
        0,
        "refused before the body"
    );
    Ok(())
}
