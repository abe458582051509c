//! Circuit breaker edge cases: permits that outlive their period, windows
//! that fill on a success, clock wrap-around, and how a breaker counts an
//! inner retry's exhaustion.

#![allow(clippy::expect_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::*;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use resilient_core::circuit_breaker::State;
use resilient_core::settings::Value;
use resilient_core::{
    circuit_breakable, retryable, CircuitBreakerHandle, CircuitBreakerSpec, Classify, Error,
    Registry, RetrySpec, Spec, Verdict,
};

#[derive(Debug, thiserror::Error)]
enum TestError {
    #[error("not found")]
    NotFound,
    #[error(transparent)]
    Resilience(#[from] Error),
}

/// threshold 50 %, minimum 4, window 4, wait 1 s, 2 probes.
fn section(kind: &str) -> Value {
    with(
        table([
            ("type", s(kind)),
            ("failure_rate_threshold", int(50)),
            ("minimum_required_calls", int(4)),
            ("wait_duration_in_open_state", s("1s")),
            ("permitted_calls_in_half_open_state", int(2)),
        ]),
        "count_based",
        table([("window_size", int(4))]),
    )
}

#[derive(CircuitBreakerSpec)]
#[spec("review.breaker.main")]
struct B;

fn handle(r: &Registry) -> CircuitBreakerHandle<B> {
    r.sync_scope(B::get).expect("configured")
}

fn open(b: &CircuitBreakerHandle<B>) {
    for _ in 0..4 {
        b.try_acquire().expect("closed").failure();
    }
    assert_eq!(b.state(), State::Open);
}

// ------------------------------------------------ stale permits

/// A permit taken while closed that succeeds during half-open is counted as
/// a probe success: two slow closed-period calls close the breaker while its
/// only real probe is still running.
#[tokio::test(start_paused = true)]
async fn closed_period_successes_close_a_half_open_breaker() {
    let r = registry::<B>(section("ring_buffer"));
    let b = handle(&r);
    let (late1, late2) = (
        b.try_acquire().expect("closed"),
        b.try_acquire().expect("closed"),
    );
    open(&b);
    tokio::time::advance(Duration::from_secs(1)).await;
    let probe = b.try_acquire().expect("first probe");
    late1.success();
    late2.success();
    assert_eq!(
        b.state(),
        State::HalfOpen,
        "no probe has succeeded yet, but closed-period permits closed it"
    );
    drop(probe);
}

/// Same as `probes_that_never_finish_reopen_after_max_wait_in_half_open`, but
/// the hung probes of the old period end with success instead of being
/// dropped: they count in the new period.
#[tokio::test(start_paused = true)]
async fn old_half_open_probes_that_succeed_late_close_a_newer_period() {
    let r = registry::<B>(with(
        section("ring_buffer"),
        "max_wait_in_half_open",
        s("5s"),
    ));
    let b = handle(&r);
    open(&b);
    tokio::time::advance(Duration::from_secs(1)).await;
    let hung = (
        b.try_acquire().expect("probe"),
        b.try_acquire().expect("probe"),
    );
    tokio::time::advance(Duration::from_secs(5)).await;
    assert!(b.try_acquire().is_none());
    assert_eq!(b.state(), State::Open);
    tokio::time::advance(Duration::from_secs(1)).await;
    let fresh = b.try_acquire().expect("a new half-open period");
    hung.0.success();
    hung.1.success();
    assert_eq!(
        b.state(),
        State::HalfOpen,
        "two probes of an abandoned period closed the new one; its own probe is still running"
    );
    drop(fresh);
}

/// Same with a failed probe instead of max_wait.
#[tokio::test(start_paused = true)]
async fn a_probe_from_the_previous_half_open_period_counts_in_the_next() {
    let r = registry::<B>(section("ring_buffer"));
    let b = handle(&r);
    open(&b);
    tokio::time::advance(Duration::from_secs(1)).await;
    let first = b.try_acquire().expect("probe 1");
    let old = b.try_acquire().expect("probe 2");
    first.failure();
    assert_eq!(b.state(), State::Open);
    tokio::time::advance(Duration::from_secs(1)).await;
    let new = b.try_acquire().expect("probe of the new period");
    old.success();
    new.success();
    assert_eq!(
        b.state(),
        State::HalfOpen,
        "only one probe of this period (of 2) has succeeded"
    );
}

/// Each open/half-open cycle takes two generations: a probe hung for 8192
/// cycles (the wrap of a 14-bit generation) still cannot free a place in the
/// current period.
#[tokio::test(start_paused = true)]
async fn a_probe_hung_for_8192_cycles_frees_no_place_in_the_current_period() {
    let section = with(
        with(
            with(section("ring_buffer"), "max_wait_in_half_open", s("1s")),
            "wait_duration_in_open_state",
            s("0s"),
        ),
        "permitted_calls_in_half_open_state",
        int(1),
    );
    let r = registry::<B>(section);
    let b = handle(&r);
    open(&b);
    let stale = b.try_acquire().expect("probe, period 0");
    let mut hung = Vec::new();
    for _ in 0..8192 {
        tokio::time::advance(Duration::from_secs(1)).await;
        // Overdue: opens (gen + 1), and with no wait goes half-open again
        // (gen + 1), taking the new period's only probe.
        hung.push(b.try_acquire().expect("probe of a new period"));
    }
    assert_eq!(b.metrics().probes_in_flight, 1);
    drop(stale);
    assert_eq!(
        b.metrics().probes_in_flight,
        1,
        "a probe 8192 periods old gave back the current probe's place"
    );
    assert!(
        b.try_acquire().is_none(),
        "permitted_calls_in_half_open_state = 1 but a second probe is admitted"
    );
}

// ------------------------------------------------ windows

/// A success never opens a breaker, not even the one that fills a fixed
/// window: the window restarts unjudged. Window 4, minimum 4, threshold 50 %.
#[tokio::test(start_paused = true)]
async fn success_that_fills_a_fixed_window_never_opens_it() {
    let r = registry::<B>(section("fixed_window"));
    let b = handle(&r);
    for fail in [true, true, false, false] {
        let p = b.try_acquire().expect("closed");
        if fail {
            p.failure();
        } else {
            p.success();
        }
    }
    assert_eq!(
        b.state(),
        State::Closed,
        "fail, fail, ok, ok: the last call succeeded"
    );
    assert_eq!(b.metrics().window.total, 0, "the full window restarted");
    assert_eq!(b.metrics().opened, 0);
}

/// For every window type: a success is never the call that opens the
/// breaker, even when it brings the window to its minimum at 50 % failures.
#[tokio::test(start_paused = true)]
async fn no_window_type_opens_on_a_success() {
    for kind in ["striped_approx", "ring_buffer", "fixed_window"] {
        let r = registry::<B>(section(kind));
        let b = handle(&r);
        for fail in [true, true, false, false] {
            let p = b.try_acquire().expect("closed");
            if fail {
                p.failure();
            } else {
                p.success();
            }
        }
        assert_eq!(b.state(), State::Closed, "{kind}");
        // The next failure makes 3 of the last 4 (or, for the restarted
        // fixed window, 1 of 1, below the minimum).
        b.try_acquire().expect("closed").failure();
        let expect = if kind == "fixed_window" {
            State::Closed
        } else {
            State::Open
        };
        assert_eq!(b.state(), expect, "{kind}");
    }
}

// ------------------------------------------------ clock packing

/// The opened-at instant keeps 48 bits of µs (8.9 years): past that, an open
/// breaker lets probes through at once.
#[tokio::test(start_paused = true)]
async fn opened_at_wraps_after_2_pow_48_microseconds() {
    let r = registry::<B>(section("ring_buffer"));
    let b = handle(&r);
    tokio::time::advance(Duration::from_micros(1 << 48)).await;
    open(&b);
    assert!(b.try_acquire().is_none(), "wait is 1 s, none has passed");
}

/// max_wait_in_half_open starts from the floor of the µs, so it can fire up
/// to 1 µs early (the open wait is careful to round the other way).
#[tokio::test(start_paused = true)]
async fn max_wait_in_half_open_can_fire_early() {
    let section = with(
        with(
            with(section("ring_buffer"), "max_wait_in_half_open", s("1us")),
            "wait_duration_in_open_state",
            s("0s"),
        ),
        "permitted_calls_in_half_open_state",
        int(1),
    );
    let r = registry::<B>(section);
    let b = handle(&r);
    open(&b);
    tokio::time::advance(Duration::from_nanos(900)).await;
    let _probe = b.try_acquire().expect("probe");
    tokio::time::advance(Duration::from_nanos(200)).await;
    // 200 ns of a 1 µs max wait have passed.
    assert!(b.try_acquire().is_none());
    assert_eq!(b.state(), State::HalfOpen, "reopened after 200 ns");
}

// ------------------------------------------------ metrics

#[tokio::test(start_paused = true)]
async fn probes_in_flight_counts_finished_probes() {
    let r = registry::<B>(section("ring_buffer"));
    let b = handle(&r);
    open(&b);
    tokio::time::advance(Duration::from_secs(1)).await;
    b.try_acquire().expect("probe").success();
    assert_eq!(b.state(), State::HalfOpen);
    assert_eq!(b.metrics().probes_in_flight, 0, "no probe is running");
}

#[tokio::test(start_paused = true)]
async fn metrics_window_is_not_empty_when_forced_open_or_disabled() {
    let r = registry::<B>(section("ring_buffer"));
    let b = handle(&r);
    b.try_acquire().expect("closed").failure();
    b.force_open();
    assert_eq!(b.metrics().state, State::ForcedOpen);
    assert_eq!(
        b.metrics().window.total,
        0,
        "documented: empty unless closed"
    );
}

// ------------------------------------------------ reset with a probe in flight

#[tokio::test(start_paused = true)]
async fn a_probe_that_fails_after_reset_is_counted_in_the_fresh_window() {
    let r = registry::<B>(section("ring_buffer"));
    let b = handle(&r);
    open(&b);
    tokio::time::advance(Duration::from_secs(1)).await;
    let probe = b.try_acquire().expect("probe");
    b.reset();
    probe.failure();
    assert_eq!(b.state(), State::Closed);
    assert_eq!(
        b.metrics().window.total,
        0,
        "the probe belonged to the half-open period that reset discarded"
    );
}

// ------------------------------------------------ the chain

#[derive(CircuitBreakerSpec)]
#[spec("review.breaker.chain", classify = custom)]
struct ChainBreaker;

impl Classify<(), TestError> for ChainBreaker {
    fn classify(outcome: &Result<(), TestError>) -> Verdict {
        match outcome {
            Ok(()) => Verdict::Success,
            Err(TestError::NotFound) => Verdict::Ignore,
            Err(_) => Verdict::Failure,
        }
    }
}

#[derive(RetrySpec)]
#[spec("review.retry.error")]
struct RetryError;

#[derive(RetrySpec)]
#[spec("review.retry.last", exhausted = last_failure)]
struct RetryLast;

struct Svc {
    runs: AtomicU32,
}

impl Svc {
    #[circuit_breakable(ChainBreaker)]
    #[retryable(RetryError)]
    async fn wrapped(&self) -> Result<(), TestError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Err(TestError::NotFound)
    }

