//! Delay hints on tokio's paused clock: a failure that says how long to wait
//! (`Verdict::RetryAfter`), the caps on that wait, and the hints that the
//! rate limiter's and the breaker's rejections carry. Every test counts the
//! calls the body received and measures the gaps between them exactly.

#![allow(clippy::expect_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::*;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use resilient_core::circuit_breaker::State;
use resilient_core::settings::Value;
use resilient_core::{
    circuit_breakable, rate_limited, retryable, CircuitBreakerSpec, Classifier, Classify, Error,
    Exhausted, FailedValue, GaveUp, RateLimiterSpec, Registry, RetrySpec, Spec, Verdict,
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

/// What the body answers: `Ok(0)` is a success, `Ok(ms)` a failure that asks
/// for a wait of `ms` milliseconds, `Err` a failure without a hint.
type Answer = Result<u64, TestError>;

/// The classification shared by every spec below (retry and breaker alike).
struct Hints;
impl Classifier for Hints {}

impl Classify<u64, TestError> for Hints {
    fn classify(outcome: &Answer) -> Verdict {
        match outcome {
            Ok(0) => Verdict::Success,
            Ok(ms) => Verdict::RetryAfter(Duration::from_millis(*ms)),
            Err(_) => Verdict::Failure,
        }
    }

    fn keep_failed_value(value: u64) -> Option<Box<dyn std::any::Any + Send + Sync>> {
        Some(Box::new(value))
    }
}

#[derive(RetrySpec)]
#[spec("test.hints.retry", classify = Hints)]
struct HintedRetry;

#[derive(CircuitBreakerSpec)]
#[spec("test.hints.breaker", classify = Hints)]
struct HintedBreaker;

/// A body that answers from a script, one answer per call (the last one
/// repeats), and records the instant of every call.
#[derive(Clone)]
struct Script {
    answers: Arc<Vec<fn() -> Answer>>,
    calls: Arc<Mutex<Vec<Instant>>>,
}

impl Script {
    fn new(answers: Vec<fn() -> Answer>) -> Self {
        Self {
            answers: Arc::new(answers),
            calls: Arc::default(),
        }
    }

    async fn call(&self) -> Answer {
        let n = {
            let mut calls = self.calls.lock().unwrap_or_else(|e| e.into_inner());
            calls.push(Instant::now());
            calls.len()
        };
        let answer = self.answers[(n - 1).min(self.answers.len() - 1)];
        answer()
    }

    fn count(&self) -> usize {
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    fn gaps_ms(&self) -> Vec<u128> {
        let calls = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        calls
            .windows(2)
            .map(|w| (w[1] - w[0]).as_millis())
            .collect()
    }
}

fn ok() -> Answer {
    Ok(0)
}
fn boom() -> Answer {
    Err(TestError::Boom)
}
fn after_100ms() -> Answer {
    Ok(100)
}
fn after_300ms() -> Answer {
    Ok(300)
}
fn after_5s() -> Answer {
    Ok(5_000)
}
fn after_60s() -> Answer {
    Ok(60_000)
}

fn retry_registry(section: Value) -> Registry {
    registry::<HintedRetry>(section)
}

async fn run(r: &Registry, script: &Script) -> Answer {
    r.scope(async { HintedRetry::get()?.call(|| script.call()).await })
        .await
}

fn gave_up(out: &Answer) -> (u64, GaveUp) {
    match out {
        Err(TestError::Resilience(Error::RetryExhausted(e))) => (e.calls, e.reason),
        other => panic!("expected RetryExhausted, got {other:?}"),
    }
}

// ---------------------------------------------------------------- the wait

#[tokio::test(start_paused = true)]
async fn a_hint_replaces_the_computed_delay() {
    let r = retry_registry(table([("delay", s("10ms")), ("attempts", int(3))]));
    let script = Script::new(vec![after_300ms, ok]);
    assert_eq!(run(&r, &script).await.ok(), Some(0));
    assert_eq!(script.count(), 2);
    assert_eq!(script.gaps_ms(), vec![300]);
}

#[tokio::test(start_paused = true)]
async fn failures_without_a_hint_keep_the_backoff_of_their_retry_number() {
    let r = retry_registry(table([
        ("delay", s("10ms")),
        ("attempts", int(5)),
        ("backoff", table([("multiplier", int(2))])),
    ]));
    let script = Script::new(vec![boom, after_300ms, boom, ok]);
    assert_eq!(run(&r, &script).await.ok(), Some(0));
    // Retry 1: 10 ms; retry 2: the hint; retry 3: 10·2² = 40 ms.
    assert_eq!(script.gaps_ms(), vec![10, 300, 40]);
}

#[tokio::test(start_paused = true)]
async fn a_hinted_retry_counts_as_an_attempt() {
    let r = retry_registry(table([("delay", s("10ms")), ("attempts", int(2))]));
    let script = Script::new(vec![after_100ms]);
    let out = run(&r, &script).await;
    assert_eq!(gave_up(&out), (3, GaveUp::Attempts));
    assert_eq!(script.gaps_ms(), vec![100, 100]);
}

#[tokio::test(start_paused = true)]
async fn a_hint_is_capped_by_backoff_delay_max() {
    let r = retry_registry(table([
        ("delay", s("10ms")),
        ("attempts", int(1)),
        ("backoff", table([("delay_max", s("1s"))])),
    ]));
    let script = Script::new(vec![after_5s, ok]);
    assert_eq!(run(&r, &script).await.ok(), Some(0));
    assert_eq!(script.gaps_ms(), vec![1_000]);
}

#[tokio::test(start_paused = true)]
async fn a_hint_is_capped_by_max_hinted_delay() {
    let r = retry_registry(table([
        ("delay", s("10ms")),
        ("attempts", int(1)),
        ("max_hinted_delay", s("2s")),
    ]));
    let script = Script::new(vec![after_60s, ok]);
    assert_eq!(run(&r, &script).await.ok(), Some(0));
    assert_eq!(script.gaps_ms(), vec![2_000]);
}

#[tokio::test(start_paused = true)]
async fn the_smaller_of_the_two_caps_applies() {
    for (delay_max, max_hinted, expected) in [("3s", "2s", 2_000), ("2s", "3s", 2_000)] {
        let r = retry_registry(table([
            ("delay", s("10ms")),
            ("attempts", int(1)),
            ("backoff", table([("delay_max", s(delay_max))])),
            ("max_hinted_delay", s(max_hinted)),
        ]));
        let script = Script::new(vec![after_60s, ok]);
        assert_eq!(run(&r, &script).await.ok(), Some(0));
        assert_eq!(
            script.gaps_ms(),
            vec![expected],
            "{delay_max} / {max_hinted}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_hint_that_would_cross_the_overall_timeout_ends_the_retry_at_once() {
    let r = retry_registry(table([
        ("delay", s("10ms")),
        ("attempts", int(3)),
        ("timeout", s("1s")),
    ]));
    let script = Script::new(vec![after_5s, ok]);
    let start = Instant::now();
    let out = run(&r, &script).await;
    assert_eq!(gave_up(&out), (1, GaveUp::Timeout));
    assert_eq!(script.count(), 1);
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "no part of the wait was taken"
    );
}

#[tokio::test(start_paused = true)]
async fn the_overall_timeout_judges_the_capped_wait() {
    let r = retry_registry(table([
        ("delay", s("10ms")),
        ("attempts", int(3)),
        ("timeout", s("1s")),
        ("max_hinted_delay", s("500ms")),
    ]));
    let script = Script::new(vec![after_5s, ok]);
    assert_eq!(run(&r, &script).await.ok(), Some(0));
    assert_eq!(script.gaps_ms(), vec![500]);
}

// ---------------------------------------------------------------- kept values

#[tokio::test(start_paused = true)]
async fn exhaustion_keeps_the_last_failed_value_when_the_classifier_keeps_it() {
    let r = retry_registry(table([("delay", s("10ms")), ("attempts", int(1))]));
    let script = Script::new(vec![after_100ms, after_300ms]);
    let out = run(&r, &script).await;
    match out {
        Err(TestError::Resilience(Error::RetryExhausted(e))) => {
            let Exhausted { last, earlier, .. } = *e;
            let last = last.downcast::<FailedValue>().expect("a failed value");
            assert_eq!(last.value::<u64>(), Some(&300));
            assert_eq!(last.into_value::<u64>().ok(), Some(300));
            let first = earlier[0]
                .downcast_ref::<FailedValue>()
                .expect("a failed value");
            assert_eq!(
                first.value::<u64>(),
                None,
                "earlier values are not kept: a kept response may hold a connection"
            );
        }
        other => panic!("expected RetryExhausted, got {other:?}"),
    }
}

// ---------------------------------------------------------------- breaker

#[circuit_breakable(HintedBreaker)]
async fn through_breaker(script: &Script) -> Result<u64, TestError> {
    script.call().await
}

#[tokio::test(start_paused = true)]
async fn a_breaker_counts_a_hinted_failure_as_a_failure() {
    let r = registry::<HintedBreaker>(table([
        ("type", s("ring_buffer")),
        ("failure_rate_threshold", int(100)),
        ("minimum_required_calls", int(2)),
        ("wait_duration_in_open_state", s("1s")),
        ("permitted_calls_in_half_open_state", int(1)),
        ("count_based", table([("window_size", int(2))])),
    ]));
    let script = Script::new(vec![after_100ms]);
    for _ in 0..3 {
        let _ = r.scope(through_breaker(&script)).await;
    }
    let b = r.sync_scope(HintedBreaker::get).expect("configured");
    assert_eq!(b.state(), State::Open);
    assert_eq!(script.count(), 2, "the third call was rejected");
    assert_eq!(b.metrics().rejected, 1);
}

// ---------------------------------------------- resilience errors as hints

#[derive(RetrySpec)]
#[spec("test.hints.outer_retry")]
struct OuterRetry;

#[derive(RateLimiterSpec)]
#[spec("test.hints.rate")]
struct HalfSecondRate;

#[derive(CircuitBreakerSpec)]
#[spec("test.hints.inner_breaker")]
struct InnerBreaker;

#[retryable(OuterRetry)]
#[rate_limited(HalfSecondRate)]
async fn rate_limited_call(calls: &Script) -> Result<u64, TestError> {
    calls.call().await
}

#[retryable(OuterRetry)]
#[circuit_breakable(InnerBreaker)]
async fn breaker_call(calls: &Script) -> Result<u64, TestError> {
    calls.call().await
}

#[tokio::test(start_paused = true)]
async fn a_rate_limiter_inside_a_retry_makes_it_wait_the_limiters_retry_after() {
    let r = build(
        Registry::builder()
            .spec::<OuterRetry>()
            .spec::<HalfSecondRate>(),
        vec![
            (
                OuterRetry::PATH,
                table([("delay", s("10ms")), ("attempts", int(3))]),
            ),
            (
                HalfSecondRate::PATH,
                table([
                    ("limit_for_period", int(1)),
                    ("limit_refresh_period", s("500ms")),
                ]),
            ),
        ],
    );
    let script = Script::new(vec![ok]);
    let start = Instant::now();
    r.scope(rate_limited_call(&script))
        .await
        .expect("the period's permit");
    tokio::time::advance(Duration::from_millis(100)).await;
    // Rejected at 100 ms with `retry_after` = 400 ms: one wait, then the
    // permit of the next period. Waiting 10 ms instead would spend all three
    // retries on rejections within 130 ms.
    r.scope(rate_limited_call(&script))
        .await
        .expect("a permit after the wait");
    assert_eq!(script.count(), 2);
    assert_eq!(script.gaps_ms(), vec![500]);
    assert_eq!(start.elapsed(), Duration::from_millis(500));
}

#[tokio::test(start_paused = true)]
async fn an_open_breaker_inside_a_retry_makes_it_wait_until_half_open() {
    let r = build(
        Registry::builder()
            .spec::<OuterRetry>()
            .spec::<InnerBreaker>(),
        vec![
            (
                OuterRetry::PATH,
                table([
                    ("delay", s("10ms")),
                    ("attempts", int(3)),
                    ("retry_call_not_permitted", Value::Bool(true)),
                ]),
            ),
            (
                InnerBreaker::PATH,
                table([
                    ("type", s("ring_buffer")),
                    ("failure_rate_threshold", int(100)),
                    ("minimum_required_calls", int(2)),
                    ("wait_duration_in_open_state", s("2s")),
                    ("permitted_calls_in_half_open_state", int(1)),
                    ("count_based", table([("window_size", int(2))])),
                ]),
            ),
        ],
    );
    let script = Script::new(vec![boom, boom, ok]);
    let start = Instant::now();
    // Calls at 0 and 10 ms fail and open the breaker; the retry at 20 ms is
    // rejected with the 1990 ms left of the open period, so the next retry
    // comes at 2010 ms, as the half-open probe, and succeeds.
    let out = r.scope(breaker_call(&script)).await;
    assert_eq!(out.ok(), Some(0));
    assert_eq!(script.count(), 3);
    assert_eq!(script.gaps_ms(), vec![10, 2_000]);
    assert_eq!(start.elapsed(), Duration::from_millis(2_010));
    let b = r.sync_scope(InnerBreaker::get).expect("configured");
    assert_eq!(b.metrics().rejected, 1, "one rejection, then the probe");
    assert_eq!(b.state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_forced_open_breaker_gives_no_hint_and_the_computed_delay_applies() {
    let r = build(
        Registry::builder()
            .spec::<OuterRetry>()
            .spec::<InnerBreaker>(),
        vec![
            (
                OuterRetry::PATH,
                table([
                    ("delay", s("10ms")),
                    ("attempts", int(3)),
                    ("retry_call_not_permitted", Value::Bool(true)),
                ]),
            ),
            (
                InnerBreaker::PATH,
                table([
                    ("type", s("ring_buffer")),
                    ("failure_rate_threshold", int(100)),
                    ("minimum_required_calls", int(2)),
                    ("wait_duration_in_open_state", s("2s")),
                    ("permitted_calls_in_half_open_state", int(1)),
                    ("count_based", table([("window_size", int(2))])),
                ]),
            ),
        ],
    );
    let b = r.sync_scope(InnerBreaker::get).expect("configured");
    b.force_open();
    let script = Script::new(vec![ok]);
    let start = Instant::now();
    let out = r.scope(breaker_call(&script)).await;
    match out {
        Err(TestError::Resilience(Error::RetryExhausted(e))) if e.calls == 4 => {}
        other => panic!("expected exhaustion after 4 rejections, got {other:?}"),
    }
    assert_eq!(script.count(), 0, "a forced-open breaker runs nothing");
    assert_eq!(b.metrics().rejected, 4);
    assert_eq!(start.elapsed(), Duration::from_millis(30));
}
