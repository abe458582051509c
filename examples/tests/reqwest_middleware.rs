//! Specs as reqwest-middleware middleware, against a loopback server whose
//! hits are counted: a retry and a breaker with `classify = http`, a rate
//! limiter, a timeout, and a request whose body a retry cannot copy; and
//! an axum handler that answers a rejection from its client as the
//! rejection itself. Run with `--features reqwest-middleware` (`.ci/run`
//! does).

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
    Error::from_middleware(e)
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

/// A handler's error: its upstream's failure, or a rejection by a spec's
/// middleware on the way there, taken out of reqwest-middleware's error.
#[derive(Debug, thiserror::Error)]
enum ApiError {
    #[error("the upstream failed: {0}")]
    Upstream(reqwest_middleware::Error),
    #[error(transparent)]
    Resilience(#[from] Error),
}

impl From<reqwest_middleware::Error> for ApiError {
    fn from(e: reqwest_middleware::Error) -> Self {
        match Error::try_from(e) {
            Ok(rejected) => ApiError::Resilience(rejected),
            Err(e) => ApiError::Upstream(e),
        }
    }
}

impl axum::response::IntoResponse for ApiError {
    fn into_response(self) -> axum::response::Response {
        match self {
            ApiError::Upstream(e) => {
                (axum::http::StatusCode::BAD_GATEWAY, e.to_string()).into_response()
            }
            ApiError::Resilience(e) => e.into_response(),
        }
    }
}

#[derive(Clone)]
struct Proxy {
    client: reqwest_middleware::ClientWithMiddleware,
    upstream: String,
}

async fn proxy(
    axum::extract::State(proxy): axum::extract::State<Proxy>,
) -> Result<String, ApiError> {
    Ok(proxy
        .client
        .get(&proxy.upstream)
        .send()
        .await?
        .text()
        .await
        .map_err(reqwest_middleware::Error::from)?)
}

/// Serves `proxy` on a loopback port and asks it once: the answer's
/// status and `Retry-After`.
async fn ask(state: Proxy) -> Result<(u16, Option<String>), Box<dyn std::error::Error>> {
    use std::future::IntoFuture;
    let router = axum::Router::new()
        .route("/", axum::routing::get(proxy))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(axum::serve(listener, router).into_future());
    let response = examples::http::get_response(addr, "/").await?;
    server.abort();
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    Ok((response.status().as_u16(), retry_after))
}

#[tokio::test]
async fn a_handler_answers_its_clients_open_breaker_with_503_and_its_upstreams_failure_with_502(
) -> Result<(), Box<dyn std::error::Error>> {
    let r = registry()?;
    let _registry = r.set_default();
    let breaker = r.sync_scope(UpstreamBreaker::get)?;
    let down = Server::start(|_| (503, "down".to_owned())).await?;
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(UpstreamBreaker::middleware())
        .build();
    let upstream = format!("http://{}/", down.addr());
    // Four 503s fill the window: the breaker opens for a minute.
    for _ in 0..4 {
        assert_eq!(client.get(&upstream).send().await?.status(), 503);
    }
    assert_eq!(breaker.metrics().opened, 1);

    let (status, retry_after) = ask(Proxy {
        client: client.clone(),
        upstream,
    })
    .await?;
    assert_eq!(
        status, 503,
        "the open breaker's answer, not a failed upstream's"
    );
    let wait: u64 = retry_after.as_deref().unwrap_or("none").parse()?;
    assert!((1..=60).contains(&wait), "Retry-After: {wait}");
    assert_eq!(down.hits(), 4, "refused without a request");
    assert_eq!(breaker.metrics().rejected, 1);

    // An upstream that cannot be reached fails as reqwest's error, which
    // `try_from` gives back unchanged: 502, and the breaker was not asked.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let unreachable = format!("http://{}/", closed.local_addr()?);
    drop(closed);
    let plain = reqwest_middleware::ClientBuilder::new(reqwest::Client::new()).build();
    let (status, retry_after) = ask(Proxy {
        client: plain,
        upstream: unreachable,
    })
    .await?;
    assert_eq!((status, retry_after), (502, None));
    Ok(())
}

#[tokio::test]
async fn try_from_takes_a_rejection_out_and_gives_any_other_error_back_unchanged(
) -> Result<(), Box<dyn std::error::Error>> {
    let r = registry()?;
    let _registry = r.set_default();
    let server = Server::failing_first(0, "ok").await?;
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(UpstreamRate::middleware())
        .with(UpstreamRetry::middleware())
        .build();
    let url = format!("http://{}/", server.addr());
    assert_eq!(client.get(&url).send().await?.status(), 200);
    let limited = client.get(&url).send().await.expect_err("refused");
    assert!(matches!(
        Error::from_middleware(&limited),
        Some(Error::RateLimitExceeded { .. })
    ));
    assert!(matches!(
        Error::try_from(limited),
        Ok(Error::RateLimitExceeded { spec, .. }) if spec == UpstreamRate::NAME
    ));

    // Another middleware's error (the retry's refusal of a body it cannot
    // copy) is no resilience error, and comes back as it was.
    let chunks: Vec<Result<&'static str, std::io::Error>> = vec![Ok("a")];
    let body = reqwest::Body::wrap_stream(futures_util::stream::iter(chunks));
    let streaming = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(UpstreamRetry::middleware())
        .build();
    let refused = streaming
        .post(&url)
        .body(body)
        .send()
        .await
        .expect_err("refused");
    assert!(Error::from_middleware(&refused).is_none());
    let back = Error::try_from(refused).expect_err("not a resilience error");
    assert!(
        matches!(&back, reqwest_middleware::Error::Middleware(e) if e.is::<NotRetryable>()),
        "{back}"
    );
    assert_eq!(
        server.hits(),
        1,
        "the refused and the limited were not sent"
    );
    Ok(())
}