    #[circuit_breakable(ChainBreaker)]
    #[retryable(RetryLast)]
    async fn last(&self) -> Result<(), TestError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Err(TestError::NotFound)
    }
}

fn chain() -> Registry {
    let retry = table([("delay", s("10ms")), ("attempts", int(1))]);
    build(
        Registry::builder()
            .spec::<ChainBreaker>()
            .spec::<RetryError>()
            .spec::<RetryLast>(),
        vec![
            (ChainBreaker::PATH, section("ring_buffer")),
            (RetryError::PATH, retry.clone()),
            (RetryLast::PATH, retry),
        ],
    )
}

/// The breaker ignores NotFound. Through a retry that gives up with
/// `last_failure` it stays closed; a retry that gives up with
/// `RetryExhausted` reports that it retried and failed, which the breaker
/// counts as a failure whatever the last error was (documented).
#[tokio::test(start_paused = true)]
async fn retry_exhaustion_counts_as_a_failure_even_for_errors_the_breaker_ignores() {
    let r = chain();
    let svc = Svc {
        runs: AtomicU32::new(0),
    };
    for _ in 0..4 {
        let _ = r.scope(svc.last()).await;
    }
    let b = r.sync_scope(ChainBreaker::get).expect("configured");
    assert_eq!(b.state(), State::Closed, "last_failure: ignored");
    for _ in 0..4 {
        let _ = r.scope(svc.wrapped()).await;
    }
    assert_eq!(
        b.state(),
        State::Open,
        "exhausted = error: four exhaustions open it"
    );
}

