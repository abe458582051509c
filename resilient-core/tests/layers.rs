//! Specs as tower layers: what each layer does to the requests it passes,
//! counted (upstream hits, places in use, breaker windows, readiness
//! polls), on tokio's paused clock where time matters, and on two worker
//! threads where threads matter.

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
use resilient_core::circuit_breaker::State;
use resilient_core::layer::{LayerError, Layered};
use resilient_core::{
    circuit_breakable, BoxError, ChaosSpec, CircuitBreakerSpec, Classify, ConcurrencyLimitSpec,
    Error, RateLimiterSpec, Registry, RetrySpec, Spec, TimeoutSpec, Verdict,
};
use tokio::sync::Notify;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceBuilder, ServiceExt};

/// A dependency behind a service: counts hits, requests in flight (and
/// their peak), readiness polls and responses dropped unfinished; fails its
/// first `fail_first` requests; takes `took` (on tokio's clock) or, with a
/// gate, waits until the gate is opened.
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
    in_flight: AtomicUsize,
    peak: AtomicUsize,
    ready_polls: AtomicUsize,
    dropped: AtomicUsize,
}

impl Counts {
    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }
}

impl Upstream {
    fn new() -> Self {
        Self::default()
    }

    fn taking(took: Duration) -> Self {
        Self {
            took,
            ..Self::default()
        }
    }

    fn gated(gate: &Arc<Notify>) -> Self {
        Self {
            gate: Some(Arc::clone(gate)),
            ..Self::default()
        }
    }

    fn failing_first(self, n: usize) -> Self {
        self.counts.fail_first.store(n, Ordering::SeqCst);
        self
    }
}

/// Counts a response dropped before it finished.
struct InFlight(Arc<Counts>, bool);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
        if !self.1 {
            self.0.dropped.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Service<u64> for Upstream {
    type Response = u64;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<u64, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.counts.ready_polls.fetch_add(1, Ordering::SeqCst);
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, id: u64) -> Self::Future {
        let counts = Arc::clone(&self.counts);
        counts.hits.fetch_add(1, Ordering::SeqCst);
        let fail = counts
            .fail_first
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        let (took, gate) = (self.took, self.gate.clone());
        Box::pin(async move {
            let now = counts.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            counts.peak.fetch_max(now, Ordering::SeqCst);
            let mut guard = InFlight(Arc::clone(&counts), false);
            match gate {
                Some(gate) => gate.notified().await,
                None if !took.is_zero() => tokio::time::sleep(took).await,
                None => tokio::task::yield_now().await,
            }
            guard.1 = true;
            if fail {
                Err("upstream failed".into())
            } else {
                Ok(id)
            }
        })
    }
}

/// The resilience error a layer's `BoxError` holds.
fn resilience(e: &BoxError) -> &Error {
    e.downcast_ref::<Error>()
        .unwrap_or_else(|| panic!("not a resilience error: {e}"))
}

// --- circuit breaker ---------------------------------------------------

#[derive(CircuitBreakerSpec)]
#[spec("layers.breaker")]
struct PetBreaker;

