//! Layers on an HTTP server's service: a request they refuse is answered
//! with the status a client expects (429, 503, 504, with `Retry-After` when
//! the wait is known), the service's own errors pass unchanged, and the
//! upstream hits say which requests reached the handler.

#![allow(clippy::expect_used, clippy::unwrap_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::*;

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{Response, StatusCode};
use resilient_core::layer::{Layered, RespondLayer};
use resilient_core::{
    CircuitBreakerSpec, ConcurrencyLimitSpec, RateLimiterSpec, Registry, RetrySpec, Spec,
    TimeoutSpec,
};
use tokio::time::Instant;
use tower::{Layer, Service, ServiceBuilder, ServiceExt};

#[derive(RateLimiterSpec)]
#[spec("http_layers.rate")]
struct ApiRate;

#[derive(CircuitBreakerSpec)]
#[spec("http_layers.breaker", classify = http)]
struct ApiBreaker;

#[derive(ConcurrencyLimitSpec)]
#[spec("http_layers.limit")]
struct ApiLimit;

#[derive(TimeoutSpec)]
#[spec("http_layers.timeout")]
struct ApiTimeout;

fn registry() -> Registry {
    build(
        Registry::builder()
            .spec::<ApiRate>()
            .spec::<ApiBreaker>()
            .spec::<ApiLimit>()
            .spec::<ApiTimeout>(),
        vec![
            (
                ApiRate::PATH,
                table([
                    ("limit_for_period", int(1)),
                    ("limit_refresh_period", s("1500ms")),
                ]),
            ),
            (ApiBreaker::PATH, breaker_section(50, 2, "30s", 2)),
            (ApiLimit::PATH, table([("limit", int(1))])),
            (ApiTimeout::PATH, table([("duration", s("1s"))])),
        ],
    )
}

/// A handler as axum's routes are services: `Infallible` errors, a
/// response for everything. Answers `status` after `took`, counting hits.
#[derive(Clone)]
struct Handler {
    hits: Arc<AtomicUsize>,
    status: u16,
    took: Duration,
}

