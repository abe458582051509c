//! Concurrency limit, timeout and rate limiter on tokio's paused clock: every
//! test counts calls, peak concurrency and exact times.

#![allow(clippy::expect_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::*;

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use resilient_core::circuit_breaker::State;
use resilient_core::settings::Value;
use resilient_core::{
    circuit_breakable, concurrency_limit, fallback, rate_limited, retryable, timeout,
    CircuitBreakerSpec, ConcurrencyLimitSpec, Error, GaveUp, RateLimiterSpec, Registry, RetrySpec,
    Spec, TimeoutSpec,
};
use tokio::time::Instant;

// ---------------------------------------------------------------- fixtures

#[derive(Debug, thiserror::Error)]
enum TestError {
    #[error("boom")]
    Boom,
    #[error(transparent)]
    Resilience(#[from] Error),
}

/// Whether `out` is a timeout of the timeout spec named `spec`.
fn timed_out<T>(out: &Result<T, TestError>, spec: &str) -> bool {
    matches!(out, Err(TestError::Resilience(Error::Timeout { spec: s, .. })) if *s == spec)
}

/// Counts calls running at once and the most seen.
#[derive(Clone, Default)]
struct Peak {
    now: Arc<AtomicUsize>,
    max: Arc<AtomicUsize>,
    done: Arc<AtomicUsize>,
}

impl Peak {
    async fn hold(&self, ms: u64) {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        self.now.fetch_sub(1, Ordering::SeqCst);
        self.done.fetch_add(1, Ordering::SeqCst);
    }

    fn max(&self) -> usize {
        self.max.load(Ordering::SeqCst)
    }

    fn done(&self) -> usize {
        self.done.load(Ordering::SeqCst)
    }
}

// ---------------------------------------------------------------- concurrency limit

#[derive(ConcurrencyLimitSpec)]
#[spec("test.concurrency.reviews")]
struct Reviews;

#[concurrency_limit(Reviews)]
async fn review(peak: Peak, ms: u64) -> Result<(), TestError> {
    peak.hold(ms).await;
    Ok(())
}

/// Starts `n` calls of `review` at once, each in its own task.
async fn burst(
    r: &Registry,
    peak: &Peak,
    n: usize,
    ms: u64,
) -> Vec<(Result<(), TestError>, Duration)> {
    let start = Instant::now();
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let (r, peak) = (r.clone(), peak.clone());
            tokio::spawn(async move {
                let out = r.scope(review(peak, ms)).await;
                (out, start.elapsed())
            })
        })
        .collect();
    let mut outs = Vec::new();
    for t in tasks {
        outs.push(t.await.expect("task"));
    }
    outs
}

#[tokio::test(start_paused = true)]
async fn block_with_limit_two_runs_six_callers_in_three_waves() {
    let r = registry::<Reviews>(table([("limit", int(2)), ("policy", s("block"))]));
    let peak = Peak::default();
    let outs = burst(&r, &peak, 6, 200).await;
    assert!(outs.iter().all(|(o, _)| o.is_ok()));
    assert_eq!((peak.max(), peak.done()), (2, 6));
    let mut ends: Vec<_> = outs.iter().map(|(_, t)| t.as_millis()).collect();
    ends.sort_unstable();
    assert_eq!(ends, [200, 200, 400, 400, 600, 600]);
}

#[tokio::test(start_paused = true)]
async fn reject_with_limit_two_turns_away_the_other_callers_at_once() {
    let r = registry::<Reviews>(table([("limit", int(2))]));
    let peak = Peak::default();
    let outs = burst(&r, &peak, 4, 200).await;
    let rejected: Vec<_> = outs
        .iter()
        .filter(|(o, _)| {
            matches!(
                o,
                Err(TestError::Resilience(Error::ConcurrencyLimitReached {
                    limit: 2,
                    ..
                }))
            )
        })
        .map(|(_, t)| *t)
        .collect();
    assert_eq!(
        rejected,
        [Duration::ZERO, Duration::ZERO],
        "rejected at once"
    );
    assert_eq!((peak.max(), peak.done()), (2, 2));
}