#[derive(Debug, thiserror::Error)]
enum PetError {
    #[error("the store is down")]
    Down,
    #[error(transparent)]
    Resilience(#[from] Error),
}

/// What lets the layers see a rejection in the user's error type.
impl LayerError for PetError {
    fn resilience(&self) -> Option<&Error> {
        match self {
            PetError::Resilience(e) => Some(e),
            PetError::Down => None,
        }
    }
}

static FN_HITS: AtomicUsize = AtomicUsize::new(0);

#[circuit_breakable(PetBreaker)]
async fn find(id: u64) -> Result<u64, PetError> {
    FN_HITS.fetch_add(1, Ordering::SeqCst);
    let _ = id;
    Err(PetError::Down)
}

#[tokio::test]
async fn a_breaker_layer_and_an_annotated_fn_share_one_breaker() {
    let r = registry::<PetBreaker>(breaker_section(50, 4, "1h", 4));
    let _registry = r.set_default();
    let breaker = r.sync_scope(PetBreaker::get).expect("breaker");
    let upstream = Upstream::new().failing_first(usize::MAX);
    let mut pets = ServiceBuilder::new()
        .layer(PetBreaker::layer())
        .service(upstream.clone());
    for id in 0..2 {
        let e = pets.ready().await.unwrap().call(id).await.unwrap_err();
        assert_eq!(e.to_string(), "upstream failed");
    }
    for id in 0..2 {
        assert!(matches!(find(id).await, Err(PetError::Down)));
    }
    assert_eq!(breaker.state(), State::Open, "2 + 2 failures in one window");
    assert_eq!(breaker.metrics().opened, 1);

    // Both are rejected now, and neither reaches its dependency.
    let e = pets.ready().await.unwrap().call(9).await.unwrap_err();
    assert!(
        matches!(resilience(&e), Error::CallNotPermitted { .. }),
        "{e}"
    );
    assert!(matches!(
        find(9).await,
        Err(PetError::Resilience(Error::CallNotPermitted { .. }))
    ));
    assert_eq!(upstream.counts.hits(), 2);
    assert_eq!(FN_HITS.load(Ordering::SeqCst), 2);
    assert_eq!(breaker.metrics().rejected, 2);
}

/// Counts a status of 500 or more as a failure, though it is an `Ok`.
#[derive(CircuitBreakerSpec)]
#[spec("layers.status_breaker", classify = custom)]
struct StatusBreaker;

impl Classify<u64, BoxError> for StatusBreaker {
    fn classify(outcome: &Result<u64, BoxError>) -> Verdict {
        match outcome {
            Ok(status) if *status >= 500 => Verdict::Failure,
            Ok(_) => Verdict::Success,
            Err(_) => Verdict::Failure,
        }
    }
}

#[tokio::test]
async fn a_breaker_layer_counts_what_the_spec_classifies_as_a_failure() {
    // Ten calls before it may open: the window shows all four.
    let r = registry::<StatusBreaker>(breaker_section(50, 10, "1h", 10));
    let _registry = r.set_default();
    let breaker = r.sync_scope(StatusBreaker::get).expect("breaker");
    let upstream = Upstream::new();
    let mut statuses = StatusBreaker::layer().layer(upstream.clone());
    for status in [200, 503, 503, 503] {
        let answer = statuses.ready().await.unwrap().call(status).await.unwrap();
        assert_eq!(answer, status, "an Ok passes as it is");
    }
    let window = breaker.metrics().window;
    assert_eq!((window.total, window.failures), (4, 3));
    assert_eq!(upstream.counts.hits(), 4);
}

#[tokio::test]
async fn a_service_of_the_user_s_error_type_gets_the_rejection_in_it() {
    let r = registry::<PetBreaker>(breaker_section(50, 4, "1h", 4));
    let _registry = r.set_default();
    r.sync_scope(PetBreaker::get).expect("breaker").force_open();
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&hits);
    let mut pets = PetBreaker::layer().layer(tower::service_fn(move |id: u64| {
        counted.fetch_add(1, Ordering::SeqCst);
        async move { Ok::<u64, PetError>(id) }
    }));
    let e = pets.ready().await.unwrap().call(1).await.unwrap_err();
    assert!(
        matches!(e, PetError::Resilience(Error::CallNotPermitted { .. })),
        "{e:?}"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 0);
}

// --- concurrency limit -------------------------------------------------

#[derive(ConcurrencyLimitSpec)]
#[spec("layers.limit")]
struct PetLimit;

#[derive(TimeoutSpec)]
#[spec("layers.timeout")]
struct PetTimeout;

/// `max_wait` with the `block` policy only (`None`: reject).
fn limit_registry(limit: i128, max_wait: Option<&str>) -> Registry {
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
            .spec::<PetLimit>()
            .spec::<PetBreaker>()
            .spec::<PetTimeout>(),
        vec![
            (PetLimit::PATH, limit),
            (PetBreaker::PATH, breaker_section(50, 4, "1h", 10)),
            (PetTimeout::PATH, table([("duration", s("1s"))])),
        ],
    )
}

#[tokio::test(start_paused = true)]
async fn a_limit_layer_takes_its_place_in_call_and_poll_ready_never_waits() {
    let r = limit_registry(1, None);
    let _registry = r.set_default();
    let limit = r.sync_scope(PetLimit::get).expect("limit");
    let gate = Arc::new(Notify::new());
    let upstream = Upstream::gated(&gate);
    let mut pets = PetLimit::layer().layer(upstream.clone());

    let held = pets.ready().await.unwrap().call(1);
    assert_eq!(limit.in_use(), 1, "taken in call, before the first poll");
    // The limit is full, and the service is still ready at once: the place
    // is asked for in `call`, which answers.
    assert!(pets.ready().now_or_never().is_some(), "poll_ready waited");
    let e = pets.call(2).await.unwrap_err();
    assert!(
        matches!(
            resilience(&e),
            Error::ConcurrencyLimitReached { limit: 1, .. }
        ),
        "{e}"
    );
    // A response future dropped before its first poll gives its place back.
    drop(held);
    assert_eq!(limit.in_use(), 0);
    assert_eq!(
        upstream.counts.hits(),
        1,
        "the inner service was called once"
    );
    assert_eq!(upstream.counts.peak(), 0, "and its response never polled");
}

