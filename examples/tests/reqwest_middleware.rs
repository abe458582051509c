//! Specs as reqwest-middleware middleware, against a loopback server whose
//! hits are counted: a retry and a breaker with `classify = http`, a rate
//! limiter, a timeout, and a request whose body a retry cannot copy. Run
//! with `--features reqwest-middleware` (`.ci/run` does).

#![cfg(feature = "reqwest-middleware")]
#![allow(clippy::expect_used)] // a test that panics on an unexpected outcome is the point

use std::time::Duration;

use examples::http::Server;
use resilient_core::layer::middleware::{Middlewares, NotRetryable};
use resilient_core::settings::Value;
use resilient_core::{
    CircuitBreakerSpec, Error, RateLimiterSpec, Registry, RetrySpec, Spec, TimeoutSpec,
};

#[derive(RetrySpec)]
#[spec("mw.retry", classify = http)]
struct UpstreamRetry;

#[derive(CircuitBreakerSpec)]
#[spec("mw.breaker", classify = http)]
struct UpstreamBreaker;

#[derive(RateLimiterSpec)]
#[spec("mw.rate")]
struct UpstreamRate;

#[derive(TimeoutSpec)]
#[spec("mw.timeout")]
struct UpstreamTimeout;

fn table<const N: usize>(pairs: [(&str, Value); N]) -> Value {
    Value::Table(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

fn registry() -> Result<Registry, Box<dyn std::error::Error>> {
    let s = |v: &str| Value::Str(v.to_owned());
    let root = table([(
        "mw",
        table([
            (
                "retry",
                table([("attempts", Value::Int(3)), ("delay", s("10ms"))]),
            ),
            (
                "breaker",
                table([
                    ("failure_rate_threshold", Value::Int(50)),
                    ("minimum_required_calls", Value::Int(4)),
                    ("wait_duration_in_open_state", s("1m")),
                    ("permitted_calls_in_half_open_state", Value::Int(1)),
                    ("count_based", table([("window_size", Value::Int(4))])),
                ]),
            ),
            (
                "rate",
                table([
                    ("limit_for_period", Value::Int(1)),
                    ("limit_refresh_period", s("1m")),
                ]),
            ),
            ("timeout", table([("duration", s("100ms"))])),
        ]),
    )]);
    Ok(Registry::builder()
        .spec::<UpstreamRetry>()
        .spec::<UpstreamBreaker>()
        .spec::<UpstreamRate>()
        .spec::<UpstreamTimeout>()
        .build(&root)
        .map_err(|p| format!("{p:?}"))?)
}

/// The resilience error a middleware error holds.
fn resilience(e: &reqwest_middleware::Error) -> Option<&Error> {
    match e {
        reqwest_middleware::Error::Middleware(e) => e.downcast_ref::<Error>(),
        reqwest_middleware::Error::Reqwest(_) => None,
    }
}

#[tokio::test]
async fn a_retry_and_a_breaker_count_each_503_and_the_server_sees_each_attempt(
) -> Result<(), Box<dyn std::error::Error>> {
    let r = registry()?;
    let _registry = r.set_default();
    let breaker = r.sync_scope(UpstreamBreaker::get)?;
    let server = Server::failing_first(2, "ok").await?;
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(UpstreamRetry::middleware())
        .with(UpstreamBreaker::middleware())
        .build();
    let url = format!("http://{}/items/1", server.addr());
    let response = client.get(&url).send().await?;
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await?, "ok");
    assert_eq!(server.hits(), 3, "two 503s retried");
    let window = breaker.metrics().window;
    assert_eq!(
        (window.total, window.failures),
        (3, 2),
        "each attempt counted"
    );

    // Down for good: the window's fourth call fails (3 failures of 4), the
    // breaker opens, and the retry passes its rejection on without another
    // request.
    let down = Server::start(|_| (503, "down".to_owned())).await?;
    let e = client
        .get(format!("http://{}/items/2", down.addr()))
        .send()
        .await
        .map(|r| r.status().as_u16());
    let e = e.expect_err("open");
    assert!(
        matches!(resilience(&e), Some(Error::CallNotPermitted { .. })),
        "{e}"
    );
    assert_eq!(down.hits(), 1, "one request, then open");
    assert_eq!(breaker.metrics().opened, 1);
    Ok(())
}

#[tokio::test]
async fn a_rate_limit_refuses_the_second_request_without_sending_it(
) -> Result<(), Box<dyn std::error::Error>> {
    let r = registry()?;
    let _registry = r.set_default();
    let server = Server::failing_first(0, "ok").await?;
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(UpstreamRate::middleware())
        .build();
    let url = format!("http://{}/", server.addr());
    assert_eq!(client.get(&url).send().await?.status(), 200);
    let e = client.get(&url).send().await.expect_err("refused");
    assert!(
        matches!(resilience(&e), Some(Error::RateLimitExceeded { .. })),
        "{e}"
    );
    assert_eq!(server.hits(), 1);
    Ok(())
}

#[tokio::test]
async fn a_timeout_ends_a_request_the_server_never_answers(
) -> Result<(), Box<dyn std::error::Error>> {
    let r = registry()?;
    let _registry = r.set_default();
    // Accepts connections (the kernel does) and never answers.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(UpstreamTimeout::middleware())
        .build();
    let start = std::time::Instant::now();
    let e = client
        .get(format!("http://{}/", silent.local_addr()?))
        .send()
        .await
        .expect_err("timed out");
    assert!(
        matches!(resilience(&e), Some(Error::Timeout { after, .. }) if *after == Duration::from_millis(100)),
        "{e}"
    );
    assert!(start.elapsed() < Duration::from_secs(5));
    Ok(())
}

#[tokio::test]
async fn a_retry_refuses_a_request_whose_body_it_cannot_copy(
) -> Result<(), Box<dyn std::error::Error>> {
    let r = registry()?;
    let _registry = r.set_default();
    let server = Server::failing_first(0, "ok").await?;
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(UpstreamRetry::middleware())
        .build();
    let chunks: Vec<Result<&'static str, std::io::Error>> = vec![Ok("a"), Ok("b")];
    let body = reqwest::Body::wrap_stream(futures_util::stream::iter(chunks));
    let e = client
        .post(format!("http://{}/upload", server.addr()))
        .body(body)
        .send()
        .await
        .expect_err("refused");
    let reqwest_middleware::Error::Middleware(e) = &e else {
        panic!("{e}");
    };
    let not = e.downcast_ref::<NotRetryable>().expect("NotRetryable");
    assert_eq!(not.spec, UpstreamRetry::NAME);
    assert!(
        e.to_string()
            .contains("cannot retry a request whose body is a stream"),
        "{e}"
    );
    assert_eq!(server.hits(), 0, "refused before it was sent");
    Ok(())
}