// ------------------------------------------------ counts

#[tokio::test(start_paused = true)]
async fn fixed_window_at_its_maximum_size_counts_without_overflow() {
    let n = 2_097_151;
    let section = with(
        with(section("fixed_window"), "minimum_required_calls", int(n)),
        "count_based",
        table([("window_size", int(n))]),
    );
    let r = registry::<B>(section);
    let b = handle(&r);
    for _ in 0..n - 1 {
        b.try_acquire().expect("closed").failure();
    }
    let m = b.metrics().window;
    assert_eq!((m.total, m.failures), (n as u64 - 1, n as u64 - 1));
    b.try_acquire().expect("closed").failure();
    assert_eq!(b.state(), State::Open);
}

#[tokio::test(start_paused = true)]
async fn a_slow_failure_counts_once_in_total() {
    let section = with(
        section("ring_buffer"),
        "slow_call",
        table([
            ("duration_threshold", s("100ms")),
            ("rate_threshold", int(100)),
        ]),
    );
    let r = registry::<B>(section);
    let b = handle(&r);
    let p = b.try_acquire().expect("closed");
    tokio::time::advance(Duration::from_millis(101)).await;
    p.failure();
    let w = b.metrics().window;
    assert_eq!((w.total, w.failures, w.slow), (1, 1, 1));
}

/// A slow probe reopens the breaker like a failed one (documented).
#[tokio::test(start_paused = true)]
async fn a_slow_successful_probe_reopens() {
    let section = with(
        section("ring_buffer"),
        "slow_call",
        table([
            ("duration_threshold", s("100ms")),
            ("rate_threshold", int(100)),
        ]),
    );
    let r = registry::<B>(section);
    let b = handle(&r);
    open(&b);
    tokio::time::advance(Duration::from_secs(1)).await;
    let p = b.try_acquire().expect("probe");
    tokio::time::advance(Duration::from_millis(101)).await;
    p.success();
    assert_eq!(b.state(), State::Open);
}