#[tokio::test(start_paused = true)]
async fn a_block_limit_waits_in_the_response_future_up_to_max_wait() {
    let r = limit_registry(1, Some("120ms"));
    let _registry = r.set_default();
    let limit = r.sync_scope(PetLimit::get).expect("limit");
    let upstream = Upstream::taking(Duration::from_millis(50));
    let pets = PetLimit::layer().layer(upstream.clone());
    let start = Instant::now();
    let calls: Vec<_> = (0..4)
        .map(|id| {
            let mut pets = pets.clone();
            tokio::spawn(async move {
                let answer = pets.ready().await.unwrap().call(id).await;
                (answer.map_err(|e| e.to_string()), start.elapsed())
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for call in calls {
        outcomes.push(call.await.unwrap());
    }
    let ms = Duration::from_millis;
    // One at a time, 50 ms each; the fourth would wait 150 ms, past
    // max_wait: refused when max_wait has passed.
    assert_eq!(outcomes[0], (Ok(0), ms(50)));
    assert_eq!(outcomes[1], (Ok(1), ms(100)));
    assert_eq!(outcomes[2], (Ok(2), ms(150)));
    assert!(outcomes[3].0.is_err(), "{outcomes:?}");
    assert_eq!(outcomes[3].1, ms(120));
    assert_eq!(upstream.counts.hits(), 3);
    assert_eq!(upstream.counts.peak(), 1);
    assert_eq!(limit.in_use(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_breaker_outside_a_limit_ignores_its_rejection_and_counts_a_timeout() {
    let r = limit_registry(1, None);
    let _registry = r.set_default();
    let breaker = r.sync_scope(PetBreaker::get).expect("breaker");
    let upstream = Upstream::taking(Duration::from_secs(2));
    let pets = ServiceBuilder::new()
        .layer(PetBreaker::layer())
        .layer(PetLimit::layer())
        .layer(PetTimeout::layer())
        .service(upstream.clone());
    let start = Instant::now();
    let slow = tokio::spawn(pets.clone().oneshot(1));
    tokio::task::yield_now().await;
    let e = pets.clone().oneshot(2).await.unwrap_err();
    assert!(matches!(
        resilience(&e),
        Error::ConcurrencyLimitReached { .. }
    ));
    let e = slow.await.unwrap().unwrap_err();
    assert!(matches!(resilience(&e), Error::Timeout { .. }), "{e}");
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    let window = breaker.metrics().window;
    assert_eq!(
        (window.total, window.failures),
        (1, 1),
        "the timeout counted, the rejection not"
    );
    assert_eq!(upstream.counts.hits(), 1);
    assert_eq!(upstream.counts.dropped.load(Ordering::SeqCst), 1);
}

#[test]
fn sixty_four_tasks_on_two_workers_never_pass_the_limit() {
    let r = limit_registry(4, Some("30s"));
    let rt = r
        .set_default_on(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_time(),
        )
        .build()
        .expect("runtime");
    let limit = r.sync_scope(PetLimit::get).expect("limit");
    let upstream = Upstream::taking(Duration::from_micros(200));
    let pets = ServiceBuilder::new()
        .layer(PetLimit::layer())
        .layer(PetTimeout::layer())
        .service(upstream.clone());
    let answered = rt.block_on(async {
        let tasks: Vec<_> = (0..64)
            .map(|task| {
                let pets = pets.clone();
                tokio::spawn(async move {
                    let mut answered = 0;
                    for i in 0..20 {
                        // Each call in its own task, as a server makes them.
                        let call = tokio::spawn(pets.clone().oneshot(task * 100 + i));
                        if call.await.unwrap().is_ok() {
                            answered += 1;
                        }
                    }
                    answered
                })
            })
            .collect();
        let mut answered = 0;
        for t in tasks {
            answered += t.await.unwrap();
        }
        answered
    });
    assert_eq!(answered, 64 * 20);
    assert_eq!(upstream.counts.hits(), 64 * 20);
    assert_eq!(upstream.counts.peak(), 4, "never more than the limit");
    assert_eq!(limit.in_use(), 0, "every place back");
}

#[tokio::test]
async fn under_a_buffer_the_limit_counts_requests_not_readiness() {
    let r = limit_registry(2, None);
    let _registry = r.set_default();
    let limit = r.sync_scope(PetLimit::get).expect("limit");
    let gate = Arc::new(Notify::new());
    let upstream = Upstream::gated(&gate);
    // The buffer's worker polls readiness, then calls, for each request in
    // turn, on a task of its own (on this thread: the registry is its
    // default).
    let (buffered, worker) =
        tower::buffer::Buffer::pair(PetLimit::layer().layer(upstream.clone()), 16);
    tokio::spawn(worker);
    let calls: Vec<_> = (0..8)
        .map(|id| tokio::spawn(buffered.clone().oneshot(id)))
        .collect();
    // Two reach the upstream and wait there; six are refused meanwhile.
    while upstream.counts.peak() < 2 || limit.in_use() < 2 {
        tokio::task::yield_now().await;
    }
    gate.notify_waiters();
    let mut refused = 0;
    for call in calls {
        match call.await.unwrap() {
            Ok(_) => {}
            Err(e) => {
                assert!(
                    matches!(resilience(&e), Error::ConcurrencyLimitReached { .. }),
                    "{e}"
                );
                refused += 1;
            }
        }
    }
    assert_eq!((upstream.counts.hits(), refused), (2, 6));
    assert_eq!(limit.in_use(), 0);
}

// --- rate limiter ------------------------------------------------------

#[derive(RateLimiterSpec)]
#[spec("layers.rate")]
struct SearchRate;

#[tokio::test(start_paused = true)]
async fn a_rate_limit_layer_serves_reservations_within_max_wait_in_order() {
    let r = registry::<SearchRate>(table([
        ("limit_for_period", int(1)),
        ("limit_refresh_period", s("100ms")),
        ("max_wait", s("250ms")),
    ]));
    let _registry = r.set_default();
    let upstream = Upstream::new();
    let search = SearchRate::layer().layer(upstream.clone());
    let start = Instant::now();
    let calls: Vec<_> = (0..5)
        .map(|id| {
            let search = search.clone();
            tokio::spawn(async move {
                let answer = search.oneshot(id).await;
                (answer.is_ok(), start.elapsed())
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for call in calls {
        outcomes.push(call.await.unwrap());
    }
    let ms = Duration::from_millis;
    let admitted: Vec<_> = outcomes.iter().filter(|o| o.0).map(|o| o.1).collect();
    assert_eq!(admitted, vec![ms(0), ms(100), ms(200)], "{outcomes:?}");
    assert!(
        outcomes.iter().filter(|o| !o.0).all(|o| o.1 == ms(0)),
        "refused at once: {outcomes:?}"
    );
    assert_eq!(upstream.counts.hits(), 3);
}

// --- timeout -----------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_timeout_layer_ends_a_slow_response_at_its_duration_and_drops_it() {
    let r = registry::<PetTimeout>(table([("duration", s("1s"))]));
    let _registry = r.set_default();
    let slow = Upstream::taking(Duration::from_secs(5));
    let start = Instant::now();
    let e = PetTimeout::layer()
        .layer(slow.clone())
        .oneshot(1)
        .await
        .unwrap_err();
    assert!(
        matches!(resilience(&e), Error::Timeout { after, .. } if *after == Duration::from_secs(1))
    );
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    assert_eq!(
        slow.counts.dropped.load(Ordering::SeqCst),
        1,
        "dropped, not finished"
    );

    let quick = Upstream::taking(Duration::from_millis(999));
    let answer = PetTimeout::layer().layer(quick).oneshot(2).await.unwrap();
    assert_eq!(answer, 2);
}

// --- chaos -------------------------------------------------------------

#[derive(ChaosSpec)]
#[spec("layers.chaos")]
struct PetChaos;

#[tokio::test(start_paused = true)]
async fn a_chaos_layer_delays_or_fails_the_requests_it_draws_and_counts_them() {
    // Every request waits 300 ms; every other one then fails.
    let r = registry::<PetChaos>(table([
        ("enabled", boolean(true)),
        ("latency_rate", float(1.0)),
        ("latency", s("300ms")),
        ("error_rate", float(0.5)),
        ("seed", int(7)),
    ]));
    let _registry = r.set_default();
    let upstream = Upstream::new();
    let mut pets = PetChaos::layer().layer(upstream.clone());
    let (mut answered, mut injected) = (0, 0);
    for id in 0..20 {
        let start = Instant::now();
        match pets.ready().await.unwrap().call(id).await {
            Ok(answer) => {
                assert_eq!(answer, id);
                answered += 1;
            }
            Err(e) => {
                assert!(matches!(resilience(&e), Error::Injected { .. }), "{e}");
                injected += 1;
            }
        }
        assert_eq!(start.elapsed(), Duration::from_millis(300), "request {id}");
    }
    let counts = r.sync_scope(PetChaos::get).unwrap().counts();
    assert_eq!(counts.calls, 20);
    assert_eq!(counts.latency_injected, 20);
    assert_eq!(counts.errors_injected, injected);
    assert!(
        injected > 0 && answered > 0,
        "{injected} failed, {answered} answered"
    );
    assert_eq!(
        upstream.counts.hits() as u64,
        answered,
        "a failed request never reaches the service"
    );
}

#[tokio::test(start_paused = true)]
async fn a_chaos_request_dropped_in_its_latency_reaches_nothing_and_counts_no_error() {
    let r = registry::<PetChaos>(table([
        ("enabled", boolean(true)),
        ("latency_rate", float(1.0)),
        ("latency", s("300ms")),
        ("error_rate", float(1.0)),
    ]));
    let _registry = r.set_default();
    let upstream = Upstream::new();
    let mut pets = PetChaos::layer().layer(upstream.clone());
    let mut pending = Box::pin(pets.ready().await.unwrap().call(1));
    assert!(
        (&mut pending).now_or_never().is_none(),
        "waiting its latency"
    );
    tokio::time::advance(Duration::from_millis(100)).await;
    drop(pending);
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(upstream.counts.hits(), 0);
    let counts = r.sync_scope(PetChaos::get).unwrap().counts();
    // Drawn in `call`: the latency counts (it was drawn and begun); the
    // error drawn with it counts only when delivered, and never was.
    assert_eq!(
        (
            counts.calls,
            counts.latency_injected,
            counts.errors_injected
        ),
        (1, 1, 0)
    );

    // An error drawn without a latency is answered at once: it counts in
    // `call`, even if the response future is dropped unpolled.
    let r = registry::<PetChaos>(table([
        ("enabled", boolean(true)),
        ("error_rate", float(1.0)),
    ]));
    let _registry = r.set_default();
    let unpolled = pets.ready().await.unwrap().call(2);
    drop(unpolled);
    assert_eq!(upstream.counts.hits(), 0);
    let counts = r.sync_scope(PetChaos::get).unwrap().counts();
    assert_eq!((counts.calls, counts.errors_injected), (1, 1));
}

#[tokio::test]
async fn a_disabled_chaos_layer_passes_every_request_through() {
    let r = registry::<PetChaos>(table([
        ("enabled", boolean(false)),
        ("error_rate", float(1.0)),
    ]));
    let _registry = r.set_default();
    let upstream = Upstream::new();
    let mut pets = PetChaos::layer().layer(upstream.clone());
    for id in 0..10 {
        assert_eq!(pets.ready().await.unwrap().call(id).await.unwrap(), id);
    }
    assert_eq!(upstream.counts.hits(), 10);
    assert_eq!(r.sync_scope(PetChaos::get).unwrap().counts().calls, 0);
}

// --- retry -------------------------------------------------------------

#[derive(RetrySpec)]
#[spec("layers.retry")]
struct PetRetry;

fn retry_registry(attempts: i128) -> Registry {
    build(
        Registry::builder()
            .spec::<PetRetry>()
            .spec::<PetBreaker>()
            .spec::<PetTimeout>(),
        vec![
            (
                PetRetry::PATH,
                table([("attempts", int(attempts)), ("delay", s("100ms"))]),
            ),
            (PetBreaker::PATH, breaker_section(50, 4, "1h", 10)),
            (PetTimeout::PATH, table([("duration", s("1s"))])),
        ],
    )
}

#[tokio::test(start_paused = true)]
async fn a_retry_layer_sends_the_request_again_after_the_delay() {
    let r = retry_registry(3);
    let _registry = r.set_default();
    let upstream = Upstream::new().failing_first(2);
    let start = Instant::now();
    let answer = PetRetry::layer()
        .layer(upstream.clone())
        .oneshot(7)
        .await
        .unwrap();
    assert_eq!(answer, 7);
    assert_eq!(upstream.counts.hits(), 3);
    assert_eq!(start.elapsed(), Duration::from_millis(200), "two waits");
    // One readiness poll for the request, and one before each retry, on
    // the clone the response future took.
    assert_eq!(upstream.counts.ready_polls.load(Ordering::SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn a_retry_layer_gives_up_with_retry_exhausted() {
    let r = retry_registry(2);
    let _registry = r.set_default();
    let upstream = Upstream::new().failing_first(usize::MAX);
    let e = PetRetry::layer()
        .layer(upstream.clone())
        .oneshot(7)
        .await
        .unwrap_err();
    let Error::RetryExhausted(exhausted) = resilience(&e) else {
        panic!("{e}");
    };
    assert_eq!(exhausted.calls, 3);
    assert_eq!(exhausted.last.to_string(), "upstream failed");
    assert_eq!(upstream.counts.hits(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_retry_retries_a_timeout_inside_and_not_an_open_breaker() {
    let r = retry_registry(3);
    let _registry = r.set_default();
    // Slow once (cut at 1 s), then quick.
    let flaky = Upstream::taking(Duration::from_secs(2));
    let slow_once = {
        let flaky = flaky.clone();
        let quick = Upstream {
            counts: Arc::clone(&flaky.counts),
            ..Upstream::new()
        };
        tower::service_fn(move |id: u64| {
            if flaky.counts.hits() == 0 {
                flaky.clone().call(id)
            } else {
                quick.clone().call(id)
            }
        })
    };
    let start = Instant::now();
    let answer = ServiceBuilder::new()
        .layer(PetRetry::layer())
        .layer(PetTimeout::layer())
        .service(slow_once)
        .oneshot(3)
        .await
        .unwrap();
    assert_eq!(answer, 3);
    assert_eq!(flaky.counts.hits(), 2);
    assert_eq!(start.elapsed(), Duration::from_millis(1100));

    // An open breaker inside: its rejection is passed on, not retried.
    r.sync_scope(PetBreaker::get).expect("breaker").force_open();
    let upstream = Upstream::new();
    let start = Instant::now();
    let e = ServiceBuilder::new()
        .layer(PetRetry::layer())
        .layer(PetBreaker::layer())
        .service(upstream.clone())
        .oneshot(4)
        .await
        .unwrap_err();
    assert!(
        matches!(resilience(&e), Error::CallNotPermitted { .. }),
        "{e}"
    );
    assert_eq!(upstream.counts.hits(), 0);
    assert_eq!(start.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_response_future_gives_everything_back() {
    let r = build(
        Registry::builder()
            .spec::<PetRetry>()
            .spec::<PetBreaker>()
            .spec::<PetLimit>()
            .spec::<PetTimeout>(),
        vec![
            (
                PetRetry::PATH,
                table([("attempts", int(3)), ("delay", s("100ms"))]),
            ),
            (PetBreaker::PATH, breaker_section(50, 4, "1h", 10)),
            (PetLimit::PATH, table([("limit", int(2))])),
            (PetTimeout::PATH, table([("duration", s("1s"))])),
        ],
    );
    let _registry = r.set_default();
    let breaker = r.sync_scope(PetBreaker::get).expect("breaker");
    let limit = r.sync_scope(PetLimit::get).expect("limit");
    let upstream = Upstream::taking(Duration::from_millis(300)).failing_first(1);
    let pets = ServiceBuilder::new()
        .layer(PetRetry::layer())
        .layer(PetBreaker::layer())
        .layer(PetLimit::layer())
        .layer(PetTimeout::layer())
        .service(upstream.clone());
    // Dropped while the first attempt runs, and while it waits to retry.
    for at in [Duration::from_millis(150), Duration::from_millis(350)] {
        let mut call = Box::pin(pets.clone().oneshot(1));
        assert!(tokio::time::timeout(at, &mut call).await.is_err());
        assert_eq!(limit.in_use(), u32::from(at < Duration::from_millis(300)));
        drop(call);
        assert_eq!(limit.in_use(), 0);
        upstream.counts.fail_first.store(1, Ordering::SeqCst);
    }
    let window = breaker.metrics().window;
    assert_eq!(
        (window.total, window.failures),
        (1, 1),
        "the failed attempt counted; the cancelled one not"
    );
    assert_eq!(upstream.counts.dropped.load(Ordering::SeqCst), 1);
    assert_eq!(upstream.counts.hits(), 2);
}
