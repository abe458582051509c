//! The retry middleware and a request it cannot copy (a streaming body):
//! a breaker outside does not count the refusal, a disabled retry sends
//! the request once, and the refusal is one rejected call. One test reads
//! the process's Prometheus recorder (installed once, before any registry
//! of this binary is built). Run with `--features reqwest-middleware`.

#![cfg(feature = "reqwest-middleware")]
#![allow(clippy::expect_used, clippy::unwrap_used)] // a test that panics on an unexpected outcome is the point

use std::sync::OnceLock;

use examples::http::Server;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use resilient_core::circuit_breaker::State;
use resilient_core::layer::middleware::{Middlewares, NotRetryable};
use resilient_core::settings::Value;
use resilient_core::{CircuitBreakerSpec, Registry, RetrySpec};

#[derive(RetrySpec)]
#[spec("mw_edges.retry", classify = http)]
struct UpRetry;

#[derive(CircuitBreakerSpec)]
#[spec("mw_edges.breaker", classify = http)]
struct UpBreaker;

/// The metrics test's own retry: the recorder is the process's, and the
/// other tests' refusals through `UpRetry` run beside it.
#[derive(RetrySpec)]
#[spec("mw_edges.metered_retry", classify = http)]
struct MeteredRetry;

fn table<const N: usize>(pairs: [(&str, Value); N]) -> Value {
    Value::Table(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

fn s(v: &str) -> Value {
    Value::Str(v.to_owned())
}

fn prometheus() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        PrometheusBuilder::new()
            .install_recorder()
            .expect("recorder")
    })
}

/// A retry's settings (enabled or not, metered).
fn retry(enabled: bool) -> Value {
    table([
        ("enabled", Value::Bool(enabled)),
        ("attempts", Value::Int(3)),
        ("delay", s("10ms")),
        (
            "telemetry",
            table([("metrics", table([("enabled", Value::Bool(true))]))]),
        ),
    ])
}

/// Two retries (the first enabled or not) and a breaker that opens on its
/// first failure.
fn registry(retry_enabled: bool) -> Registry {
    let _ = prometheus();
    let root = table([(
        "mw_edges",
        table([
            ("retry", retry(retry_enabled)),
            ("metered_retry", retry(true)),
            (
                "breaker",
                table([
                    ("failure_rate_threshold", Value::Int(50)),
                    ("minimum_required_calls", Value::Int(1)),
                    ("wait_duration_in_open_state", s("1m")),
                    ("permitted_calls_in_half_open_state", Value::Int(1)),
                    ("count_based", table([("window_size", Value::Int(1))])),
                ]),
            ),
        ]),
    )]);
    Registry::builder()
        .spec::<UpRetry>()
        .spec::<UpBreaker>()
        .spec::<MeteredRetry>()
        .build(&root)
        .map_err(|p| format!("{p:?}"))
        .expect("settings")
}

fn streaming_body() -> reqwest::Body {
    let chunks: Vec<Result<&'static str, std::io::Error>> = vec![Ok("a"), Ok("b")];
    reqwest::Body::wrap_stream(futures_util::stream::iter(chunks))
}

fn is_not_retryable(e: &reqwest_middleware::Error) -> bool {
    matches!(e, reqwest_middleware::Error::Middleware(e) if e.downcast_ref::<NotRetryable>().is_some())
}

/// README: "the middleware see each other's rejections as the attributes
/// do". The retry's `NotRetryable` is a refusal made before anything is
/// sent: a breaker outside (`classify = http`, opening at its first
/// failure) does not count it, and stays closed with 0 hits.
#[tokio::test]
async fn a_streaming_request_the_retry_refuses_is_no_failure_of_the_breaker_outside() {
    let r = registry(true);
    let _registry = r.set_default();
    let breaker = r.sync_scope(UpBreaker::get).expect("breaker");
    let server = Server::start(|_| (200, "ok".to_owned())).await.unwrap();
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(UpBreaker::middleware())
        .with(UpRetry::middleware())
        .build();
    let e = client
        .post(format!("http://{}/upload", server.addr()))
        .body(streaming_body())
        .send()
        .await
        .expect_err("refused");
    assert!(is_not_retryable(&e), "{e}");
    assert_eq!(server.hits(), 0, "nothing was sent");
    let window = breaker.metrics().window;
    assert_eq!(
        (breaker.state(), window.failures),
        (State::Closed, 0),
        "the dependency was never asked"
    );
}

/// README, Retry settings: `enabled = false` makes the spec a
/// pass-through: a disabled retry sends a streaming request once.
#[tokio::test]
async fn a_disabled_retry_passes_a_streaming_request_through() {
    let r = registry(false);
    let _registry = r.set_default();
    let server = Server::start(|_| (200, "ok".to_owned())).await.unwrap();
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(UpRetry::middleware())
        .build();
    let out = client
        .post(format!("http://{}/upload", server.addr()))
        .body(streaming_body())
        .send()
        .await;
    match out {
        Ok(response) => assert_eq!(response.status(), 200),
        Err(e) => panic!("a disabled retry refused the request: {e}"),
    }
    assert_eq!(server.hits(), 1);
}

/// README, Metrics: `resilient_calls_total` counts "exactly one outcome per
/// call". A request the retry refuses as `NotRetryable` was not dropped by
/// anyone: one rejected call, none cancelled.
#[tokio::test]
async fn a_not_retryable_refusal_is_not_counted_as_cancelled() {
    let r = registry(true);
    let _registry = r.set_default();
    let server = Server::start(|_| (200, "ok".to_owned())).await.unwrap();
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(MeteredRetry::middleware())
        .build();
    let e = client
        .post(format!("http://{}/upload", server.addr()))
        .body(streaming_body())
        .send()
        .await
        .expect_err("refused");
    assert!(is_not_retryable(&e), "{e}");
    let rendered = prometheus().render();
    let count = |outcome: &str| -> f64 {
        rendered
            .lines()
            .filter(|l| {
                l.starts_with("resilient_calls_total")
                    && l.contains("spec=\"MeteredRetry\"")
                    && l.contains(&format!("outcome=\"{outcome}\""))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    assert_eq!(
        count("cancelled"),
        0.0,
        "the refusal was counted as cancelled"
    );
    assert_eq!(count("rejected"), 1.0, "the refusal is one rejected call");
}
