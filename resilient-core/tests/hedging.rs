//! Hedging: a slow attempt gets another beside it after `delay`, the first
//! accepted outcome is returned at once and every other attempt is dropped;
//! `max_hedged_attempts`, `on_failure`, the budget and a concurrency limit
//! outside or inside are obeyed; calls from two threads are all accounted
//! for. A fake replica counts the attempts started, finished and cancelled
//! (a drop guard counts the cancelled ones), on the paused clock.

mod support;
use support::*;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use resilient_core::circuit_breaker::Metrics;
use resilient_core::hedging::{HedgingCounts, HedgingSettings, OnFailure};
use resilient_core::settings::Value;
use resilient_core::telemetry::Event;
use resilient_core::{
    circuit_breakable, concurrency_limit, hedged, timeout, CircuitBreakerSpec,
    ConcurrencyLimitSpec, Error, HedgingSpec, Registry, TimeoutSpec,
};
use tokio::time::Instant;

type TestResult = Result<(), Box<dyn std::error::Error>>;

#[derive(Debug, thiserror::Error)]
enum TestError {
    /// The replica's answer to attempt `n` (counted from 0) was a failure.
    #[error("replica failed attempt {0}")]
    Replica(usize),
    #[error(transparent)]
    Resilience(#[from] Error),
}

/// One step of the replica's script: how long an attempt takes, and
/// whether it succeeds.
#[derive(Clone, Copy)]
struct Step {
    ms: u64,
    ok: bool,
}

const fn ok(ms: u64) -> Step {
    Step { ms, ok: true }
}

const fn fail(ms: u64) -> Step {
    Step { ms, ok: false }
}

/// A fake replica: attempt `n` of all its calls follows `script[n]` (the
/// last step for every attempt past the end), and every attempt is counted.
#[derive(Clone)]
struct Replica(Arc<ReplicaState>);

struct ReplicaState {
    script: Vec<Step>,
    t0: Instant,
    next: AtomicUsize,
    started: AtomicU64,
    finished: AtomicU64,
    cancelled: AtomicU64,
    running: AtomicU64,
    peak: AtomicU64,
    /// Milliseconds from `t0` at which each attempt started.
    starts: Mutex<Vec<u128>>,
    /// The most permits of a concurrency limit seen in use by an attempt.
    permits: AtomicU64,
}

/// Counts an attempt that is dropped before it finishes.
struct Running<'a> {
    state: &'a ReplicaState,
    finished: bool,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.state.cancelled.fetch_add(1, Ordering::SeqCst);
        }
        self.state.running.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Replica {
    fn new(script: &[Step]) -> Self {
        Self(Arc::new(ReplicaState {
            script: script.to_vec(),
            t0: Instant::now(),
            next: AtomicUsize::new(0),
            started: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            running: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            starts: Mutex::new(Vec::new()),
            permits: AtomicU64::new(0),
        }))
    }

    /// One attempt: the next step of the script.
    async fn call(&self) -> Result<usize, TestError> {
        let s = &*self.0;
        let n = s.next.fetch_add(1, Ordering::SeqCst);
        let step = s.script[n.min(s.script.len() - 1)];
        s.started.fetch_add(1, Ordering::SeqCst);
        let now = s.running.fetch_add(1, Ordering::SeqCst) + 1;
        s.peak.fetch_max(now, Ordering::SeqCst);
        s.starts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(s.t0.elapsed().as_millis());
        let mut guard = Running {
            state: s,
            finished: false,
        };
        tokio::time::sleep(Duration::from_millis(step.ms)).await;
        guard.finished = true;
        s.finished.fetch_add(1, Ordering::SeqCst);
        if step.ok {
            Ok(n)
        } else {
            Err(TestError::Replica(n))
        }
    }

    /// Attempts (started, finished, cancelled).
    fn counts(&self) -> (u64, u64, u64) {
        let s = &*self.0;
        (
            s.started.load(Ordering::SeqCst),
            s.finished.load(Ordering::SeqCst),
            s.cancelled.load(Ordering::SeqCst),
        )
    }

    fn peak(&self) -> u64 {
        self.0.peak.load(Ordering::SeqCst)
    }

    fn starts(&self) -> Vec<u128> {
        self.0
            .starts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn elapsed_ms(&self) -> u128 {
        self.0.t0.elapsed().as_millis()
    }
}

fn counts<S: HedgingSpec>(registry: &Registry) -> Result<HedgingCounts, Error> {
    registry.sync_scope(|| S::get().map(|h| h.counts()))
}

/// A hedging section, its log lines off. Only the test that reads the log
/// lines logs: tracing caches, per log line, whether any subscriber
/// listens, and a line first met on another test's thread while that
/// test's capturing subscriber was being set could be cached as unheard.
fn section(delay: &str, max: i128) -> Value {
    table([
        ("delay", s(delay)),
        ("max_hedged_attempts", int(max)),
        (
            "telemetry",
            table([("logging", table([("enabled", Value::Bool(false))]))]),
        ),
    ])
}

// ------------------------------------------------- slow first, fast second

#[derive(HedgingSpec)]
#[spec("hedging.slow_first")]
struct SlowFirst;

#[hedged(SlowFirst)]
async fn slow_first(replica: Replica) -> Result<usize, TestError> {
    replica.call().await
}

#[tokio::test(start_paused = true)]
async fn a_fast_hedge_answers_for_a_slow_first_attempt_which_is_cancelled() -> TestResult {
    let registry = registry::<SlowFirst>(section("100ms", 1));
    let hedges = Arc::new(AtomicU64::new(0));
    let seen = Arc::clone(&hedges);
    let _ = registry.subscribe(move |e| {
        if let Event::Hedged {
            attempt: 2,
            after_failure: false,
            ..
        } = e
        {
            seen.fetch_add(1, Ordering::SeqCst);
        }
    });
    let replica = Replica::new(&[ok(1000), ok(50)]);
    let out = registry.scope(slow_first(replica.clone())).await?;
    // The second attempt's value, at 100 ms + 50 ms exactly.
    assert_eq!(out, 1);
    assert_eq!(replica.elapsed_ms(), 150);
    assert_eq!(replica.starts(), [0, 100]);
    // Started 2, finished 1, the slow one dropped when the fast one won.
    assert_eq!(replica.counts(), (2, 1, 1));
    let c = counts::<SlowFirst>(&registry)?;
    assert_eq!(
        (c.attempts_started, c.hedges_started, c.attempts_won),
        (2, 1, 1)
    );
    assert_eq!((c.attempts_failed, c.attempts_cancelled), (0, 1));
    assert_eq!(hedges.load(Ordering::SeqCst), 1);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_fast_first_attempt_starts_no_hedge() -> TestResult {
    let registry = registry::<SlowFirst>(section("100ms", 1));
    let replica = Replica::new(&[ok(50)]);
    assert_eq!(registry.scope(slow_first(replica.clone())).await?, 0);
    assert_eq!(replica.elapsed_ms(), 50);
    assert_eq!(replica.counts(), (1, 1, 0));
    // Ready on its first poll: no timer, no hedge either.
    let ready = Replica::new(&[ok(0)]);
    assert_eq!(registry.scope(slow_first(ready.clone())).await?, 0);
    assert_eq!(ready.counts(), (1, 1, 0));
    let c = counts::<SlowFirst>(&registry)?;
    assert_eq!(
        (c.attempts_started, c.hedges_started, c.attempts_won),
        (2, 0, 2)
    );
    Ok(())
}

// ------------------------------------------------------ max_hedged_attempts

#[derive(HedgingSpec)]
#[spec("hedging.bounded")]
struct Bounded;

#[hedged(Bounded)]
async fn bounded(replica: Replica) -> Result<usize, TestError> {
    replica.call().await
}

#[tokio::test(start_paused = true)]
async fn max_hedged_attempts_bounds_the_attempts_running_at_once() -> TestResult {
    for max in [0u64, 1, 3, 10] {
        let registry = registry::<Bounded>(section("10ms", i128::from(max)));
        let replica = Replica::new(&[ok(1000)]);
        // Every attempt takes 1 s: the first one wins, at 1 s.
        assert_eq!(registry.scope(bounded(replica.clone())).await?, 0);
        assert_eq!(replica.elapsed_ms(), 1000, "max {max}");
        assert_eq!(replica.peak(), max + 1, "max {max}");
        assert_eq!(replica.counts(), (max + 1, 1, max), "max {max}");
        let starts: Vec<u128> = (0..=u128::from(max)).map(|i| i * 10).collect();
        assert_eq!(replica.starts(), starts, "max {max}");
    }
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_zero_delay_starts_every_attempt_at_once() -> TestResult {
    let registry = registry::<Bounded>(section("0s", 3));
    let replica = Replica::new(&[ok(1000), ok(500), ok(800)]);
    // All four start at 0 ms; the second (500 ms) wins.
    assert_eq!(registry.scope(bounded(replica.clone())).await?, 1);
    assert_eq!(replica.starts(), [0, 0, 0, 0]);
    assert_eq!(replica.elapsed_ms(), 500);
    assert_eq!((replica.peak(), replica.counts()), (4, (4, 1, 3)));
    Ok(())
}

// ------------------------------------------------------------------ failure

#[derive(HedgingSpec)]
#[spec("hedging.failing")]
struct Failing;

#[hedged(Failing)]
async fn failing(replica: Replica) -> Result<usize, TestError> {
    replica.call().await
}

#[tokio::test(start_paused = true)]
async fn a_failed_attempt_starts_the_next_at_once_or_on_schedule() -> TestResult {
    // hedge_at_once (the default): the failure at 20 ms starts attempt 2.
    let at_once = registry::<Failing>(section("100ms", 1));
    let replica = Replica::new(&[fail(20), ok(30)]);
    assert_eq!(at_once.scope(failing(replica.clone())).await?, 1);
    assert_eq!(replica.starts(), [0, 20]);
    assert_eq!(replica.elapsed_ms(), 50);
    assert_eq!(replica.counts(), (2, 2, 0));
    let c = counts::<Failing>(&at_once)?;
    assert_eq!((c.attempts_failed, c.attempts_won), (1, 1));

    // wait: attempt 2 keeps its schedule, 100 ms after the first start.
    let wait = registry::<Failing>(with(section("100ms", 1), "on_failure", s("wait")));
    let replica = Replica::new(&[fail(20), ok(30)]);
    assert_eq!(wait.scope(failing(replica.clone())).await?, 1);
    assert_eq!(replica.starts(), [0, 100]);
    assert_eq!(replica.elapsed_ms(), 130);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn when_every_attempt_fails_the_last_failure_is_returned() -> TestResult {
    let registry = registry::<Failing>(section("10ms", 2));
    // Attempts start at 0, 10 and 20 ms and fail at 100, 60 and 220 ms:
    // the last to finish is attempt 2 (counted from 0).
    let replica = Replica::new(&[fail(100), fail(50), fail(200)]);
    match registry.scope(failing(replica.clone())).await {
        Err(TestError::Replica(2)) => {}
        other => return Err(format!("expected attempt 2's failure, got {other:?}").into()),
    }
    assert_eq!(replica.elapsed_ms(), 220);
    assert_eq!(replica.starts(), [0, 10, 20]);
    assert_eq!(replica.counts(), (3, 3, 0));
    let c = counts::<Failing>(&registry)?;
    assert_eq!(
        (c.attempts_failed, c.attempts_won, c.attempts_cancelled),
        (3, 0, 0)
    );
    Ok(())
}

// ----------------------------------------------------------- classification

/// Classified by the spec itself: an `Ok(0)` is a failure (as a client's
/// `Ok` for a 503 would be), and an error is ignored (as a 404 would be:
/// another attempt would not change it).
#[derive(HedgingSpec)]
#[spec("hedging.classified", classify = custom)]
struct Classified;

impl resilient_core::Classify<usize, TestError> for Classified {
    fn classify(outcome: &Result<usize, TestError>) -> resilient_core::Verdict {
        match outcome {
            Ok(0) => resilient_core::Verdict::Failure,
            Ok(_) => resilient_core::Verdict::Success,
            Err(_) => resilient_core::Verdict::Ignore,
        }
    }
}

#[hedged(Classified)]
async fn classified(replica: Replica) -> Result<usize, TestError> {
    replica.call().await
}

#[tokio::test(start_paused = true)]
async fn the_spec_classification_decides_what_is_accepted() -> TestResult {
    let slow = registry::<Classified>(section("100ms", 1));
    // `Ok(0)` at 50 ms is a failure: the hedge starts at once and its
    // `Ok(1)` is accepted at 80 ms.
    let replica = Replica::new(&[ok(50), ok(30)]);
    assert_eq!(slow.scope(classified(replica.clone())).await?, 1);
    assert_eq!(replica.starts(), [0, 50]);
    assert_eq!(replica.elapsed_ms(), 80);
    // An ignored error is returned at once: the hedge started at 10 ms is
    // dropped when the first attempt's error comes at 50 ms.
    let registry = registry::<Classified>(section("10ms", 1));
    let replica = Replica::new(&[fail(50), ok(1000)]);
    match registry.scope(classified(replica.clone())).await {
        Err(TestError::Replica(0)) => {}
        other => return Err(format!("expected attempt 0's error, got {other:?}").into()),
    }
    assert_eq!(replica.elapsed_ms(), 50);
    assert_eq!(replica.counts(), (2, 1, 1));
    let c = counts::<Classified>(&registry)?;
    assert_eq!(
        (c.attempts_won, c.attempts_failed, c.attempts_cancelled),
        (1, 0, 1)
    );
    Ok(())
}

// ------------------------------------------- a concurrency limit, outside or in

#[derive(ConcurrencyLimitSpec)]
#[spec("hedging.limit.outside")]
struct OutsideLimit;

#[derive(ConcurrencyLimitSpec)]
#[spec("hedging.limit.inside")]
struct InsideLimit;

#[derive(HedgingSpec)]
#[spec("hedging.limited")]
struct Limited;

#[concurrency_limit(OutsideLimit)]
#[hedged(Limited)]
async fn limit_outside(replica: Replica) -> Result<usize, TestError> {
    let in_use = OutsideLimit::get()?.in_use();
    replica
        .0
        .permits
        .fetch_max(u64::from(in_use), Ordering::SeqCst);
    replica.call().await
}

#[hedged(Limited)]
#[concurrency_limit(InsideLimit)]
async fn limit_inside(replica: Replica) -> Result<usize, TestError> {
    let in_use = InsideLimit::get()?.in_use();
    replica
        .0
        .permits
        .fetch_max(u64::from(in_use), Ordering::SeqCst);
    replica.call().await
}

#[tokio::test(start_paused = true)]
async fn a_limit_outside_takes_one_permit_per_call_and_inside_one_per_attempt() -> TestResult {
    let limit = table([("limit", int(5))]);
    let registry = build(
        Registry::builder()
            .spec::<OutsideLimit>()
            .spec::<InsideLimit>()
            .spec::<Limited>(),
        vec![
            ("hedging.limit.outside", limit.clone()),
            ("hedging.limit.inside", limit),
            ("hedging.limited", section("100ms", 1)),
        ],
    );
    let outside = Replica::new(&[ok(1000), ok(50)]);
    assert_eq!(registry.scope(limit_outside(outside.clone())).await?, 1);
    assert_eq!(outside.counts(), (2, 1, 1));
    // Both attempts ran under the call's one permit.
    assert_eq!(outside.0.permits.load(Ordering::SeqCst), 1);

    let inside = Replica::new(&[ok(1000), ok(50)]);
    assert_eq!(registry.scope(limit_inside(inside.clone())).await?, 1);
    assert_eq!(inside.counts(), (2, 1, 1));
    // Each attempt took its own.
    assert_eq!(inside.0.permits.load(Ordering::SeqCst), 2);
    // And every permit came back, the cancelled attempt's included.
    let (o, i) = registry.sync_scope(|| -> Result<(u32, u32), Error> {
        Ok((OutsideLimit::get()?.in_use(), InsideLimit::get()?.in_use()))
    })?;
    assert_eq!((o, i), (0, 0));
    Ok(())
}

// ------------------------------------------------- a breaker, outside or in

#[derive(CircuitBreakerSpec)]
#[spec("hedging.breaker.outside")]
struct OutsideBreaker;

#[derive(CircuitBreakerSpec)]
#[spec("hedging.breaker.inside")]
struct InsideBreaker;

#[circuit_breakable(OutsideBreaker)]
#[hedged(Limited)]
async fn breaker_outside(replica: Replica) -> Result<usize, TestError> {
    replica.call().await
}

#[hedged(Limited)]
#[circuit_breakable(InsideBreaker)]
async fn breaker_inside(replica: Replica) -> Result<usize, TestError> {
    replica.call().await
}

#[tokio::test(start_paused = true)]
async fn a_breaker_outside_counts_the_call_and_inside_each_attempt() -> TestResult {
    let breaker = || {
        table([
            ("failure_rate_threshold", int(100)),
            ("minimum_required_calls", int(10)),
            ("wait_duration_in_open_state", s("10s")),
            ("permitted_calls_in_half_open_state", int(1)),
            ("count_based", table([("window_size", int(10))])),
        ])
    };
    let registry = build(
        Registry::builder()
            .spec::<OutsideBreaker>()
            .spec::<InsideBreaker>()
            .spec::<Limited>(),
        vec![
            ("hedging.breaker.outside", breaker()),
            ("hedging.breaker.inside", breaker()),
            ("hedging.limited", section("100ms", 1)),
        ],
    );
    // The first attempt succeeds at 1 s; the hedge, started at 100 ms,
    // fails at 150 ms. Both ways the call returns the first's value.
    let outside = Replica::new(&[ok(1000), fail(50)]);
    assert_eq!(registry.scope(breaker_outside(outside.clone())).await?, 0);
    let inside = Replica::new(&[ok(1000), fail(50)]);
    assert_eq!(registry.scope(breaker_inside(inside.clone())).await?, 0);
    let metrics = |m: Metrics| (m.window.total, m.window.failures);
    let (o, i) = registry.sync_scope(|| -> Result<_, Error> {
        Ok((
            metrics(OutsideBreaker::get()?.metrics()),
            metrics(InsideBreaker::get()?.metrics()),
        ))
    })?;
    // Outside: one call, a success. Inside: two attempts, one failed.
    assert_eq!(o, (1, 0));
    assert_eq!(i, (2, 1));
    Ok(())
}

// -------------------------------------------------- a timeout, outside or in

#[derive(TimeoutSpec)]
#[spec("hedging.timeout.whole")]
struct WholeCall;

#[derive(TimeoutSpec)]
#[spec("hedging.timeout.attempt")]
struct PerAttempt;

#[derive(HedgingSpec)]
#[spec("hedging.timed")]
struct Timed;

#[timeout(WholeCall)]
#[hedged(Timed)]
async fn timed_outside(replica: Replica) -> Result<usize, TestError> {
    replica.call().await
}

#[hedged(Timed)]
#[timeout(PerAttempt)]
async fn timed_inside(replica: Replica) -> Result<usize, TestError> {
    replica.call().await
}

#[tokio::test(start_paused = true)]
async fn a_timeout_outside_bounds_the_call_and_inside_each_attempt() -> TestResult {
    let registry = build(
        Registry::builder()
            .spec::<WholeCall>()
            .spec::<PerAttempt>()
            .spec::<Timed>(),
        vec![
            ("hedging.timeout.whole", table([("duration", s("300ms"))])),
            ("hedging.timeout.attempt", table([("duration", s("150ms"))])),
            ("hedging.timed", section("100ms", 2)),
        ],
    );
    // Outside: three attempts (0, 100, 200 ms), all dropped at 300 ms.
    let outside = Replica::new(&[ok(1000)]);
    match registry.scope(timed_outside(outside.clone())).await {
        Err(TestError::Resilience(Error::Timeout { .. })) => {}
        other => return Err(format!("expected a timeout, got {other:?}").into()),
    }
    assert_eq!(outside.elapsed_ms(), 300);
    assert_eq!(outside.starts(), [0, 100, 200]);
    assert_eq!(outside.counts(), (3, 0, 3));

    // Inside: each attempt times out 150 ms after its start, a failure that
    // starts the next at once; the last one's timeout is returned.
    let inside = Replica::new(&[ok(1000)]);
    match registry.scope(timed_inside(inside.clone())).await {
        Err(TestError::Resilience(Error::Timeout { .. })) => {}
        other => return Err(format!("expected a timeout, got {other:?}").into()),
    }
    // 0 and 100 ms by the delay, 150 ms by the first timeout; the last
    // (started at 150 ms) times out at 300 ms.
    assert_eq!(inside.starts(), [0, 100, 150]);
    assert_eq!(inside.elapsed_ms(), 300);
    assert_eq!(inside.counts(), (3, 0, 3));
    let c = counts::<Timed>(&registry)?;
    // Outside: 3 cancelled by the timeout; inside: 3 failed (timed out).
    assert_eq!((c.attempts_cancelled, c.attempts_failed), (3, 3));
    Ok(())
}

// ------------------------------------------------------------------- budget

#[derive(HedgingSpec)]
#[spec("hedging.budgeted")]
struct Budgeted;

#[hedged(Budgeted)]
async fn budgeted(replica: Replica) -> Result<usize, TestError> {
    replica.call().await
}

#[tokio::test(start_paused = true)]
async fn no_hedge_starts_once_the_budget_is_empty() -> TestResult {
    let budget = table([
        ("tokens_max", int(2)),
        ("tokens_initial", int(2)),
        ("ratio", Value::Float(0.0)),
    ]);
    let registry = registry::<Budgeted>(with(section("10ms", 1), "hedging_budget", budget));
    let replica = Replica::new(&[ok(200)]);
    for _ in 0..5 {
        registry.scope(budgeted(replica.clone())).await?;
    }
    // Two calls hedged (a token each); the other three ran alone.
    assert_eq!(replica.counts(), (7, 5, 2));
    let c = counts::<Budgeted>(&registry)?;
    assert_eq!((c.hedges_started, c.hedges_refused_by_budget), (2, 3));
    assert_eq!(c.budget_tokens, Some(0.0));
    Ok(())
}

// ------------------------------------------------------- handle, telemetry

#[derive(HedgingSpec)]
#[spec("hedging.observed")]
struct Observed;

#[hedged(Observed)]
async fn observed(replica: Replica) -> Result<usize, TestError> {
    replica.call().await
}

#[tokio::test(start_paused = true)]
async fn the_handle_hedges_a_closure_as_the_attribute_does() -> TestResult {
    let registry = registry::<Observed>(section("100ms", 1));
    let replica = Replica::new(&[ok(1000), ok(50)]);
    let handle = registry.sync_scope(Observed::get)?;
    let out = handle
        .call(|| {
            let r = replica.clone();
            async move { r.call().await }
        })
        .await?;
    assert_eq!(out, 1);
    assert_eq!(replica.elapsed_ms(), 150);
    assert_eq!(replica.counts(), (2, 1, 1));
    assert_eq!(handle.counts().attempts_cancelled, 1);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn attempts_are_counted_by_outcome_and_each_hedge_logged_at_debug() -> TestResult {
    let meters = support::capture::Meters::default();
    let capture = support::capture::Capture::default();
    let _subscriber = tracing::subscriber::set_default(capture.clone());
    // Logging on (the default), metrics on: in place of `section`'s table.
    let section = with(
        section("100ms", 2),
        "telemetry",
        table([("metrics", table([("enabled", Value::Bool(true))]))]),
    );
    let registry = metrics::with_local_recorder(&meters, || registry::<Observed>(section));
    // A fast call (no hedge); a slow first beaten by a hedge; a failure
    // that hedges at once, then a success.
    for script in [
        &[ok(10)][..],
        &[ok(1000), ok(50)][..],
        &[fail(20), ok(30)][..],
    ] {
        registry.scope(observed(Replica::new(script))).await?;
    }
    let c = counts::<Observed>(&registry)?;
    assert_eq!(
        (
            c.attempts_started,
            c.hedges_started,
            c.attempts_won,
            c.attempts_failed,
            c.attempts_cancelled
        ),
        (5, 2, 3, 1, 1)
    );
    let counter = |outcome| {
        meters.counter(
            "resilient_hedging_attempts_total",
            &[
                ("spec", "Observed"),
                ("path", "hedging.observed"),
                ("outcome", outcome),
            ],
        )
    };
    assert_eq!(counter("started"), Some(5));
    assert_eq!(counter("won"), Some(3));
    assert_eq!(counter("failed"), Some(1));
    assert_eq!(counter("cancelled"), Some(1));
    let lines = capture.at("resilient::hedging", tracing::Level::DEBUG);
    assert_eq!(lines.len(), 2, "one DEBUG line per hedge: {lines:?}");
    assert_eq!(lines[0].fields["attempt"], "2");
    assert!(lines[1].message.contains("at once"), "{lines:?}");
    // The snapshot shows the handle's counts.
    let snapshot = registry.snapshot();
    let shown = snapshot
        .specs
        .iter()
        .find_map(|s| s.status::<HedgingCounts>())
        .ok_or("no hedging counts in the snapshot")?;
    assert_eq!(*shown, c);
    Ok(())
}

// ------------------------------------------------------------------- reload

#[derive(HedgingSpec)]
#[spec("hedging.reloaded")]
struct Reloaded;

#[hedged(Reloaded)]
async fn reloaded(replica: Replica) -> Result<usize, TestError> {
    replica.call().await
}

#[tokio::test(start_paused = true)]
async fn a_reload_changes_the_delay_and_the_attempts() -> TestResult {
    let registry = registry::<Reloaded>(section("100ms", 1));
    let replica = Replica::new(&[ok(1000)]);
    registry.scope(reloaded(replica.clone())).await?;
    assert_eq!(replica.starts(), [0, 100]);
    registry
        .reload(&root(vec![("hedging.reloaded", section("30ms", 2))]))
        .map_err(|problems| format!("reload refused: {problems:?}"))?;
    let replica = Replica::new(&[ok(1000)]);
    registry.scope(reloaded(replica.clone())).await?;
    assert_eq!(replica.starts(), [0, 30, 60]);
    let settings = registry.sync_scope(|| Reloaded::get().map(|h| h.settings().clone()))?;
    assert_eq!(settings.delay, Duration::from_millis(30));
    assert_eq!(settings.max_hedged_attempts, 2);
    assert_eq!(settings.on_failure, OnFailure::HedgeAtOnce);
    Ok(())
}

// --------------------------------------------------------------- validation

#[derive(HedgingSpec)]
#[spec("hedging.checked")]
struct Checked;

#[test]
fn every_problem_of_a_section_is_reported_at_once() -> TestResult {
    let bad = table([
        ("max_hedged_attempts", int(1_000_000_000_000_000_000_000)),
        ("on_failure", s("sometimes")),
        ("hedging_budget", table([("tokens_max", int(0))])),
        ("dealy", s("1s")),
    ]);
    let problems = match Registry::builder()
        .spec::<Checked>()
        .build(&root(vec![("hedging.checked", bad)]))
    {
        Ok(_) => return Err("an invalid hedging section was accepted".into()),
        Err(problems) => problems,
    };
    let mut keys: Vec<&str> = problems.iter().map(|p| p.key.as_str()).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "dealy",
            "hedging_budget.tokens_max",
            "max_hedged_attempts",
            "on_failure"
        ],
        "{problems:#?}"
    );
    let rule = |key: &str| {
        problems
            .iter()
            .find(|p| p.key == key)
            .map(|p| p.rule.clone())
            .unwrap_or_default()
    };
    assert!(
        rule("max_hedged_attempts").contains("0..=10"),
        "{problems:#?}"
    );
    // The missing `delay` is named with the misspelt key that meant it.
    assert!(
        rule("dealy").contains("did you mean `delay`"),
        "{problems:#?}"
    );
    assert!(rule("on_failure").contains("\"hedge_at_once\" or \"wait\""));
    // And the largest number accepted is the bound.
    let fine = registry::<Checked>(section("0s", 10));
    let s: HedgingSettings = fine.sync_scope(|| Checked::get().map(|h| h.settings().clone()))?;
    assert_eq!(s.max_hedged_attempts, 10);
    Ok(())
}

// ------------------------------------------------------------- two threads

#[derive(HedgingSpec)]
#[spec("hedging.threads")]
struct Threads;

#[hedged(Threads)]
async fn threaded(replica: Replica) -> Result<usize, TestError> {
    replica.call().await
}

#[test]
fn calls_from_two_threads_each_get_one_outcome_and_every_attempt_ends() -> TestResult {
    const TASKS: usize = 64;
    const CALLS: usize = 20;
    let registry = registry::<Threads>(section("2ms", 2));
    let rt = two_workers();
    // Latencies from 0 to 9 ms, every seventh attempt failing.
    let script: Vec<Step> = (0..4096u64)
        .map(|i| Step {
            ms: (i * 7919) % 10,
            ok: i % 7 != 0,
        })
        .collect();
    let (replica, outcomes) = rt.block_on(async {
        // Built here: its clock is this runtime's.
        let replica = Replica::new(&script);
        let mut tasks = Vec::new();
        for task in 0..TASKS {
            let (registry, replica) = (registry.clone(), replica.clone());
            tasks.push(tokio::spawn(async move {
                let mut outcomes = 0usize;
                for call in 0..CALLS {
                    let fut = registry.scope(threaded(replica.clone()));
                    // Every fifth call is given up by its caller after
                    // 3 ms: its attempts are dropped with it.
                    if (task + call) % 5 == 0 {
                        let _ = tokio::time::timeout(Duration::from_millis(3), fut).await;
                    } else {
                        match fut.await {
                            Ok(_) | Err(TestError::Replica(_)) => {}
                            Err(TestError::Resilience(e)) => return Err(e),
                        }
                    }
                    outcomes += 1;
                }
                Ok(outcomes)
            }));
        }
        let mut outcomes = 0;
        for task in tasks {
            outcomes += task.await.map_err(|e| e.to_string())??;
        }
        Ok::<_, Box<dyn std::error::Error>>((replica, outcomes))
    })?;
    assert_eq!(outcomes, TASKS * CALLS);
    let (started, finished, cancelled) = replica.counts();
    assert!(started >= (TASKS * CALLS) as u64, "{started}");
    assert_eq!(started, finished + cancelled);
    assert_eq!(replica.0.running.load(Ordering::SeqCst), 0);
    let c = counts::<Threads>(&registry)?;
    assert_eq!(c.attempts_started, started);
    assert_eq!(
        c.attempts_started,
        c.attempts_won + c.attempts_failed + c.attempts_cancelled
    );
    assert_eq!(c.attempts_cancelled, cancelled);
    Ok(())
}

#[derive(HedgingSpec)]
#[spec("hedging.dropped")]
struct Dropped;

#[hedged(Dropped)]
async fn dropped(replica: Replica) -> Result<usize, TestError> {
    replica.call().await
}

/// A call dropped while its only attempt has failed and the next waits for
/// its delay (`on_failure = "wait"`) counts as a cancelled call: no attempt
/// runs then, and the call still had no outcome.
#[tokio::test(start_paused = true)]
async fn a_call_dropped_between_attempts_counts_as_cancelled() -> TestResult {
    let meters = support::capture::Meters::default();
    let section = with(
        with(section("100ms", 1), "on_failure", s("wait")),
        "telemetry",
        table([("metrics", table([("enabled", Value::Bool(true))]))]),
    );
    // The recorder in use for the whole test: the `cancelled` series is
    // registered when the first call is cancelled.
    let _recorder = metrics::set_default_local_recorder(&meters);
    let registry = registry::<Dropped>(section);
    let replica = Replica::new(&[fail(10), ok(10)]);
    let call = registry.scope(dropped(replica.clone()));
    // Dropped at 50 ms: the first attempt failed at 10 ms, the second is
    // due at 100 ms.
    let out = tokio::time::timeout(Duration::from_millis(50), call).await;
    assert!(out.is_err(), "{out:?}");
    assert_eq!(replica.starts(), [0]);
    let calls = |outcome| {
        meters.counter(
            "resilient_calls_total",
            &[
                ("spec", "Dropped"),
                ("path", "hedging.dropped"),
                ("kind", "hedging"),
                ("outcome", outcome),
            ],
        )
    };
    assert_eq!(calls("cancelled"), Some(1));
    let c = counts::<Dropped>(&registry)?;
    assert_eq!((c.attempts_started, c.attempts_failed), (1, 1));
    Ok(())
}