impl Handler {
    fn new(status: u16, took: Duration) -> Self {
        Self {
            hits: Arc::new(AtomicUsize::new(0)),
            status,
            took,
        }
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

impl Service<u64> for Handler {
    type Response = Response<String>;
    type Error = Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Response<String>, Infallible>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, id: u64) -> Self::Future {
        self.hits.fetch_add(1, Ordering::SeqCst);
        let (status, took) = (self.status, self.took);
        Box::pin(async move {
            if !took.is_zero() {
                tokio::time::sleep(took).await;
            }
            let mut response = Response::new(format!("pet {id}"));
            *response.status_mut() = StatusCode::from_u16(status).unwrap();
            Ok(response)
        })
    }
}

fn retry_after(r: &Response<String>) -> Option<&str> {
    r.headers()
        .get(http::header::RETRY_AFTER)
        .map(|v| v.to_str().unwrap())
}

#[tokio::test(start_paused = true)]
async fn a_rate_limit_answers_429_with_retry_after_in_whole_seconds() {
    let r = registry();
    let _registry = r.set_default();
    let handler = Handler::new(200, Duration::ZERO);
    let mut api = RespondLayer::new(ApiRate::layer()).layer(handler.clone());
    let ok = api.ready().await.unwrap().call(1).await.unwrap();
    assert_eq!((ok.status(), ok.body().as_str()), (StatusCode::OK, "pet 1"));
    let refused = api.ready().await.unwrap().call(2).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(retry_after(&refused), Some("2"), "1.5 s rounded up");
    assert_eq!(refused.body(), "");
    assert_eq!(handler.hits(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_open_breaker_answers_503_with_the_rest_of_its_wait() {
    let r = registry();
    let _registry = r.set_default();
    // The upstream answers 500: with `classify = http` each is a failure.
    let handler = Handler::new(500, Duration::ZERO);
    let mut api = RespondLayer::new(ApiBreaker::layer()).layer(handler.clone());
    for _ in 0..2 {
        let failed = api.ready().await.unwrap().call(1).await.unwrap();
        assert_eq!(
            failed.status(),
            StatusCode::INTERNAL_SERVER_ERROR,
            "passed on"
        );
    }
    tokio::time::advance(Duration::from_secs(10)).await;
    let refused = api.ready().await.unwrap().call(1).await.unwrap();
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(retry_after(&refused), Some("20"), "30 s open, 10 s gone");
    assert_eq!(handler.hits(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_full_limit_answers_503_and_a_timeout_504() {
    let r = registry();
    let _registry = r.set_default();
    let handler = Handler::new(200, Duration::from_secs(3));
    let api = RespondLayer::new(
        ServiceBuilder::new()
            .layer(ApiBreaker::layer())
            .layer(ApiLimit::layer())
            .layer(ApiTimeout::layer()),
    )
    .layer(handler.clone());
    let start = Instant::now();
    let slow = tokio::spawn(api.clone().oneshot(1));
    tokio::task::yield_now().await;
    let full = api.clone().oneshot(2).await.unwrap();
    assert_eq!(full.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(retry_after(&full), None, "a limit knows no wait");
    let timed_out = slow.await.unwrap().unwrap();
    assert_eq!(timed_out.status(), StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    assert_eq!(handler.hits(), 1);
    // The breaker inside the same stack counted the timeout, not the
    // limit's rejection.
    let window = r.sync_scope(ApiBreaker::get).unwrap().metrics().window;
    assert_eq!((window.total, window.failures), (1, 1));
}

#[derive(Debug, thiserror::Error)]
#[error("handler failed")]
struct HandlerError;

#[tokio::test]
async fn the_service_s_own_error_passes_unchanged() {
    let r = registry();
    let _registry = r.set_default();
    let failing =
        tower::service_fn(|_: u64| async { Err::<Response<String>, HandlerError>(HandlerError) });
    let e = RespondLayer::new(ApiLimit::layer())
        .layer(failing)
        .oneshot(1)
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "handler failed");
}

/// On an axum route (whose response body is not `Sync`), a breaker with
/// `classify = http` counts the handler's 500s as failures: two of them
/// open it (window 2, 50 %), and the third request is answered 503 with
/// `Retry-After` without reaching the handler.
#[tokio::test(start_paused = true)]
async fn a_breaker_classifying_http_on_an_axum_route_opens_on_its_500s() {
    use axum::body::Body;
    use axum::routing::get;

    let r = registry();
    let _registry = r.set_default();
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&hits);
    let app = axum::Router::new().route(
        "/pets/{id}",
        get(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            async { (StatusCode::INTERNAL_SERVER_ERROR, "down") }
        })
        .route_layer(RespondLayer::new(ApiBreaker::layer())),
    );
    let mut statuses = Vec::new();
    let mut retry_after = None;
    for _ in 0..3 {
        let request = http::Request::get("/pets/7").body(Body::empty()).unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        statuses.push(response.status().as_u16());
        retry_after = response.headers().get("retry-after").cloned();
    }
    assert_eq!(statuses, [500, 500, 503]);
    assert_eq!(retry_after.unwrap(), "30");
    assert_eq!(hits.load(Ordering::SeqCst), 2, "the third never reached it");
}

#[derive(RetrySpec)]
#[spec("http_layers.retry", classify = http)]
struct ApiRetry;

/// A retry with `classify = http` of a fn that returns an axum response
/// (a body that is not `Sync`) gives up with the last response kept, and
/// hands it back by value.
#[tokio::test(start_paused = true)]
async fn a_retry_keeps_the_last_axum_response_it_gave_up_on() {
    use axum::response::IntoResponse;

    let r = registry_with_retry();
    let _registry = r.set_default();
    let calls = AtomicUsize::new(0);
    let handle = ApiRetry::get().unwrap();
    let out = handle
        .call(|| async {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            Ok::<_, resilient_core::Error>(
                (StatusCode::SERVICE_UNAVAILABLE, format!("down {n}")).into_response(),
            )
        })
        .await;
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    let Err(resilient_core::Error::RetryExhausted(exhausted)) = out else {
        panic!("the retry gives up");
    };
    let failed = exhausted
        .last
        .downcast::<resilient_core::FailedValue>()
        .unwrap_or_else(|e| panic!("a failed value: {e}"));
    assert_eq!(failed.status(), Some(503));
    assert!(
        failed.value::<http::Response<String>>().is_none(),
        "not a String body"
    );
    let response = failed
        .into_value::<axum::response::Response>()
        .unwrap_or_else(|e| panic!("kept: {e}"));
    let body = axum::body::to_bytes(response.into_body(), 64)
        .await
        .unwrap();
    assert_eq!(&body[..], b"down 2");
}

fn registry_with_retry() -> Registry {
    build(
        Registry::builder().spec::<ApiRetry>(),
        vec![(
            ApiRetry::PATH,
            table([("delay", s("10ms")), ("attempts", int(2))]),
        )],
    )
}
