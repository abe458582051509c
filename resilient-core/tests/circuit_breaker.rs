//! Circuit breaker state machine, on tokio's paused clock: every test counts
//! body runs, rejections and transitions.

#![allow(clippy::expect_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::*;

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use resilient_core::circuit_breaker::{Counts, Metrics, State};
use resilient_core::settings::Value;
use resilient_core::{
    circuit_breakable, retryable, CircuitBreakerHandle, CircuitBreakerSpec, Classify, Error,
    Registry, RetrySpec, Spec, Verdict,
};

// ---------------------------------------------------------------- fixtures

#[derive(Debug, thiserror::Error)]
enum TestError {
    #[error("boom")]
    Boom,
    #[error("not found")]
    NotFound,
    #[error(transparent)]
    Resilience(#[from] Error),
}

/// A count-based section: threshold 50 %, minimum 4 calls, window 4, wait 1 s,
/// 2 probes.
fn section(kind: &str) -> Value {
    let base = table([
        ("type", s(kind)),
        ("failure_rate_threshold", int(50)),
        ("minimum_required_calls", int(4)),
        ("wait_duration_in_open_state", s("1s")),
        ("permitted_calls_in_half_open_state", int(2)),
    ]);
    if kind == "time_based" {
        with(
            base,
            "time_based",
            table([("window_duration", s("10s")), ("sample_count", int(10))]),
        )
    } else {
        with(base, "count_based", table([("window_size", int(4))]))
    }
}

const KINDS: [&str; 4] = [
    "striped_approx",
    "fixed_window",
    "ring_buffer",
    "time_based",
];

#[derive(CircuitBreakerSpec)]
#[spec("test.breaker.main")]
struct Breaker;

fn handle(r: &Registry) -> CircuitBreakerHandle<Breaker> {
    r.sync_scope(Breaker::get).expect("configured")
}

/// Runs one call through the breaker; the body fails when `fail` is true.
async fn call(
    b: &CircuitBreakerHandle<Breaker>,
    runs: &AtomicU32,
    fail: bool,
) -> Result<(), TestError> {
    b.call(|| async {
        runs.fetch_add(1, Ordering::SeqCst);
        if fail {
            Err(TestError::Boom)
        } else {
            Ok(())
        }
    })
    .await
}

fn rejected_with(out: &Result<(), TestError>) -> Option<State> {
    match out {
        Err(TestError::Resilience(Error::CallNotPermitted { state, .. })) => Some(*state),
        _ => None,
    }
}

// ---------------------------------------------------------------- closed → open

#[tokio::test(start_paused = true)]
async fn every_window_type_opens_on_the_failure_rate_once_minimum_calls_are_reached() {
    for kind in KINDS {
        let r = registry::<Breaker>(section(kind));
        let b = handle(&r);
        let runs = AtomicU32::new(0);
        // success, failure, success: 3 calls < minimum 4, stays closed.
        for fail in [false, true, false] {
            let _ = call(&b, &runs, fail).await;
        }
        assert_eq!(b.state(), State::Closed, "{kind}");
        // The 4th call fails: 2 of 4 = 50 % ≥ 50 %.
        let _ = call(&b, &runs, true).await;
        assert_eq!(b.state(), State::Open, "{kind}");
        let out = call(&b, &runs, false).await;
        assert_eq!(rejected_with(&out), Some(State::Open), "{kind}");
        assert_eq!(
            runs.load(Ordering::SeqCst),
            4,
            "{kind}: the rejected body never ran"
        );
        let m = b.metrics();
        assert_eq!((m.opened, m.rejected), (1, 1), "{kind}");
    }
}

#[tokio::test(start_paused = true)]
async fn failures_below_minimum_required_calls_never_open() {
    for kind in KINDS {
        let r = registry::<Breaker>(section(kind));
        let b = handle(&r);
        let runs = AtomicU32::new(0);
        for _ in 0..3 {
            let _ = call(&b, &runs, true).await;
        }
        assert_eq!(b.state(), State::Closed, "{kind}: 3 failures < minimum 4");
        assert_eq!(
            b.metrics().window,
            Counts {
                total: 3,
                failures: 3,
                slow: 0
            },
            "{kind}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_rate_below_the_threshold_keeps_it_closed() {
    for kind in ["striped_approx", "ring_buffer", "time_based"] {
        let r = registry::<Breaker>(section(kind));
        let b = handle(&r);
        let runs = AtomicU32::new(0);
        for fail in [false, false, false, true] {
            let _ = call(&b, &runs, fail).await;
        }
        // 1 of 4 = 25 % < 50 %.
        assert_eq!(b.state(), State::Closed, "{kind}");
        assert_eq!(b.metrics().failure_rate, Some(25), "{kind}");
    }
}

#[tokio::test(start_paused = true)]
async fn fixed_window_starts_over_when_full() {
    let r = registry::<Breaker>(section("fixed_window"));
    let b = handle(&r);
    let runs = AtomicU32::new(0);
    // A full window of successes restarts the counts ...
    for _ in 0..4 {
        let _ = call(&b, &runs, false).await;
    }
    assert_eq!(b.metrics().window.total, 0);
    // ... so three failures are again below the minimum.
    for _ in 0..3 {
        let _ = call(&b, &runs, true).await;
    }
    assert_eq!(b.state(), State::Closed);
    let _ = call(&b, &runs, true).await;
    assert_eq!(b.state(), State::Open);
}

#[tokio::test(start_paused = true)]
async fn one_sequential_caller_can_open_a_striped_window_as_large_as_its_minimum() {
    // Kora's thread-striped window holds one outcome per stripe for a single
    // thread; here a single caller fills all of it.
    let section = with(
        with(section("striped_approx"), "minimum_required_calls", int(10)),
        "count_based",
        table([
            ("window_size", int(10)),
            ("striped_approx", table([("stripes", int(16))])),
        ]),
    );
    let r = registry::<Breaker>(section);
    let b = handle(&r);
    let runs = AtomicU32::new(0);
    for _ in 0..9 {
        let _ = call(&b, &runs, true).await;
    }
    assert_eq!(b.state(), State::Closed);
    assert_eq!(b.metrics().window.total, 9);
    let _ = call(&b, &runs, true).await;
    assert_eq!(b.state(), State::Open);
}

#[tokio::test(start_paused = true)]
async fn time_based_window_forgets_failures_older_than_its_duration() {
    let r = registry::<Breaker>(section("time_based"));
    let b = handle(&r);
    let runs = AtomicU32::new(0);
    for _ in 0..3 {
        let _ = call(&b, &runs, true).await;
    }
    tokio::time::advance(Duration::from_secs(10)).await;
    assert_eq!(b.metrics().window.total, 0, "the 10 s window has passed");
    let _ = call(&b, &runs, true).await;
    assert_eq!(b.state(), State::Closed, "one failure in the window");
}

// ---------------------------------------------------------------- open → half-open → closed / open

/// Opens `b` with four failures.
async fn open(b: &CircuitBreakerHandle<Breaker>) {
    let runs = AtomicU32::new(0);
    for _ in 0..4 {
        let _ = call(b, &runs, true).await;
    }
    assert_eq!(b.state(), State::Open);
}

#[tokio::test(start_paused = true)]
async fn open_waits_exactly_the_configured_duration_before_probing() {
    for kind in KINDS {
        let r = registry::<Breaker>(section(kind));
        let b = handle(&r);
        open(&b).await;
        let runs = AtomicU32::new(0);
        tokio::time::advance(Duration::from_millis(999)).await;
        let out = call(&b, &runs, false).await;
        assert_eq!(
            rejected_with(&out),
            Some(State::Open),
            "{kind}: 999 ms < 1 s"
        );
        tokio::time::advance(Duration::from_millis(1)).await;
        // Exactly 1 s: the call moves it to half-open and is the first probe.
        let probe = b.try_acquire().expect("first probe");
        assert_eq!(b.state(), State::HalfOpen, "{kind}");
        assert_eq!(b.metrics().probes_in_flight, 1, "{kind}");
        probe.success();
        assert_eq!(runs.load(Ordering::SeqCst), 0);
    }
}

#[tokio::test(start_paused = true)]
async fn half_open_admits_the_permitted_probes_and_closes_on_the_last_success() {
    for kind in KINDS {
        let r = registry::<Breaker>(section(kind));
        let b = handle(&r);
        open(&b).await;
        tokio::time::advance(Duration::from_secs(1)).await;
        let first = b.try_acquire().expect("probe 1");
        let second = b.try_acquire().expect("probe 2");
        let third = b.acquire();
        assert!(
            matches!(
                third,
                Err(Error::CallNotPermitted {
                    state: State::HalfOpen,
                    ..
                })
            ),
            "{kind}: {third:?}"
        );
        first.success();
        assert_eq!(b.state(), State::HalfOpen, "{kind}: one success of two");
        second.success();
        assert_eq!(b.state(), State::Closed, "{kind}");
        let m = b.metrics();
        assert_eq!((m.opened, m.half_opened, m.closed), (1, 1, 1), "{kind}");
        assert_eq!(
            m.window,
            Counts::default(),
            "{kind}: closing starts a fresh window"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_failed_probe_opens_it_again_for_another_full_wait() {
    for kind in KINDS {
        let r = registry::<Breaker>(section(kind));
        let b = handle(&r);
        open(&b).await;
        tokio::time::advance(Duration::from_secs(1)).await;
        let first = b.try_acquire().expect("probe 1");
        let second = b.try_acquire().expect("probe 2");
        first.success();
        second.failure();
        assert_eq!(b.state(), State::Open, "{kind}");
        tokio::time::advance(Duration::from_millis(999)).await;
        assert!(b.try_acquire().is_none(), "{kind}: a new full wait");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(b.try_acquire().is_some(), "{kind}");
        assert_eq!(b.metrics().opened, 2, "{kind}");
    }
}

// ---------------------------------------------------------------- ignored outcomes

#[derive(CircuitBreakerSpec)]
#[spec("test.breaker.classified", classify = custom)]
struct Classified;

impl Classify<(), TestError> for Classified {
    fn classify(outcome: &Result<(), TestError>) -> Verdict {
        match outcome {
            Ok(()) => Verdict::Success,
            Err(TestError::NotFound) => Verdict::Ignore,
            Err(_) => Verdict::Failure,
        }
    }
}

#[tokio::test(start_paused = true)]
async fn ignored_errors_change_nothing_when_closed_and_free_a_probe_when_half_open() {
    for kind in KINDS {
        let r = registry::<Classified>(section(kind));
        let b = r.sync_scope(Classified::get).expect("configured");
        let not_found = || async { Err::<(), _>(TestError::NotFound) };
        for _ in 0..10 {
            let out = b.call(not_found).await;
            assert!(
                matches!(out, Err(TestError::NotFound)),
                "{kind}: passes through unchanged"
            );
        }
        assert_eq!(b.state(), State::Closed, "{kind}");
        assert_eq!(b.metrics().window, Counts::default(), "{kind}");

        for _ in 0..4 {
            let _ = b.call(|| async { Err::<(), _>(TestError::Boom) }).await;
        }
        assert_eq!(b.state(), State::Open, "{kind}");
        tokio::time::advance(Duration::from_secs(1)).await;
        let _ = b.call(not_found).await;
        assert_eq!(b.state(), State::HalfOpen, "{kind}");
        assert_eq!(
            b.metrics().probes_in_flight,
            0,
            "{kind}: the ignored probe gave its place back"
        );
        // Both places are free: two successes close it.
        for _ in 0..2 {
            b.call(|| async { Ok::<(), TestError>(()) })
                .await
                .expect("probe");
        }
        assert_eq!(b.state(), State::Closed, "{kind}");
    }
}

// ---------------------------------------------------------------- slow calls

#[tokio::test(start_paused = true)]
async fn slow_calls_open_the_breaker_like_failures() {
    let section = with(
        section("ring_buffer"),
        "slow_call",
        table([
            ("duration_threshold", s("100ms")),
            ("rate_threshold", int(50)),
        ]),
    );
    let r = registry::<Breaker>(section);
    let b = handle(&r);
    let slow = |ms: u64| async move {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        Ok::<(), TestError>(())
    };
    b.call(|| slow(100))
        .await
        .expect("at the threshold is not slow");
    b.call(|| slow(10)).await.expect("fast");
    b.call(|| slow(101)).await.expect("slow success");
    assert_eq!(
        b.metrics().window,
        Counts {
            total: 3,
            failures: 0,
            slow: 1
        }
    );
    assert_eq!(b.state(), State::Closed);
    b.call(|| slow(500)).await.expect("slow success");
    // 2 slow of 4 = 50 %.
    assert_eq!(b.state(), State::Open);
}

// ---------------------------------------------------------------- what opened it

/// An open breaker's window is empty (every transition starts a new
/// period), so its status shows the window that opened it, as it was at
/// that moment: through half-open and a reopening by a failed probe, until
/// the breaker closes. The snapshot shows the same.
#[tokio::test(start_paused = true)]
async fn an_open_breaker_shows_the_window_that_opened_it_until_it_closes() {
    let section = table([
        ("failure_rate_threshold", int(60)),
        ("minimum_required_calls", int(5)),
        ("wait_duration_in_open_state", s("1s")),
        ("permitted_calls_in_half_open_state", int(1)),
        ("count_based", table([("window_size", int(10))])),
        (
            "slow_call",
            table([
                ("duration_threshold", s("100ms")),
                ("rate_threshold", int(100)),
            ]),
        ),
    ]);
    let r = registry::<Breaker>(section);
    let b = handle(&r);
    let runs = AtomicU32::new(0);
    let opened_by = |m: &Metrics| m.opened_by.map(|o| (o.window, o.failure_rate, o.slow_rate));
    // A success, a slow success, then three failures: 3 of 5 = 60 %.
    call(&b, &runs, false).await.expect("closed");
    b.call(|| async {
        runs.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(200)).await;
        Ok::<(), TestError>(())
    })
    .await
    .expect("slow success");
    for _ in 0..3 {
        let _ = call(&b, &runs, true).await;
    }
    let at_open = (
        Counts {
            total: 5,
            failures: 3,
            slow: 1,
        },
        60,
        20,
    );
    let m = b.metrics();
    assert_eq!((m.state, m.window), (State::Open, Counts::default()));
    assert_eq!(opened_by(&m), Some(at_open));
    let snapshot = r.snapshot();
    let shown: &Metrics = snapshot.specs[0].status().expect("breaker metrics");
    assert_eq!(*shown, m);

    // Half-open, and a failed probe opens it again: what opened it first
    // still stands.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let _ = call(&b, &runs, true).await;
    let m = b.metrics();
    assert_eq!((m.state, m.opened, m.half_opened), (State::Open, 2, 1));
    assert_eq!(opened_by(&m), Some(at_open));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(rejected_with(&call(&b, &runs, false).await).is_none());
    let m = b.metrics();
    assert_eq!(
        (m.state, m.opened, m.half_opened, m.closed),
        (State::Closed, 2, 2, 1)
    );
    assert_eq!(opened_by(&m), None, "closed: nothing opened it");
    assert_eq!(runs.load(Ordering::SeqCst), 7);
}

/// Opened by hand, or by the window and then forced open or disabled, a
/// breaker shows nothing the window did: it is the hand that holds it.
#[tokio::test(start_paused = true)]
async fn a_breaker_held_by_hand_shows_no_window_that_opened_it() {
    let r = registry::<Breaker>(section("ring_buffer"));
    let b = handle(&r);
    let runs = AtomicU32::new(0);
    b.force_open();
    assert_eq!(b.metrics().opened_by, None);
    b.reset();
    for fail in [true, false, true, true] {
        let _ = call(&b, &runs, fail).await;
    }
    let o = b.metrics().opened_by.expect("opened by its window");
    assert_eq!(
        (o.window.total, o.window.failures, o.failure_rate),
        (4, 3, 75)
    );
    b.force_open();
    assert_eq!(b.metrics().opened_by, None);
    b.disable();
    assert_eq!(b.metrics().opened_by, None);
    b.reset();
    assert_eq!(b.metrics().opened_by, None);
    assert_eq!(runs.load(Ordering::SeqCst), 4);
}

// ---------------------------------------------------------------- max wait in half-open

#[tokio::test(start_paused = true)]
async fn probes_that_never_finish_reopen_after_max_wait_in_half_open() {
    let section = with(section("ring_buffer"), "max_wait_in_half_open", s("5s"));
    let r = registry::<Breaker>(section);
    let b = handle(&r);
    open(&b).await;
    tokio::time::advance(Duration::from_secs(1)).await;
    // Two probes that hang.
    let hung = (
        b.try_acquire().expect("probe"),
        b.try_acquire().expect("probe"),
    );
    tokio::time::advance(Duration::from_millis(4_999)).await;
    assert!(b.try_acquire().is_none());
    assert_eq!(b.state(), State::HalfOpen);
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(
        b.try_acquire().is_none(),
        "the overdue half-open period opens again"
    );
    assert_eq!(b.state(), State::Open);
    tokio::time::advance(Duration::from_secs(1)).await;
    let fresh = b.try_acquire().expect("a new half-open period");
    // The hung probes of the old period end late: they free nothing and
    // close nothing.
    drop(hung);
    assert_eq!(b.metrics().probes_in_flight, 1);
    fresh.success();
    assert_eq!(b.state(), State::HalfOpen, "one success of two");
}

// ---------------------------------------------------------------- disabled and manual control

#[tokio::test(start_paused = true)]
async fn disabled_breaker_never_rejects_and_counts_nothing() {
    for kind in KINDS {
        let r = registry::<Breaker>(with(section(kind), "enabled", Value::Bool(false)));
        let b = handle(&r);
        let runs = AtomicU32::new(0);
        for _ in 0..20 {
            let out = call(&b, &runs, true).await;
            assert!(matches!(out, Err(TestError::Boom)), "{kind}");
        }
        assert_eq!(runs.load(Ordering::SeqCst), 20, "{kind}");
        assert_eq!(b.state(), State::Disabled, "{kind}");
        assert_eq!(b.metrics().window, Counts::default(), "{kind}");
    }
}

#[tokio::test(start_paused = true)]
async fn force_open_reset_and_disable_by_hand() {
    let r = registry::<Breaker>(section("ring_buffer"));
    let b = handle(&r);
    let runs = AtomicU32::new(0);
    b.force_open();
    let out = call(&b, &runs, false).await;
    assert_eq!(rejected_with(&out), Some(State::ForcedOpen));
    tokio::time::advance(Duration::from_secs(3600)).await;
    assert!(
        b.try_acquire().is_none(),
        "forced open does not wait its way out"
    );
    b.reset();
    assert_eq!(b.state(), State::Closed);
    call(&b, &runs, false).await.expect("closed again");
    b.disable();
    for _ in 0..10 {
        let _ = call(&b, &runs, true).await;
    }
    assert_eq!(b.state(), State::Disabled);
    b.reset();
    assert_eq!(b.metrics().window, Counts::default());
    assert_eq!(runs.load(Ordering::SeqCst), 11);
}

// ---------------------------------------------------------------- permits are guards

#[tokio::test(start_paused = true)]
async fn a_dropped_permit_counts_as_neither_and_frees_its_probe() {
    let r = registry::<Breaker>(section("ring_buffer"));
    let b = handle(&r);
    drop(b.try_acquire());
    assert_eq!(b.metrics().window, Counts::default());
    open(&b).await;
    tokio::time::advance(Duration::from_secs(1)).await;
    drop(b.try_acquire().expect("probe"));
    assert_eq!(b.state(), State::HalfOpen);
    assert_eq!(b.metrics().probes_in_flight, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_body_releases_its_probe() {
    let r = registry::<Breaker>(with(
        section("ring_buffer"),
        "wait_duration_in_open_state",
        s("0s"),
    ));
    let b = handle(&r);
    open(&b).await;
    let panicking = b.clone();
    let joined = tokio::spawn(async move {
        panicking
            .call(|| async {
                if true {
                    panic!("body panics");
                }
                Ok::<(), TestError>(())
            })
            .await
    })
    .await;
    assert!(joined.is_err(), "the panic propagates");
    assert_eq!(b.state(), State::HalfOpen);
    assert_eq!(b.metrics().probes_in_flight, 0, "the probe was released");
}

#[tokio::test(start_paused = true)]
async fn ten_thousand_calls_dropped_at_random_points_leave_no_permit_held() {
    let r = registry::<Classified>(with(
        section("ring_buffer"),
        "permitted_calls_in_half_open_state",
        int(3),
    ));
    let b = r.sync_scope(Classified::get).expect("configured");
    for _ in 0..4 {
        let _ = b.call(|| async { Err::<(), _>(TestError::Boom) }).await;
    }
    assert_eq!(b.state(), State::Open);
    tokio::time::advance(Duration::from_secs(1)).await;
    let mut rng = 0x2545_F491_4F6C_DD1D_u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let (bodies, finished) = (AtomicU32::new(0), AtomicU32::new(0));
    for _ in 0..10_000 {
        let body_ms = next() % 20;
        let cut_ms = next() % 25;
        let fut = b.call(|| async {
            bodies.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(body_ms)).await;
            finished.fetch_add(1, Ordering::SeqCst);
            // Ignored: the breaker stays half-open for the next call.
            Err::<(), _>(TestError::NotFound)
        });
        let _ = tokio::time::timeout(Duration::from_millis(cut_ms), fut).await;
        assert_eq!(b.metrics().probes_in_flight, 0, "a permit leaked");
    }
    let (bodies, finished) = (
        bodies.load(Ordering::SeqCst),
        finished.load(Ordering::SeqCst),
    );
    assert!(
        bodies > finished && finished > 0,
        "{bodies} started, {finished} finished"
    );
    assert_eq!(b.state(), State::HalfOpen);
    for _ in 0..3 {
        b.call(|| async { Ok::<(), TestError>(()) })
            .await
            .expect("probe");
    }
    assert_eq!(b.state(), State::Closed, "the breaker closes normally");
}

// ---------------------------------------------------------------- concurrency

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_tasks_never_hold_more_than_the_permitted_probes() {
    let r = registry::<Breaker>(with(
        with(
            section("ring_buffer"),
            "wait_duration_in_open_state",
            s("0s"),
        ),
        "permitted_calls_in_half_open_state",
        int(3),
    ));
    let b = handle(&r);
    open(&b).await;
    let in_flight = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let granted = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let (b, in_flight, peak, granted) =
                (b.clone(), in_flight.clone(), peak.clone(), granted.clone());
            tokio::spawn(async move {
                for _ in 0..200 {
                    if let Some(permit) = b.try_acquire() {
                        let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(now, Ordering::SeqCst);
                        granted.fetch_add(1, Ordering::SeqCst);
                        tokio::task::yield_now().await;
                        in_flight.fetch_sub(1, Ordering::SeqCst);
                        permit.ignore();
                    }
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task");
    }
    assert!(
        peak.load(Ordering::SeqCst) <= 3,
        "peak {}",
        peak.load(Ordering::SeqCst)
    );
    assert!(granted.load(Ordering::SeqCst) > 3, "probes were reused");
    assert_eq!(b.metrics().probes_in_flight, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_successes_keep_count_based_windows_within_their_size() {
    for kind in ["striped_approx", "ring_buffer", "fixed_window"] {
        let section = with(
            with(section(kind), "minimum_required_calls", int(50)),
            "count_based",
            table([("window_size", int(100))]),
        );
        let r = registry::<Breaker>(section);
        let b = handle(&r);
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let b = b.clone();
                tokio::spawn(async move {
                    for _ in 0..2000 {
                        b.try_acquire().expect("closed").success();
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("task");
        }
        let total = b.metrics().window.total;
        assert!(total <= 100, "{kind}: {total} outcomes in a window of 100");
        if kind != "fixed_window" {
            assert_eq!(total, 100, "{kind}: a sliding window is full");
        }
        assert_eq!(b.state(), State::Closed);
    }
}

// ---------------------------------------------------------------- the chain

#[derive(CircuitBreakerSpec)]
#[spec("test.breaker.chain")]
struct ChainBreaker;

#[derive(RetrySpec)]
#[spec("test.retry.chain")]
struct ChainRetry;

#[derive(RetrySpec)]
#[spec("test.retry.hammer", exhausted = last_failure)]
struct HammerRetry;

struct Service {
    runs: AtomicU32,
}

impl Service {
    #[circuit_breakable(ChainBreaker)]
    #[retryable(ChainRetry)]
    async fn breaker_outside(&self) -> Result<(), TestError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Err(TestError::Boom)
    }

    #[retryable(ChainRetry)]
    #[circuit_breakable(ChainBreaker)]
    async fn breaker_inside(&self) -> Result<(), TestError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Err(TestError::Boom)
    }

    #[retryable(HammerRetry)]
    #[circuit_breakable(ChainBreaker)]
    async fn hammer(&self) -> Result<(), TestError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Err(TestError::Boom)
    }
}

fn chain_registry(breaker: Value, retry: Value) -> Registry {
    build(
        Registry::builder()
            .spec::<ChainBreaker>()
            .spec::<ChainRetry>()
            .spec::<HammerRetry>(),
        vec![
            (ChainBreaker::PATH, breaker),
            (ChainRetry::PATH, retry.clone()),
            (HammerRetry::PATH, retry),
        ],
    )
}

fn big_window() -> Value {
    with(
        with(section("ring_buffer"), "minimum_required_calls", int(100)),
        "count_based",
        table([("window_size", int(100))]),
    )
}

fn two_retries() -> Value {
    table([("delay", s("10ms")), ("attempts", int(2))])
}

#[tokio::test(start_paused = true)]
async fn a_breaker_above_retry_records_one_outcome_per_call() {
    let r = chain_registry(big_window(), two_retries());
    let svc = Service {
        runs: AtomicU32::new(0),
    };
    for _ in 0..5 {
        let out = r.scope(svc.breaker_outside()).await;
        assert!(matches!(
            out,
            Err(TestError::Resilience(Error::RetryExhausted(e))) if e.calls == 3
        ));
    }
    assert_eq!(svc.runs.load(Ordering::SeqCst), 5 * 3);
    let b = r.sync_scope(ChainBreaker::get).expect("configured");
    assert_eq!(
        b.metrics().window,
        Counts {
            total: 5,
            failures: 5,
            slow: 0
        }
    );
}

#[tokio::test(start_paused = true)]
async fn a_breaker_below_retry_records_one_outcome_per_attempt() {
    let r = chain_registry(big_window(), two_retries());
    let svc = Service {
        runs: AtomicU32::new(0),
    };
    for _ in 0..5 {
        let _ = r.scope(svc.breaker_inside()).await;
    }
    assert_eq!(svc.runs.load(Ordering::SeqCst), 5 * 3);
    let b = r.sync_scope(ChainBreaker::get).expect("configured");
    assert_eq!(
        b.metrics().window,
        Counts {
            total: 15,
            failures: 15,
            slow: 0
        }
    );
}

#[tokio::test(start_paused = true)]
async fn retry_stops_at_the_first_rejection_of_an_open_breaker_inside_it() {
    // Minimum 4 calls: the breaker opens on the 4th attempt.
    let r = chain_registry(
        section("ring_buffer"),
        table([("delay", s("10ms")), ("attempts", int(9))]),
    );
    let svc = Service {
        runs: AtomicU32::new(0),
    };
    let out = r.scope(svc.hammer()).await;
    assert_eq!(
        svc.runs.load(Ordering::SeqCst),
        4,
        "attempts after the breaker opened were not made"
    );
    assert!(
        matches!(
            &out,
            Err(TestError::Resilience(Error::CallNotPermitted {
                state: State::Open,
                ..
            }))
        ),
        "{out:?}"
    );
    let b = r.sync_scope(ChainBreaker::get).expect("configured");
    assert_eq!(b.metrics().rejected, 1, "one rejection, not five");
}

#[tokio::test(start_paused = true)]
async fn retry_call_not_permitted_waits_out_the_open_period_then_probes() {
    let retry = table([
        ("delay", s("1s")),
        ("attempts", int(5)),
        ("retry_call_not_permitted", Value::Bool(true)),
    ]);
    let r = chain_registry(
        with(
            section("ring_buffer"),
            "wait_duration_in_open_state",
            s("2500ms"),
        ),
        retry,
    );
    let svc = Service {
        runs: AtomicU32::new(0),
    };
    let start = tokio::time::Instant::now();
    let _ = r.scope(svc.hammer()).await;
    // Attempts 1-4 run and open the breaker (at 3 s); attempt 5 (at 4 s) is
    // rejected with the 1.5 s left of the open period as its delay hint, so
    // attempt 6 comes at 5.5 s, the end of the wait, and runs as the probe.
    assert_eq!(svc.runs.load(Ordering::SeqCst), 5);
    assert_eq!(start.elapsed(), Duration::from_millis(5500));
    let b = r.sync_scope(ChainBreaker::get).expect("configured");
    assert_eq!(b.metrics().rejected, 1);
    assert_eq!(b.metrics().half_opened, 1);
}
