//! Adaptive throttling of first calls (`throttle.first_calls = true`)
//! through every door a retry spec has: the attribute on an `async fn`, a
//! blocking fn and a fn returning a stream, the handle, the retry layer,
//! the `StackLayer` and both middleware. One spec, one window: failures
//! fill it, then each door's calls are refused before their first attempt
//! (the body not run), with `Error::Throttled` in the door's own error
//! type, each refusal counted once. On tokio's paused clock, `fastrand`
//! seeded on a current-thread runtime.

#![allow(clippy::expect_used, clippy::unwrap_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::capture::Meters;
use support::*;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures_util::StreamExt;
use resilient_core::layer::middleware::Middlewares;
use resilient_core::layer::{LayerError, Layered, StackLayer};
use resilient_core::stream::Stream;
use resilient_core::{retryable, Error, RetrySpec, Spec};
use tower::{Layer, ServiceExt};

#[derive(RetrySpec)]
#[spec("doors.retry")]
struct Doors;

#[derive(Debug, thiserror::Error)]
enum ApiError {
    #[error("upstream failed")]
    Upstream,
    #[error(transparent)]
    Resilience(#[from] Error),
}

impl LayerError for ApiError {
    fn resilience(&self) -> Option<&Error> {
        match self {
            ApiError::Resilience(e) => Some(e),
            ApiError::Upstream => None,
        }
    }
}

/// The body every door calls: counts its runs and succeeds.
static HITS: AtomicU64 = AtomicU64::new(0);

fn hit() -> Result<u64, ApiError> {
    Ok(HITS.fetch_add(1, Ordering::Relaxed))
}

#[retryable(Doors)]
async fn async_fn() -> Result<u64, ApiError> {
    hit()
}

#[retryable(Doors)]
fn blocking_fn() -> Result<u64, ApiError> {
    hit()
}

#[retryable(Doors)]
fn stream_fn() -> impl Stream<Item = Result<u64, ApiError>> {
    futures_util::stream::once(async { hit() })
}

/// The middleware's last middleware: the body, sending nothing.
struct Answer;

#[async_trait::async_trait]
impl reqwest_middleware::Middleware for Answer {
    async fn handle(
        &self,
        _: reqwest::Request,
        _: &mut http::Extensions,
        _: reqwest_middleware::Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let _ = hit();
        Ok(reqwest::Response::from(http::Response::new(
            Vec::<u8>::new(),
        )))
    }
}

/// Whether a door's answer is a refusal by adaptive throttling, and the
/// answer is one of the two a door may give here.
fn throttled(answer: Result<(), Option<&Error>>) -> bool {
    match answer {
        Ok(()) => false,
        Err(Some(Error::Throttled { spec, .. })) => {
            assert_eq!(*spec, "Doors");
            true
        }
        Err(other) => panic!("neither a success nor a refusal: {other:?}"),
    }
}

fn api(out: &Result<u64, ApiError>) -> Result<(), Option<&Error>> {
    match out {
        Ok(_) => Ok(()),
        Err(e) => Err(e.resilience()),
    }
}

/// One call through door `door`; whether it was refused.
async fn call(door: &str) -> bool {
    match door {
        "async fn" => throttled(api(&async_fn().await)),
        "blocking fn" => throttled(api(&blocking_fn())),
        "stream" => {
            let items: Vec<_> = stream_fn().collect().await;
            assert_eq!(items.len(), 1, "one item, or the refusal");
            throttled(api(&items[0]))
        }
        "handle" => {
            let out: Result<u64, ApiError> = match Doors::get() {
                Ok(h) => h.call(|| async { hit() }).await,
                Err(e) => Err(e.into()),
            };
            throttled(api(&out))
        }
        "retry layer" => {
            let svc = Doors::layer().layer(tower::service_fn(|()| async { hit() }));
            throttled(api(&svc.oneshot(()).await))
        }
        "stack layer" => {
            let svc = StackLayer::new()
                .spec::<Doors>()
                .layer(tower::service_fn(|()| async { hit() }));
            throttled(api(&svc.oneshot(()).await))
        }
        "middleware" | "stack middleware" => {
            let builder = reqwest_middleware::ClientBuilder::new(reqwest::Client::new());
            let builder = if door == "middleware" {
                builder.with(Doors::middleware())
            } else {
                builder.with(StackLayer::<_, reqwest::Request>::new().spec::<Doors>())
            };
            let client = builder.with(Answer).build();
            match client.get("http://pets.example/1").send().await {
                Ok(_) => throttled(Ok(())),
                Err(e) => throttled(Err(Error::from_middleware(&e))),
            }
        }
        other => unreachable!("{other}"),
    }
}

const DOORS: [&str; 8] = [
    "async fn",
    "blocking fn",
    "stream",
    "handle",
    "retry layer",
    "stack layer",
    "middleware",
    "stack middleware",
];

/// 100 failures fill the window (nothing accepted: a refusal's
/// probability is then above 0.99); then 20 calls through each door: the
/// refused ones never run the body, every call is counted once, as a
/// success or a rejection, and each refusal once as a give-up with
/// `reason = "throttled_first_call"`.
#[test]
fn every_door_refuses_first_calls_where_its_retry_call_starts() {
    fastrand::seed(9);
    let meters = Meters::default();
    let r = metrics::with_local_recorder(&meters, || {
        registry::<Doors>(metered(with(
            table([("delay", s("1ms")), ("attempts", int(0))]),
            "throttle",
            table([
                ("k", float(2.0)),
                ("window", s("1h")),
                ("first_calls", boolean(true)),
            ]),
        )))
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let _recorder = metrics::set_default_local_recorder(&meters);
    let _registry = r.set_default();
    let refused_total = Arc::new(AtomicU64::new(0));
    rt.block_on(async {
        let handle = Doors::get().unwrap();
        for _ in 0..100 {
            let out: Result<u64, ApiError> =
                handle.call(|| async { Err(ApiError::Upstream) }).await;
            if let Err(ApiError::Resilience(Error::Throttled { .. })) = out {
                refused_total.fetch_add(1, Ordering::Relaxed);
            }
        }
        for door in DOORS {
            let hits_before = HITS.load(Ordering::Relaxed);
            let mut refused = 0;
            for _ in 0..20 {
                if call(door).await {
                    refused += 1;
                }
            }
            let ran = HITS.load(Ordering::Relaxed) - hits_before;
            println!("{door}: 20 calls, {refused} refused, the body ran {ran} times");
            assert_eq!(
                ran + refused,
                20,
                "{door}: a refused call never runs the body"
            );
            assert!(refused >= 15, "{door}: {refused} of 20 refused");
            refused_total.fetch_add(refused, Ordering::Relaxed);
        }
    });
    let refused = refused_total.load(Ordering::Relaxed);
    let key = ("Doors", "doors.retry", "retry");
    let calls: u64 = ["success", "failure", "rejected"]
        .iter()
        .map(|o| meters.calls(key, o))
        .sum();
    println!(
        "in all: {} calls, {refused} refused; counted success {}, failure {}, rejected {}",
        100 + 20 * DOORS.len(),
        meters.calls(key, "success"),
        meters.calls(key, "failure"),
        meters.calls(key, "rejected"),
    );
    assert_eq!(calls, 100 + 20 * DOORS.len() as u64);
    assert_eq!(meters.calls(key, "rejected"), refused);
    assert_eq!(
        meters.counter(
            "resilient_retry_exhausted_total",
            &[
                ("spec", "Doors"),
                ("path", Doors::PATH),
                ("reason", "throttled_first_call")
            ],
        ),
        Some(refused)
    );
}
