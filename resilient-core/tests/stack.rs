//! A stack of specs as one tower layer (`StackLayer`): the order and the
//! nesting of the attribute chain, what each part counts, what a dropped
//! response gives back, and keys read from the request; counted (upstream
//! hits, places in use, breaker windows), on tokio's paused clock.

#![allow(clippy::expect_used, clippy::unwrap_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::*;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::FutureExt;
use resilient_core::keyed::KeyRef;
use resilient_core::layer::StackLayer;
use resilient_core::{
    BoxError, CircuitBreakerSpec, ConcurrencyLimitSpec, Error, Registry, RetrySpec, Spec,
    TimeoutSpec,
};
use tokio::sync::Notify;
use tower::{Layer, Service, ServiceExt};

/// A dependency behind a service: counts hits and responses dropped
/// unfinished; fails its first `fail_first` requests; takes `took` (on
/// tokio's clock) for its first `slow_first` requests, or, with a gate,
/// waits until the gate is opened.
#[derive(Clone, Default)]
struct Upstream {
    counts: Arc<Counts>,
    took: Duration,
    gate: Option<Arc<Notify>>,
}

#[derive(Default)]
struct Counts {
    hits: AtomicUsize,
    fail_first: AtomicUsize,
    slow_first: AtomicUsize,
    dropped: AtomicUsize,
}

impl Upstream {
    fn hits(&self) -> usize {
        self.counts.hits.load(Ordering::SeqCst)
    }

    fn failing_first(self, n: usize) -> Self {
        self.counts.fail_first.store(n, Ordering::SeqCst);
        self
    }

    fn slow_first(mut self, n: usize, took: Duration) -> Self {
        self.counts.slow_first.store(n, Ordering::SeqCst);
        self.took = took;
        self
    }
}

struct Unfinished(Arc<Counts>, bool);

impl Drop for Unfinished {
    fn drop(&mut self) {
        if !self.1 {
            self.0.dropped.fetch_add(1, Ordering::SeqCst);
        }
    }
}

fn take_one(n: &AtomicUsize) -> bool {
    n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

impl<B> Service<http::Request<B>> for Upstream {
    type Response = u64;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<u64, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let counts = Arc::clone(&self.counts);
        counts.hits.fetch_add(1, Ordering::SeqCst);
        let fail = take_one(&counts.fail_first);
        let slow = take_one(&counts.slow_first);
        let (took, gate) = (self.took, self.gate.clone());
        let id: u64 = req
            .uri()
            .path()
            .trim_start_matches('/')
            .parse()
            .unwrap_or(0);
        Box::pin(async move {
            let mut unfinished = Unfinished(Arc::clone(&counts), false);
            match gate {
                Some(gate) => gate.notified().await,
                None if slow => tokio::time::sleep(took).await,
                None => tokio::task::yield_now().await,
            }
            unfinished.1 = true;
            if fail {
                Err("upstream failed".into())
            } else {
                Ok(id)
            }
        })
    }
}

/// A request for `id` to `host`.
fn get(host: &str, id: u64) -> http::Request<()> {
    http::Request::get(format!("http://{host}/{id}"))
        .body(())
        .expect("a valid request")
}

/// The resilience error a stack's `BoxError` holds.
fn resilience(e: &BoxError) -> &Error {
    e.downcast_ref::<Error>()
        .unwrap_or_else(|| panic!("not a resilience error: {e}"))
}

#[derive(RetrySpec)]
#[spec("stack.retry")]
struct PetRetry;

#[derive(CircuitBreakerSpec)]
#[spec("stack.breaker")]
struct PetBreaker;

#[derive(ConcurrencyLimitSpec)]
#[spec("stack.limit")]
struct PetLimit;

#[derive(TimeoutSpec)]
#[spec("stack.timeout")]
struct PetTimeout;

#[derive(CircuitBreakerSpec)]
#[spec("stack.host_breaker")]
struct HostBreaker;