/// The reject policy's counter under two workers: 64 tasks, each making 200
/// calls that hold their place across a yield; never more than 3 at once,
/// every call either ran or was turned away, and every place came back.
#[test]
fn reject_counter_holds_the_limit_across_threads() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("runtime");
    let r = registry::<Reviews>(table([("limit", int(3))]));
    let limit = r.sync_scope(Reviews::get).expect("configured");
    let (now, max, ran, rejected) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    rt.block_on(async {
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let limit = limit.clone();
                let (now, max, ran, rejected) = (
                    Arc::clone(&now),
                    Arc::clone(&max),
                    Arc::clone(&ran),
                    Arc::clone(&rejected),
                );
                tokio::spawn(async move {
                    for _ in 0..200 {
                        let out = limit
                            .call(|| async {
                                let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                                max.fetch_max(n, Ordering::SeqCst);
                                tokio::task::yield_now().await;
                                now.fetch_sub(1, Ordering::SeqCst);
                                ran.fetch_add(1, Ordering::SeqCst);
                                Ok::<(), Error>(())
                            })
                            .await;
                        if let Err(Error::ConcurrencyLimitReached { limit: 3, .. }) = out {
                            rejected.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("task");
        }
    });
    assert!(
        max.load(Ordering::SeqCst) <= 3,
        "peak {}",
        max.load(Ordering::SeqCst)
    );
    assert_eq!(
        ran.load(Ordering::SeqCst) + rejected.load(Ordering::SeqCst),
        64 * 200
    );
    assert!(ran.load(Ordering::SeqCst) > 0);
    assert_eq!(limit.in_use(), 0, "every place came back");
    assert_eq!(limit.available(), 3);
}

#[tokio::test(start_paused = true)]
async fn limit_one_never_runs_two_calls_at_once() {
    let r = registry::<Reviews>(table([("limit", int(1)), ("policy", s("block"))]));
    let peak = Peak::default();
    let outs = burst(&r, &peak, 5, 10).await;
    assert!(outs.iter().all(|(o, _)| o.is_ok()));
    assert_eq!((peak.max(), peak.done()), (1, 5));
}

#[tokio::test(start_paused = true)]
async fn max_wait_bounds_the_wait_exactly() {
    // One place, held 200 ms by the first caller; the second waits.
    for (max_wait, waiter) in [
        ("150ms", (false, 150)), // gives up at exactly 150 ms
        ("199ms", (false, 199)),
        ("200ms", (true, 400)), // the place frees at 200 ms, in time
        ("250ms", (true, 400)),
    ] {
        let r = registry::<Reviews>(table([
            ("limit", int(1)),
            ("policy", s("block")),
            ("max_wait", s(max_wait)),
        ]));
        let peak = Peak::default();
        let mut outs: Vec<_> = burst(&r, &peak, 2, 200)
            .await
            .into_iter()
            .map(|(o, t)| (o, t.as_millis()))
            .collect();
        outs.sort_by_key(|(o, t)| (*t, o.is_ok()));
        let summary: Vec<_> = outs.iter().map(|(o, t)| (o.is_ok(), *t)).collect();
        let holder = (true, 200);
        let mut expected = vec![holder, waiter];
        expected.sort_by_key(|(ok, t)| (*t, *ok));
        assert_eq!(summary, expected, "max_wait {max_wait}");
        assert_eq!(peak.max(), 1);
    }
}

#[tokio::test(start_paused = true)]
async fn cancelled_waiters_and_holders_free_every_place() {
    let r = registry::<Reviews>(table([("limit", int(2)), ("policy", s("block"))]));
    let handle = r.sync_scope(Reviews::get).expect("configured");
    let peak = Peak::default();
    // Four calls: two hold, two wait; all are cancelled at 50 ms.
    for _ in 0..4 {
        let out = tokio::time::timeout(
            Duration::from_millis(50),
            r.scope(review(peak.clone(), 1_000)),
        )
        .await;
        assert!(out.is_err());
    }
    let held = (handle.try_acquire(), handle.try_acquire());
    assert_eq!(handle.in_use(), 2);
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let r = r.clone();
            let peak = peak.clone();
            tokio::spawn(async move { r.scope(review(peak, 10)).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(5)).await;
    for w in &waiters {
        w.abort();
    }
    drop(held);
    for w in waiters {
        let _ = w.await;
    }
    assert_eq!(handle.in_use(), 0);
    assert_eq!(handle.available(), 2);
}

#[derive(ConcurrencyLimitSpec)]
#[spec("test.concurrency.shared")]
struct SharedLimit;

#[concurrency_limit(SharedLimit)]
async fn shared_a(peak: Peak) -> Result<(), TestError> {
    peak.hold(100).await;
    Ok(())
}

#[concurrency_limit(SharedLimit)]
async fn shared_b(peak: Peak) -> Result<(), TestError> {
    peak.hold(100).await;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn two_fns_with_one_spec_share_one_limit() {
    let r = registry::<SharedLimit>(table([("limit", int(1))]));
    let peak = Peak::default();
    let (a, b) = tokio::join!(
        r.scope(shared_a(peak.clone())),
        r.scope(shared_b(peak.clone()))
    );
    assert!(a.is_ok() ^ b.is_ok(), "one of the two fns was turned away");
    assert_eq!(peak.max(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_holder_frees_its_place() {
    let r = registry::<Reviews>(table([("limit", int(1))]));
    let handle = r.sync_scope(Reviews::get).expect("configured");
    let h = handle.clone();
    let joined = tokio::spawn(async move {
        h.call(|| async {
            if true {
                panic!("body panics");
            }
            Ok::<(), TestError>(())
        })
        .await
    })
    .await;
    assert!(joined.is_err());
    assert_eq!(handle.in_use(), 0);
}

#[tokio::test(start_paused = true)]
async fn disabled_concurrency_limit_limits_nothing() {
    let r = registry::<Reviews>(table([("limit", int(1)), ("enabled", Value::Bool(false))]));
    let peak = Peak::default();
    let outs = burst(&r, &peak, 5, 100).await;
    assert!(outs.iter().all(|(o, _)| o.is_ok()));
    assert_eq!(peak.max(), 5);
}

// ---------------------------------------------------------------- timeout

#[derive(TimeoutSpec)]
#[spec("test.timeout.main")]
struct Limit;

#[timeout(Limit)]
async fn slow(ms: u64, fail: bool, runs: &AtomicU32) -> Result<u32, TestError> {
    runs.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(ms)).await;
    if fail {
        Err(TestError::Boom)
    } else {
        Ok(7)
    }
}

#[tokio::test(start_paused = true)]
async fn a_body_that_ends_exactly_at_the_limit_succeeds_one_tick_later_times_out() {
    let r = registry::<Limit>(table([("duration", s("100ms"))]));
    let runs = AtomicU32::new(0);
    let start = Instant::now();
    assert_eq!(r.scope(slow(100, false, &runs)).await.ok(), Some(7));
    assert_eq!(start.elapsed(), Duration::from_millis(100));

    let start = Instant::now();
    let out = r.scope(slow(101, false, &runs)).await;
    assert!(
        matches!(out, Err(TestError::Resilience(Error::Timeout { spec: "Limit", after })) if after == Duration::from_millis(100)),
        "{out:?}"
    );
    assert_eq!(
        start.elapsed(),
        Duration::from_millis(100),
        "given up at the limit"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn an_error_before_the_limit_passes_through_unchanged() {
    let r = registry::<Limit>(table([("duration", s("100ms"))]));
    let runs = AtomicU32::new(0);
    let out = r.scope(slow(30, true, &runs)).await;
    assert!(matches!(out, Err(TestError::Boom)), "{out:?}");
    let out = r.scope(slow(0, true, &runs)).await;
    assert!(
        matches!(out, Err(TestError::Boom)),
        "ready at the first poll: {out:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn disabled_timeout_never_times_out() {
    let r = registry::<Limit>(table([
        ("duration", s("1ms")),
        ("enabled", Value::Bool(false)),
    ]));
    let runs = AtomicU32::new(0);
    assert_eq!(r.scope(slow(10_000, false, &runs)).await.ok(), Some(7));
}

#[derive(TimeoutSpec)]
#[spec("test.timeout.guard")]
struct GuardTimeout;

#[derive(ConcurrencyLimitSpec)]
#[spec("test.concurrency.guard")]
struct GuardLimit;

#[derive(CircuitBreakerSpec)]
#[spec("test.breaker.guard")]
struct GuardBreaker;

#[timeout(GuardTimeout)]
#[concurrency_limit(GuardLimit)]
#[circuit_breakable(GuardBreaker)]
async fn hangs() -> Result<(), TestError> {
    std::future::pending::<()>().await;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_timeout_releases_the_permits_the_cancelled_call_held() {
    let root = table([(
        "test",
        table([
            (
                "timeout",
                table([("guard", table([("duration", s("50ms"))]))]),
            ),
            (
                "concurrency",
                table([("guard", table([("limit", int(1))]))]),
            ),
            (
                "breaker",
                table([(
                    "guard",
                    table([
                        ("failure_rate_threshold", int(50)),
                        ("minimum_required_calls", int(1)),
                        ("wait_duration_in_open_state", s("0s")),
                        ("permitted_calls_in_half_open_state", int(1)),
                        ("count_based", table([("window_size", int(1))])),
                    ]),
                )]),
            ),
        ]),
    )]);
    let r = Registry::builder()
        .spec::<GuardTimeout>()
        .spec::<GuardLimit>()
        .spec::<GuardBreaker>()
        .build(&root)
        .expect("valid");
    let limit = r.sync_scope(GuardLimit::get).expect("configured");
    let breaker = r.sync_scope(GuardBreaker::get).expect("configured");
    for _ in 0..3 {
        let out = r.scope(hangs()).await;
        assert!(
            matches!(out, Err(TestError::Resilience(Error::Timeout { .. }))),
            "{out:?}"
        );
        assert_eq!(limit.in_use(), 0, "the concurrency place was freed");
    }
    // The breaker inside saw no outcome: cancelled calls count as neither.
    assert_eq!(breaker.state(), State::Closed);
    assert_eq!(breaker.metrics().window.total, 0);
}

#[derive(RetrySpec)]
#[spec("test.retry.per_attempt")]
struct PerAttempt;

#[derive(TimeoutSpec)]
#[spec("test.timeout.per_attempt")]
struct AttemptTimeout;

#[retryable(PerAttempt)]
#[timeout(AttemptTimeout)]
async fn each_attempt_times_out(runs: &AtomicU32) -> Result<(), TestError> {
    runs.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(1)).await;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn retry_outside_a_timeout_retries_each_timed_out_attempt() {
    let root = table([(
        "test",
        table([
            (
                "retry",
                table([(
                    "per_attempt",
                    table([("delay", s("10ms")), ("attempts", int(2))]),
                )]),
            ),
            (
                "timeout",
                table([("per_attempt", table([("duration", s("100ms"))]))]),
            ),
        ]),
    )]);
    let r = Registry::builder()
        .spec::<PerAttempt>()
        .spec::<AttemptTimeout>()
        .build(&root)
        .expect("valid");
    let runs = AtomicU32::new(0);
    let start = Instant::now();
    let out = r.scope(each_attempt_times_out(&runs)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    assert_eq!(start.elapsed(), Duration::from_millis(3 * 100 + 2 * 10));
    match out {
        Err(TestError::Resilience(Error::RetryExhausted(e)))
            if e.calls == 3 && e.reason == GaveUp::Attempts =>
        {
            assert!(e.last.to_string().contains("timed out"), "{}", e.last);
        }
        other => panic!("{other:?}"),
    }
}

#[derive(RetrySpec)]
#[spec("test.retry.inside_timeout")]
struct InsideRetry;

#[derive(TimeoutSpec)]
#[spec("test.timeout.around_retry")]
struct AroundRetry;

#[timeout(AroundRetry)]
#[retryable(InsideRetry)]
async fn retried_under_one_timeout(runs: &AtomicU32) -> Result<(), TestError> {
    runs.fetch_add(1, Ordering::SeqCst);
    Err(TestError::Boom)
}

#[tokio::test(start_paused = true)]
async fn a_timeout_outside_a_retry_bounds_its_waits_too() {
    let r = build(
        Registry::builder()
            .spec::<InsideRetry>()
            .spec::<AroundRetry>(),
        vec![
            (
                InsideRetry::PATH,
                table([("delay", s("30ms")), ("attempts", int(10))]),
            ),
            (AroundRetry::PATH, table([("duration", s("100ms"))])),
        ],
    );
    let runs = AtomicU32::new(0);
    let start = Instant::now();
    let out = r.scope(retried_under_one_timeout(&runs)).await;
    assert!(timed_out(&out, "AroundRetry"), "{out:?}");
    // Attempts at 0, 30, 60 and 90 ms; the limit passes in the wait after
    // the fourth: one timer for the whole retry, armed at its first wait.
    assert_eq!(runs.load(Ordering::SeqCst), 4);
    assert_eq!(start.elapsed(), Duration::from_millis(100));
}

#[derive(TimeoutSpec)]
#[spec("test.timeout.around_wait")]
struct AroundWait;

#[derive(ConcurrencyLimitSpec)]
#[spec("test.concurrency.inside_timeout")]
struct InsideLimit;

#[timeout(AroundWait)]
#[concurrency_limit(InsideLimit)]
async fn waits_for_a_place(peak: Peak, ms: u64) -> Result<(), TestError> {
    peak.hold(ms).await;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_timeout_ends_a_wait_for_a_place_and_takes_none() {
    let r = build(
        Registry::builder()
            .spec::<AroundWait>()
            .spec::<InsideLimit>(),
        vec![
            (AroundWait::PATH, table([("duration", s("50ms"))])),
            (
                InsideLimit::PATH,
                table([("limit", int(1)), ("policy", s("block"))]),
            ),
        ],
    );
    let limit = r.sync_scope(InsideLimit::get).expect("configured");
    let peak = Peak::default();
    let holder = {
        let (r, peak) = (r.clone(), peak.clone());
        tokio::spawn(async move { r.scope(waits_for_a_place(peak, 40)).await })
    };
    tokio::task::yield_now().await;
    assert_eq!(limit.in_use(), 1);
    // Waits 40 ms for the place, then runs 40 ms of its own: 80 > 50.
    let start = Instant::now();
    let out = r.scope(waits_for_a_place(peak.clone(), 40)).await;
    assert!(timed_out(&out, "AroundWait"), "{out:?}");
    assert_eq!(start.elapsed(), Duration::from_millis(50));
    assert!(holder.await.expect("joined").is_ok());
    assert_eq!(peak.done(), 1, "the second call ran from 40 ms and was cut");
    assert_eq!(peak.max(), 1);
    assert_eq!(limit.in_use(), 0, "the place taken at 40 ms was freed");

    // A call cut while it waits for a place takes none: the place is held
    // outside the timeout, through the limit's handle.
    let holder = {
        let (limit, peak) = (limit.clone(), peak.clone());
        tokio::spawn(async move {
            limit
                .call(|| async {
                    peak.hold(80).await;
                    Ok::<_, TestError>(())
                })
                .await
        })
    };
    tokio::task::yield_now().await;
    assert_eq!(limit.in_use(), 1);
    let out = r.scope(waits_for_a_place(peak.clone(), 1)).await;
    assert!(timed_out(&out, "AroundWait"), "{out:?}");
    assert_eq!(limit.in_use(), 1, "only the holder's place");
    assert!(holder.await.expect("joined").is_ok());
    assert_eq!(peak.done(), 2, "the holder's run; the cut call never ran");
    assert_eq!(limit.in_use(), 0);
}

#[derive(TimeoutSpec)]
#[spec("test.timeout.around_fallback")]
struct AroundFallback;

#[timeout(AroundFallback)]
#[fallback(method = "slow_answer(answers)")]
async fn fails_into_a_slow_fallback(answers: &AtomicU32) -> Result<u32, TestError> {
    let _ = answers;
    Err(TestError::Boom)
}

async fn slow_answer(answers: &AtomicU32) -> Result<u32, TestError> {
    answers.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(200)).await;
    Ok(1)
}

#[tokio::test(start_paused = true)]
async fn a_timeout_outside_a_fallback_bounds_its_async_answer() {
    let r = registry::<AroundFallback>(table([("duration", s("100ms"))]));
    let answers = AtomicU32::new(0);
    let start = Instant::now();
    let out = r.scope(fails_into_a_slow_fallback(&answers)).await;
    assert!(timed_out(&out, "AroundFallback"), "{out:?}");
    assert_eq!(answers.load(Ordering::SeqCst), 1, "the fallback started");
    assert_eq!(start.elapsed(), Duration::from_millis(100));
}

#[derive(TimeoutSpec)]
#[spec("test.timeout.busy")]
struct BusyTimeout;

/// Never ends, and spends tokio's whole cooperative budget on every poll.
#[timeout(BusyTimeout)]
async fn busy(polls: &AtomicU32) -> Result<(), TestError> {
    loop {
        polls.fetch_add(1, Ordering::SeqCst);
        tokio::task::consume_budget().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_call_that_spends_its_whole_budget_still_times_out() {
    let r = registry::<BusyTimeout>(table([("duration", s("100ms"))]));
    let polls = Arc::new(AtomicU32::new(0));
    let call = {
        let (r, polls) = (r.clone(), Arc::clone(&polls));
        tokio::spawn(async move { r.scope(busy(&polls)).await })
    };
    // The busy call keeps the runtime from idling, so the paused clock is
    // moved by hand, once the call has waited (its timer is armed).
    tokio::task::yield_now().await;
    assert!(polls.load(Ordering::SeqCst) > 0);
    tokio::time::advance(Duration::from_millis(100)).await;
    for _ in 0..100 {
        if call.is_finished() {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(
        call.is_finished(),
        "the timer fired although the budget was spent"
    );
    let out = call.await.expect("joined");
    assert!(timed_out(&out, "BusyTimeout"), "{out:?}");
    assert!(
        polls.load(Ordering::SeqCst) > 128,
        "the body did spend its budget"
    );
}

// ---------------------------------------------------------------- rate limiter

#[derive(RateLimiterSpec)]
#[spec("test.rate.main")]
struct Rate;

#[rate_limited(Rate)]
async fn limited(runs: &AtomicU32) -> Result<(), TestError> {
    runs.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

fn retry_after(out: &Result<(), TestError>) -> Option<Duration> {
    match out {
        Err(TestError::Resilience(Error::RateLimitExceeded { retry_after, .. })) => {
            Some(*retry_after)
        }
        _ => None,
    }
}

#[tokio::test(start_paused = true)]
async fn one_per_second_rejects_the_second_call_until_the_period_passes() {
    let r = registry::<Rate>(table([
        ("limit_for_period", int(1)),
        ("limit_refresh_period", s("1s")),
    ]));
    let runs = AtomicU32::new(0);
    r.scope(limited(&runs)).await.expect("first");
    tokio::time::advance(Duration::from_millis(300)).await;
    let out = r.scope(limited(&runs)).await;
    assert_eq!(retry_after(&out), Some(Duration::from_millis(700)));
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the rejected body never ran"
    );
    tokio::time::advance(Duration::from_millis(700)).await;
    r.scope(limited(&runs)).await.expect("a new period");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn a_fixed_window_starts_at_the_first_call_after_the_old_one_expired() {
    let r = registry::<Rate>(table([
        ("limit_for_period", int(1)),
        ("limit_refresh_period", s("1s")),
    ]));
    let runs = AtomicU32::new(0);
    r.scope(limited(&runs)).await.expect("window [0, 1 s)");
    tokio::time::advance(Duration::from_millis(1_500)).await;
    r.scope(limited(&runs))
        .await
        .expect("window [1.5 s, 2.5 s)");
    tokio::time::advance(Duration::from_millis(700)).await;
    let out = r.scope(limited(&runs)).await;
    assert_eq!(
        retry_after(&out),
        Some(Duration::from_millis(300)),
        "not aligned to whole seconds"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hundred_concurrent_callers_get_exactly_the_limit() {
    for kind in ["fixed_window", "token_bucket"] {
        let r = registry::<Rate>(table([
            ("type", s(kind)),
            ("limit_for_period", int(10)),
            ("limit_refresh_period", s("1h")),
        ]));
        let handle = r.sync_scope(Rate::get).expect("configured");
        let tasks: Vec<_> = (0..100)
            .map(|_| {
                let h = handle.clone();
                tokio::spawn(async move { h.try_acquire().is_ok() })
            })
            .collect();
        let mut granted = 0;
        for t in tasks {
            granted += usize::from(t.await.expect("task"));
        }
        assert_eq!(granted, 10, "{kind}");
    }
}

#[tokio::test(start_paused = true)]
async fn token_bucket_refills_one_permit_per_interval_up_to_the_burst() {
    let r = registry::<Rate>(table([
        ("type", s("token_bucket")),
        ("limit_for_period", int(10)),
        ("limit_refresh_period", s("1s")),
    ]));
    let h = r.sync_scope(Rate::get).expect("configured");
    let take = |n: usize| (0..n).filter(|_| h.try_acquire().is_ok()).count();
    assert_eq!(take(20), 10, "a full bucket bursts 10");
    match h.try_acquire() {
        Err(Error::RateLimitExceeded { retry_after, .. }) => {
            assert_eq!(retry_after, Duration::from_millis(100));
        }
        other => panic!("{other:?}"),
    }
    tokio::time::advance(Duration::from_millis(99)).await;
    assert_eq!(take(5), 0);
    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(take(5), 1, "one permit every 100 ms");
    tokio::time::advance(Duration::from_millis(350)).await;
    assert_eq!(take(5), 3);
    tokio::time::advance(Duration::from_secs(60)).await;
    assert_eq!(take(20), 10, "never more than the burst");
}

#[tokio::test(start_paused = true)]
async fn max_wait_waits_for_a_permit_that_comes_in_time_and_not_for_one_that_does_not() {
    let runs = AtomicU32::new(0);
    let r = registry::<Rate>(table([
        ("limit_for_period", int(1)),
        ("limit_refresh_period", s("1s")),
        ("max_wait", s("1s")),
    ]));
    r.scope(limited(&runs)).await.expect("first");
    tokio::time::advance(Duration::from_millis(200)).await;
    let start = Instant::now();
    r.scope(limited(&runs))
        .await
        .expect("waited for the next window");
    assert_eq!(start.elapsed(), Duration::from_millis(800));

    let r = registry::<Rate>(table([
        ("limit_for_period", int(1)),
        ("limit_refresh_period", s("1s")),
        ("max_wait", s("500ms")),
    ]));
    r.scope(limited(&runs)).await.expect("first");
    let start = Instant::now();
    let out = r.scope(limited(&runs)).await;
    assert_eq!(retry_after(&out), Some(Duration::from_secs(1)));
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "no use waiting for a permit that comes too late"
    );
}

#[tokio::test(start_paused = true)]
async fn disabled_rate_limiter_never_rejects() {
    let r = registry::<Rate>(table([
        ("limit_for_period", int(1)),
        ("limit_refresh_period", s("1h")),
        ("enabled", Value::Bool(false)),
    ]));
    let runs = AtomicU32::new(0);
    for _ in 0..100 {
        r.scope(limited(&runs)).await.expect("never rejected");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 100);
}
