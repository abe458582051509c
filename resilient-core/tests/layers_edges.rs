//! The tower layers at their edges, each test a promise of the module
//! docs, the README or tower's `Service` contract: a response future
//! dropped before its first poll gives back and counts what its request
//! took; the user's own error type shows the layers their rejections; a
//! retry drops a service whose readiness failed, and spends a budget token
//! only when its retry starts.

#![allow(clippy::expect_used, clippy::unwrap_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::capture::Meters;
use support::*;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use futures_util::FutureExt;
use resilient_core::circuit_breaker::State;
use resilient_core::layer::{LayerError, Layered};
use resilient_core::{
    BoxError, CircuitBreakerSpec, ConcurrencyLimitSpec, Error, RateLimiterSpec, Registry,
    RetrySpec, Spec,
};
use tokio::time::{Instant, Sleep};
use tower::{Layer, Service, ServiceBuilder, ServiceExt};

/// A dependency: counts hits, fails its first `fail_first` requests,
/// answers after `took` (on tokio's clock).
#[derive(Clone, Default)]
struct Dep {
    hits: Arc<AtomicUsize>,
    fail_first: Arc<AtomicUsize>,
    took: Duration,
}

impl Dep {
    fn taking(took: Duration) -> Self {
        Self {
            took,
            ..Self::default()
        }
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

impl Service<u64> for Dep {
    type Response = u64;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<u64, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, id: u64) -> Self::Future {
        self.hits.fetch_add(1, Ordering::SeqCst);
        let fail = self
            .fail_first
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        let took = self.took;
        Box::pin(async move {
            if !took.is_zero() {
                tokio::time::sleep(took).await;
            }
            if fail {
                Err("upstream failed".into())
            } else {
                Ok(id)
            }
        })
    }
}

const OUTCOMES: [&str; 6] = [
    "success",
    "failure",
    "ignored",
    "rejected",
    "timed_out",
    "cancelled",
];

/// The outcomes `meters` counted for `spec`, each with its count, those
/// counted at least once.
fn outcomes(meters: &Meters, spec: (&str, &str, &str)) -> Vec<(&'static str, u64)> {
    OUTCOMES
        .iter()
        .map(|o| (*o, meters.calls(spec, o)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

// --- rate limiter: a reservation taken in `call` -------------------------

#[derive(RateLimiterSpec)]
#[spec("edges.rate")]
struct Rate;

/// tower's contract (`Service::poll_ready`): a resource reserved for a call
/// must be released "if the future returned by `call` is dropped before it
/// is polled". The rate limiter reserves a `token_bucket` permit in `call`;
/// dropped unpolled, or after one poll, the response future gives it back,
/// and the next caller gets it.
#[tokio::test(start_paused = true)]
async fn a_reserved_rate_permit_comes_back_when_its_future_is_dropped_unpolled() {
    let r = registry::<Rate>(table([
        ("type", s("token_bucket")),
        ("limit_for_period", int(1)),
        ("limit_refresh_period", s("1s")),
        ("max_wait", s("1s")),
    ]));
    let _registry = r.set_default();
    let dep = Dep::default();
    let mut svc = Rate::layer().layer(dep.clone());

    // Control: the reservation's future polled once (it waits), then
    // dropped: its permit comes back, and the next request reserves it.
    svc.ready().await.unwrap().call(1).await.unwrap();
    let mut waiting = Box::pin(svc.ready().await.unwrap().call(2));
    assert!(
        (&mut waiting).now_or_never().is_none(),
        "waits for its permit"
    );
    drop(waiting);
    let start = Instant::now();
    svc.ready().await.unwrap().call(3).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    assert_eq!(
        dep.hits(),
        2,
        "the dropped request never reached the dependency"
    );

    // The same, the future dropped before its first poll (a Buffer whose
    // caller left, a select that lost, a retry dropped at once).
    tokio::time::advance(Duration::from_secs(10)).await;
    svc.ready().await.unwrap().call(4).await.unwrap();
    let unpolled = svc.ready().await.unwrap().call(5);
    drop(unpolled);
    let start = Instant::now();
    let next = svc.ready().await.unwrap().call(6).await;
    assert!(
        next.is_ok(),
        "the unpolled reservation was never given back: {:?}",
        next.map_err(|e| e.to_string())
    );
    assert_eq!(start.elapsed(), Duration::from_secs(1));
}

// --- exactly one outcome per request ------------------------------------

#[derive(ConcurrencyLimitSpec)]
#[spec("edges.limit")]
struct Limit;

/// README, Metrics: "`resilient_calls_total` ... exactly one outcome per
/// call (`cancelled`: dropped before it ended)". A request that must wait
/// (a full `block` limit, a rate reservation) and is dropped before its
/// first poll counts as cancelled.
#[tokio::test(start_paused = true)]
async fn a_waiting_request_dropped_unpolled_still_counts_one_outcome() {
    let meters = Meters::default();
    let r = metrics::with_local_recorder(&meters, || {
        build(
            Registry::builder().spec::<Limit>().spec::<Rate>(),
            vec![
                (
                    Limit::PATH,
                    metered(table([
                        ("limit", int(1)),
                        ("policy", s("block")),
                        ("max_wait", s("10s")),
                    ])),
                ),
                (
                    Rate::PATH,
                    metered(table([
                        ("limit_for_period", int(1)),
                        ("limit_refresh_period", s("1s")),
                        ("max_wait", s("10s")),
                    ])),
                ),
            ],
        )
    });
    let _registry = r.set_default();
    // `cancelled` is registered when it first happens, with the recorder
    // in use then (README, Metrics): this one, while the calls run.
    let _recorder = metrics::set_default_local_recorder(&meters);
    let dep = Dep::taking(Duration::from_millis(100));

    let mut limited = Limit::layer().layer(dep.clone());
    let holds = limited.ready().await.unwrap().call(1);
    let waits = limited.ready().await.unwrap().call(2);
    drop(waits);
    holds.await.unwrap();

    let mut rated = Rate::layer().layer(dep.clone());
    rated.ready().await.unwrap().call(3).await.unwrap();
    let reserved = rated.ready().await.unwrap().call(4);
    drop(reserved);

    let count = |spec| outcomes(&meters, spec);
    let limit = count(("Limit", "edges.limit", "concurrency_limit"));
    let rate = count(("Rate", "edges.rate", "rate_limiter"));
    assert_eq!(
        (limit.as_slice(), rate.as_slice()),
        (
            &[("success", 1), ("cancelled", 1)][..],
            &[("success", 1), ("cancelled", 1)][..]
        ),
        "two requests reached each layer"
    );
}

// --- a user error type that wraps `resilient_core::Error` ----------------

#[derive(CircuitBreakerSpec)]
#[spec("edges.breaker")]
struct Breaker;

#[derive(RetrySpec)]
#[spec("edges.retry")]
struct Retry;

/// An error type of the user's, beside `BoxError`: it takes a resilience
/// error and shows the one it carries (`LayerError`).
#[derive(Debug, thiserror::Error)]
enum ApiError {
    #[error("the api is down")]
    Down,
    #[error(transparent)]
    Resilience(#[from] Error),
}

impl LayerError for ApiError {
    fn resilience(&self) -> Option<&Error> {
        match self {
            ApiError::Resilience(e) => Some(e),
            ApiError::Down => None,
        }
    }
}

fn user_registry() -> Registry {
    build(
        Registry::builder()
            .spec::<Breaker>()
            .spec::<Limit>()
            .spec::<Retry>(),
        vec![
            (Breaker::PATH, breaker_section(50, 4, "1h", 4)),
            (Limit::PATH, table([("limit", int(1))])),
            (
                Retry::PATH,
                table([("attempts", int(3)), ("delay", s("100ms"))]),
            ),
        ],
    )
}

/// A handler of the user's error type: answers after a second.
fn api(
    hits: &Arc<AtomicUsize>,
) -> impl Service<u64, Response = u64, Error = ApiError, Future: Send> + Clone {
    let hits = Arc::clone(hits);
    tower::service_fn(move |id: u64| {
        hits.fetch_add(1, Ordering::SeqCst);
        async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            if id == u64::MAX {
                return Err(ApiError::Down);
            }
            Ok(id)
        }
    })
}

/// Module docs: "a breaker ignores another mechanism's rejection ... as they
/// do in an attribute chain", with the user's error type too: the limit's
/// rejections inside do not open the breaker.
#[tokio::test(start_paused = true)]
async fn a_breaker_over_a_limit_ignores_the_limit_s_rejections_in_the_user_s_error_type() {
    let r = user_registry();
    let _registry = r.set_default();
    let breaker = r.sync_scope(Breaker::get).unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let stack = ServiceBuilder::new()
        .layer(Breaker::layer())
        .layer(Limit::layer())
        .service(api(&hits));
    let held = tokio::spawn(stack.clone().oneshot(0));
    tokio::task::yield_now().await;
    for id in 1..=4 {
        let e = stack.clone().oneshot(id).await.unwrap_err();
        assert!(
            matches!(
                e,
                ApiError::Resilience(Error::ConcurrencyLimitReached { .. })
            ),
            "{e:?}"
        );
    }
    held.await.unwrap().unwrap();
    assert_eq!(
        (breaker.state(), breaker.metrics().opened),
        (State::Closed, 0),
        "the limit's 4 rejections counted as the dependency's failures"
    );
}

/// Module docs: "a retry ... passes an open breaker's rejection on" (the
/// default `retry_call_not_permitted = false`), with the user's error type
/// too: at once, without a wait.
#[tokio::test(start_paused = true)]
async fn a_retry_over_an_open_breaker_passes_its_rejection_on_in_the_user_s_error_type() {
    let r = user_registry();
    let _registry = r.set_default();
    r.sync_scope(Breaker::get).unwrap().force_open();
    let hits = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let e = ServiceBuilder::new()
        .layer(Retry::layer())
        .layer(Breaker::layer())
        .service(api(&hits))
        .oneshot(1)
        .await
        .unwrap_err();
    assert!(
        matches!(e, ApiError::Resilience(Error::CallNotPermitted { .. })),
        "{e}"
    );
    assert_eq!(start.elapsed(), Duration::ZERO, "retried with waits");
}

// --- retry and the inner service's readiness ---------------------------

/// A service that fails its first request, and whose next `poll_ready`
/// fails: it is broken for good (tower: "the service is no longer able to
/// service requests and the caller should discard the service instance").
/// Counts each `poll_ready` made on an instance after it failed.
#[derive(Clone, Default)]
struct Breaks {
    hits: Arc<AtomicUsize>,
    broken: Arc<AtomicBool>,
    polled_broken: Arc<AtomicUsize>,
}

impl Service<u64> for Breaks {
    type Response = u64;
    type Error = BoxError;
    type Future = futures_util::future::Ready<Result<u64, BoxError>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        if self.broken.load(Ordering::SeqCst) {
            self.polled_broken.fetch_add(1, Ordering::SeqCst);
            return Poll::Ready(Err("still broken".into()));
        }
        if self.hits.load(Ordering::SeqCst) > 0 {
            self.broken.store(true, Ordering::SeqCst);
            return Poll::Ready(Err("connection lost".into()));
        }
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: u64) -> Self::Future {
        self.hits.fetch_add(1, Ordering::SeqCst);
        futures_util::future::ready(Err("upstream failed".into()))
    }
}

/// tower's `Service` contract: a service whose `poll_ready` failed is
/// discarded. The retry returns that error at once, as tower's own retry
/// does, and never polls the failed instance again.
#[tokio::test(start_paused = true)]
async fn a_retry_never_polls_again_a_service_whose_poll_ready_failed() {
    let r = registry::<Retry>(table([("attempts", int(3)), ("delay", s("100ms"))]));
    let _registry = r.set_default();
    let dep = Breaks::default();
    let e = Retry::layer()
        .layer(dep.clone())
        .oneshot(1)
        .await
        .unwrap_err();
    assert_eq!(
        dep.polled_broken.load(Ordering::SeqCst),
        0,
        "poll_ready called on a failed service; the call ended with: {e}"
    );
}

/// A service busy for 5 s after each request: `poll_ready` is pending
/// until then (a full connection pool, a Buffer's full channel).
struct BusyAfterCall {
    start: Instant,
    calls: Arc<Mutex<Vec<Duration>>>,
    ready_at: Arc<Mutex<Option<Instant>>>,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl Clone for BusyAfterCall {
    fn clone(&self) -> Self {
        Self {
            start: self.start,
            calls: Arc::clone(&self.calls),
            ready_at: Arc::clone(&self.ready_at),
            sleep: None,
        }
    }
}

impl Service<u64> for BusyAfterCall {
    type Response = u64;
    type Error = BoxError;
    type Future = futures_util::future::Ready<Result<u64, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        let at = *self.ready_at.lock().unwrap();
        if let Some(at) = at {
            let sleep = self
                .sleep
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
            ready!(sleep.as_mut().poll(cx));
        }
        self.sleep = None;
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: u64) -> Self::Future {
        self.calls.lock().unwrap().push(self.start.elapsed());
        *self.ready_at.lock().unwrap() = Some(Instant::now() + Duration::from_secs(5));
        futures_util::future::ready(Err("upstream failed".into()))
    }
}

#[derive(RetrySpec)]
#[spec("edges.budget_retry")]
struct BudgetRetry;

/// retry/mod.rs docs: "A budget token is spent when its retry starts: a
/// call dropped during the wait before it gives the token back." A retry
/// whose delay is over but whose service is not ready yet has not started:
/// dropped then, it gives its token back.
#[tokio::test(start_paused = true)]
async fn a_retry_dropped_before_its_attempt_started_gives_its_budget_token_back() {
    let r = registry::<BudgetRetry>(table([
        ("attempts", int(3)),
        ("delay", s("100ms")),
        (
            "retry_budget",
            table([("tokens_initial", int(5)), ("ratio", int(0))]),
        ),
    ]));
    let _registry = r.set_default();
    let budget = r.sync_scope(BudgetRetry::get).unwrap();
    let before = budget.budget_tokens();
    let dep = BusyAfterCall {
        start: Instant::now(),
        calls: Arc::default(),
        ready_at: Arc::default(),
        sleep: None,
    };
    let mut call = Box::pin(BudgetRetry::layer().layer(dep.clone()).oneshot(1));
    // The first call failed at once; the retry's delay is over at 100 ms,
    // and the service is not ready before 5 s.
    assert!(tokio::time::timeout(Duration::from_secs(1), &mut call)
        .await
        .is_err());
    drop(call);
    assert_eq!(dep.calls.lock().unwrap().len(), 1, "no retry was sent");
    assert_eq!(
        budget.budget_tokens(),
        before,
        "the token of a retry that never started is spent"
    );
}

// --- an inner service whose `call` panics --------------------------------

#[derive(resilient_core::TimeoutSpec)]
#[spec("edges.timeout")]
struct Timeout;

#[derive(CircuitBreakerSpec)]
#[spec("edges.panic_breaker")]
struct PanicBreaker;

/// A service whose `call` panics before it returns a future.
#[derive(Clone)]
struct Panics;

impl Service<u64> for Panics {
    type Response = u64;
    type Error = BoxError;
    type Future = std::future::Ready<Result<u64, BoxError>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: u64) -> Self::Future {
        panic!("the inner service's call panicked");
    }
}

/// Each layer takes what it counts before it calls the inner service:
/// when that call panics, the layer's response future (already made)
/// counts the request cancelled, one outcome per request as for an
/// annotated fn whose body panics.
#[tokio::test(start_paused = true)]
async fn a_call_that_panics_in_the_inner_service_is_counted_cancelled_by_each_layer() {
    let meters = Meters::default();
    let r = metrics::with_local_recorder(&meters, || {
        build(
            Registry::builder()
                .spec::<Timeout>()
                .spec::<PanicBreaker>()
                .spec::<Limit>(),
            vec![
                (Timeout::PATH, metered(table([("duration", s("1s"))]))),
                (
                    PanicBreaker::PATH,
                    metered(breaker_section(50, 10, "1s", 10)),
                ),
                (Limit::PATH, metered(table([("limit", int(1))]))),
            ],
        )
    });
    let _registry = r.set_default();
    let _recorder = metrics::set_default_local_recorder(&meters);

    let mut timed = Timeout::layer().layer(Panics);
    let mut broken = PanicBreaker::layer().layer(Panics);
    let mut limited = Limit::layer().layer(Panics);
    for called in [
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(timed.call(1)))),
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(broken.call(1)))),
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(limited.call(1)))),
    ] {
        assert!(called.is_err(), "the inner call panicked");
    }

    let count = |spec| outcomes(&meters, spec);
    for spec in [
        ("Timeout", "edges.timeout", "timeout"),
        ("PanicBreaker", "edges.panic_breaker", "circuit_breaker"),
        ("Limit", "edges.limit", "concurrency_limit"),
    ] {
        assert_eq!(count(spec), [("cancelled", 1)], "{spec:?}");
    }
    assert_eq!(
        Limit::get().unwrap().in_use(),
        0,
        "the limit's place is free"
    );
}