/// The four specs: 2 retries 10 ms apart, a breaker over 10 calls (4 at
/// least), `limit` in flight (blocking up to `max_wait` if given), and a
/// timeout of 100 ms.
fn four(limit: i128, max_wait: Option<&str>) -> Registry {
    let limit = match max_wait {
        Some(max_wait) => table([
            ("limit", int(limit)),
            ("policy", s("block")),
            ("max_wait", s(max_wait)),
        ]),
        None => table([("limit", int(limit))]),
    };
    build(
        Registry::builder()
            .spec::<PetRetry>()
            .spec::<PetBreaker>()
            .spec::<PetLimit>()
            .spec::<PetTimeout>()
            .spec::<HostBreaker>(),
        vec![
            (
                PetRetry::PATH,
                table([("attempts", int(2)), ("delay", s("10ms"))]),
            ),
            (PetBreaker::PATH, breaker_section(50, 4, "1h", 10)),
            (PetLimit::PATH, limit),
            (PetTimeout::PATH, table([("duration", s("100ms"))])),
            (
                HostBreaker::PATH,
                with(
                    breaker_section(50, 2, "1h", 10),
                    "keys",
                    table([("max", int(8))]),
                ),
            ),
        ],
    )
}

/// The four specs as one layer, returned as a layer for `Upstream`.
fn stack(
) -> impl Layer<Upstream, Service: Service<http::Request<()>, Response = u64, Error = BoxError> + Clone>
{
    StackLayer::new()
        .spec::<PetRetry>()
        .spec::<PetBreaker>()
        .spec::<PetLimit>()
        .spec::<PetTimeout>()
}

#[tokio::test(start_paused = true)]
async fn each_attempt_of_a_stack_s_retry_passes_the_specs_inside_it() {
    let r = four(4, None);
    let _registry = r.set_default();
    let breaker = r.sync_scope(PetBreaker::get).expect("breaker");
    let upstream = Upstream::default().failing_first(2);
    let mut pets = StackLayer::new()
        .spec::<PetRetry>()
        .spec::<PetBreaker>()
        .spec::<PetLimit>()
        .spec::<PetTimeout>()
        .layer(upstream.clone());
    let answer = pets.ready().await.unwrap().call(get("pets", 7)).await;
    assert_eq!(answer.unwrap(), 7, "the third attempt answers");
    assert_eq!(upstream.hits(), 3);
    // The breaker is inside the retry: it saw each attempt.
    let window = breaker.metrics().window;
    assert_eq!((window.total, window.failures), (3, 2));
    let limit = r.sync_scope(PetLimit::get).expect("limit");
    assert_eq!(limit.in_use(), 0);
}

#[tokio::test(start_paused = true)]
async fn an_open_breaker_inside_a_stack_s_retry_is_not_retried() {
    let r = four(4, None);
    let _registry = r.set_default();
    let breaker = r.sync_scope(PetBreaker::get).expect("breaker");
    breaker.force_open();
    let upstream = Upstream::default();
    let mut pets = stack().layer(upstream.clone());
    let e = pets
        .ready()
        .await
        .unwrap()
        .call(get("pets", 1))
        .await
        .unwrap_err();
    assert!(
        matches!(resilience(&e), Error::CallNotPermitted { .. }),
        "{e}"
    );
    assert_eq!(upstream.hits(), 0);
    assert_eq!(breaker.metrics().rejected, 1, "asked once: not retried");
}

#[tokio::test(start_paused = true)]
async fn a_timeout_inside_a_stack_s_retry_is_retried_and_counted_by_the_breaker() {
    let r = four(4, None);
    let _registry = r.set_default();
    let breaker = r.sync_scope(PetBreaker::get).expect("breaker");
    let upstream = Upstream::default().slow_first(1, Duration::from_secs(1));
    let mut pets = stack().layer(upstream.clone());
    let started = tokio::time::Instant::now();
    let answer = pets.ready().await.unwrap().call(get("pets", 3)).await;
    assert_eq!(answer.unwrap(), 3);
    assert_eq!(upstream.hits(), 2);
    assert_eq!(
        upstream.counts.dropped.load(Ordering::SeqCst),
        1,
        "the slow attempt was dropped at its timeout"
    );
    // 100 ms timeout, 10 ms wait, then the answer.
    assert!(started.elapsed() < Duration::from_millis(200));
    let window = breaker.metrics().window;
    assert_eq!(
        (window.total, window.failures),
        (2, 1),
        "the timeout is a failure"
    );
}

#[tokio::test(start_paused = true)]
async fn a_full_limit_in_a_stack_rejects_and_a_dropped_response_gives_its_place_back() {
    let r = four(1, None);
    let _registry = r.set_default();
    let limit = r.sync_scope(PetLimit::get).expect("limit");
    let breaker = r.sync_scope(PetBreaker::get).expect("breaker");
    let gate = Arc::new(Notify::new());
    let upstream = Upstream {
        gate: Some(Arc::clone(&gate)),
        ..Upstream::default()
    };
    let mut pets = stack().layer(upstream.clone());
    let mut held = Box::pin(pets.ready().await.unwrap().call(get("pets", 1)));
    assert!(held.as_mut().now_or_never().is_none(), "waits at the gate");
    assert_eq!(limit.in_use(), 1);
    // The limit is full: each attempt is rejected, retried, and gives up.
    let e = pets
        .ready()
        .await
        .unwrap()
        .call(get("pets", 2))
        .await
        .unwrap_err();
    assert!(matches!(resilience(&e), Error::RetryExhausted(_)), "{e}");
    assert_eq!(upstream.hits(), 1);
    // The breaker ignored the limit's rejections.
    assert_eq!(breaker.metrics().window.total, 0);
    drop(held);
    assert_eq!(
        limit.in_use(),
        0,
        "the dropped response gave its place back"
    );
    assert_eq!(upstream.counts.dropped.load(Ordering::SeqCst), 1);
    assert_eq!(breaker.metrics().window.total, 0, "cancelled: not counted");
}

#[tokio::test(start_paused = true)]
async fn a_response_future_dropped_before_its_first_poll_takes_nothing() {
    let r = four(1, None);
    let _registry = r.set_default();
    let limit = r.sync_scope(PetLimit::get).expect("limit");
    let upstream = Upstream::default();
    let mut pets = stack().layer(upstream.clone());
    let unpolled = pets.ready().await.unwrap().call(get("pets", 1));
    assert_eq!(limit.in_use(), 0, "admitted at the first poll");
    drop(unpolled);
    assert_eq!(upstream.hits(), 0);
    let answer = pets.ready().await.unwrap().call(get("pets", 2)).await;
    assert_eq!(answer.unwrap(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_block_limit_in_a_stack_waits_in_the_response_future() {
    let r = four(1, Some("1s"));
    let _registry = r.set_default();
    let limit = r.sync_scope(PetLimit::get).expect("limit");
    let upstream = Upstream::default().slow_first(1, Duration::from_millis(50));
    let pets = StackLayer::new().spec::<PetLimit>().layer(upstream.clone());
    let (a, b) = tokio::join!(
        pets.clone().oneshot(get("pets", 1)),
        pets.clone().oneshot(get("pets", 2)),
    );
    assert_eq!((a.unwrap(), b.unwrap()), (1, 2));
    assert_eq!(upstream.hits(), 2);
    assert_eq!(limit.in_use(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_keyed_breaker_in_a_stack_opens_for_one_host_only() {
    let r = four(4, None);
    let _registry = r.set_default();
    let upstream = Upstream::default().failing_first(2);
    let mut hosts = StackLayer::new()
        .keyed::<HostBreaker, _>(|req: &http::Request<()>| {
            KeyRef::Text(req.uri().host().unwrap_or(""))
        })
        .layer(upstream.clone());
    for id in 0..2 {
        let e = hosts
            .ready()
            .await
            .unwrap()
            .call(get("down.example", id))
            .await
            .unwrap_err();
        assert_eq!(e.to_string(), "upstream failed");
    }
    let e = hosts
        .ready()
        .await
        .unwrap()
        .call(get("down.example", 9))
        .await
        .unwrap_err();
    assert!(
        matches!(resilience(&e), Error::CallNotPermitted { .. }),
        "{e}"
    );
    // The other host has a breaker of its own, closed.
    let answer = hosts
        .ready()
        .await
        .unwrap()
        .call(get("up.example", 5))
        .await;
    assert_eq!(answer.unwrap(), 5);
    assert_eq!(upstream.hits(), 3);
    let keys = keys::<HostBreaker>(&r);
    assert_eq!(keys.count, 2, "{keys:?}");
}
