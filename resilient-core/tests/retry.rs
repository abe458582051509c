//! Retry semantics on tokio's paused clock: every test counts the calls the
//! body received and measures the exact gaps between them.

#![allow(clippy::expect_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::*;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use resilient_core::retry::RETRY_TRAIL_MAX;
use resilient_core::settings::Value;
use resilient_core::{
    retryable, Classify, Error, GaveUp, Registry, RetrySpec, Unconfigured, Verdict,
};
use tokio::time::Instant;

// ---------------------------------------------------------------- fixtures

#[derive(Debug, thiserror::Error)]
enum TestError {
    #[error("boom {0}")]
    Boom(u32),
    #[error("fatal")]
    Fatal,
    #[error(transparent)]
    Resilience(#[from] Error),
}

/// Records the instant of every call.
#[derive(Clone, Default)]
struct Calls(Arc<Mutex<Vec<Instant>>>);

impl Calls {
    fn hit(&self) -> u32 {
        let mut calls = self.0.lock().unwrap_or_else(|e| e.into_inner());
        calls.push(Instant::now());
        u32::try_from(calls.len()).unwrap_or(u32::MAX)
    }

    fn count(&self) -> usize {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Gaps between consecutive calls, in milliseconds.
    fn gaps_ms(&self) -> Vec<u128> {
        let calls = self.0.lock().unwrap_or_else(|e| e.into_inner());
        calls
            .windows(2)
            .map(|w| (w[1] - w[0]).as_millis())
            .collect()
    }

    fn gaps(&self) -> Vec<Duration> {
        let calls = self.0.lock().unwrap_or_else(|e| e.into_inner());
        calls.windows(2).map(|w| w[1] - w[0]).collect()
    }
}

/// A body that fails its first `failures` calls.
async fn flaky(calls: &Calls, failures: u32) -> Result<u32, TestError> {
    let n = calls.hit();
    if n <= failures {
        Err(TestError::Boom(n))
    } else {
        Ok(n)
    }
}

fn exhausted(e: &TestError) -> (u64, GaveUp, usize, String) {
    match e {
        TestError::Resilience(Error::RetryExhausted(x)) => {
            // README's tour: the body's last failure is the source of the
            // error the caller gets, through its own transparent variant.
            let source = std::error::Error::source(e).map(ToString::to_string);
            assert_eq!(source, Some(x.last.to_string()), "the source of {e}");
            (x.calls, x.reason, x.earlier.len(), x.last.to_string())
        }
        other => panic!("expected RetryExhausted, got {other:?}"),
    }
}

// ---------------------------------------------------------------- delays

#[derive(RetrySpec)]
#[spec("test.retry.linear")]
struct Linear;

#[tokio::test(start_paused = true)]
async fn linear_waits_grow_by_delay_step_and_attempts_count_retries() {
    let r = registry::<Linear>(table([
        ("delay", s("100ms")),
        ("delay_step", s("50ms")),
        ("attempts", int(3)),
    ]));
    let calls = Calls::default();
    let out = r
        .scope(async { Linear::get()?.call(|| flaky(&calls, u32::MAX)).await })
        .await;
    let err = out.expect_err("always failing");
    assert_eq!(calls.count(), 1 + 3);
    assert_eq!(calls.gaps_ms(), [100, 150, 200]);
    assert_eq!(exhausted(&err), (4, GaveUp::Attempts, 3, "boom 4".into()));
}

#[tokio::test(start_paused = true)]
async fn success_after_two_failures_makes_three_calls() {
    let r = registry::<Linear>(table([("delay", s("10ms")), ("attempts", int(5))]));
    let calls = Calls::default();
    let out = r
        .scope(async { Linear::get()?.call(|| flaky(&calls, 2)).await })
        .await;
    assert_eq!(out.ok(), Some(3));
    assert_eq!(calls.count(), 3);
    assert_eq!(calls.gaps_ms(), [10, 10]);
}

#[derive(RetrySpec)]
#[spec("test.retry.exponential")]
struct Exponential;

#[tokio::test(start_paused = true)]
async fn exponential_backoff_doubles_then_stops_at_delay_max() {
    let r = registry::<Exponential>(table([
        ("delay", s("100ms")),
        ("attempts", int(4)),
        (
            "backoff",
            table([("multiplier", Value::Float(2.0)), ("delay_max", s("250ms"))]),
        ),
    ]));
    let calls = Calls::default();
    let out = r
        .scope(async { Exponential::get()?.call(|| flaky(&calls, u32::MAX)).await })
        .await;
    assert!(out.is_err());
    assert_eq!(calls.count(), 5);
    assert_eq!(calls.gaps_ms(), [100, 200, 250, 250]);
}

#[derive(RetrySpec)]
#[spec("test.retry.jitter")]
struct Jittered;

#[tokio::test(start_paused = true)]
async fn full_jitter_keeps_each_wait_within_its_ratio() {
    let r = registry::<Jittered>(table([
        ("delay", s("100ms")),
        ("attempts", int(60)),
        (
            "jitter",
            table([("type", s("full")), ("ratio", Value::Float(0.25))]),
        ),
    ]));
    let calls = Calls::default();
    let _ = r
        .scope(async { Jittered::get()?.call(|| flaky(&calls, u32::MAX)).await })
        .await;
    let gaps = calls.gaps();
    assert_eq!(gaps.len(), 60);
    for gap in &gaps {
        assert!(
            (Duration::from_millis(75)..=Duration::from_millis(100)).contains(gap),
            "{gap:?} outside [75ms, 100ms]"
        );
    }
    let distinct: std::collections::BTreeSet<_> = gaps.iter().collect();
    assert!(
        distinct.len() > 10,
        "jitter drew only {} distinct waits",
        distinct.len()
    );
}

#[derive(RetrySpec)]
#[spec("test.retry.huge")]
struct Huge;

#[tokio::test(start_paused = true)]
async fn a_million_attempts_with_multiplier_ten_saturate_at_delay_max() {
    let r = registry::<Huge>(table([
        ("delay", s("1ms")),
        ("attempts", int(1_000_000)),
        (
            "backoff",
            table([("multiplier", int(10)), ("delay_max", s("5ms"))]),
        ),
    ]));
    let calls = Calls::default();
    let out = r
        .scope(async { Huge::get()?.call(|| flaky(&calls, 200)).await })
        .await;
    assert_eq!(out.ok(), Some(201));
    let gaps = calls.gaps_ms();
    assert_eq!(&gaps[..3], [1, 5, 5]);
    assert!(gaps.iter().all(|g| *g <= 5));
    let settings = r
        .scope(async { Huge::get().map(|h| h.settings().clone()) })
        .await;
    let settings = settings.expect("configured");
    assert_eq!(settings.base_delay(1_000_000), Duration::from_millis(5));
    assert_eq!(settings.base_delay(u32::MAX), Duration::from_millis(5));
}

#[derive(RetrySpec)]
#[spec("test.retry.zero")]
struct ZeroDelay;

#[tokio::test(start_paused = true)]
async fn zero_delay_with_backoff_never_waits_however_large_the_growth() {
    // A zero `delay` with `backoff` is refused unless a cause waits on its
    // own: here a throttled failure, which `flaky` never raises.
    let r = registry::<ZeroDelay>(table([
        ("delay", s("0s")),
        ("attempts", int(2000)),
        ("backoff", table([("multiplier", Value::Float(1e10))])),
        ("cause", table([("throttled", table([("delay", s("1s"))]))])),
    ]));
    let calls = Calls::default();
    let start = Instant::now();
    let out = r
        .scope(async { ZeroDelay::get()?.call(|| flaky(&calls, 1500)).await })
        .await;
    assert_eq!(out.ok(), Some(1501));
    assert_eq!(start.elapsed(), Duration::ZERO);
}

#[derive(RetrySpec)]
#[spec("test.retry.uncapped")]
struct Uncapped;

#[tokio::test(start_paused = true)]
async fn uncapped_backoff_saturates_at_the_largest_duration_without_panicking() {
    let r = registry::<Uncapped>(table([
        ("delay", s("1s")),
        ("attempts", int(4_000_000_000)),
        ("backoff", table([("multiplier", int(10))])),
    ]));
    let calls = Calls::default();
    // Waits grow past any representable instant; tokio clamps such sleeps,
    // and the paused clock jumps straight to them.
    let out = r
        .scope(async { Uncapped::get()?.call(|| flaky(&calls, 40)).await })
        .await;
    assert_eq!(out.ok(), Some(41));
    let settings = r
        .scope(async { Uncapped::get().map(|h| h.settings().clone()) })
        .await;
    let settings = settings.expect("configured");
    assert_eq!(settings.base_delay(2), Duration::from_secs(10));
    assert_eq!(settings.base_delay(100), Duration::MAX);
    assert_eq!(settings.base_delay(u32::MAX), Duration::MAX);
}

#[test]
fn linear_waits_saturate_instead_of_overflowing() {
    let root = table([(
        "x",
        table([
            ("delay", s("1s")),
            ("delay_step", s("100000000h")),
            ("attempts", int(u32::MAX.into())),
        ]),
    )]);
    let mut problems = Vec::new();
    let mut reader = resilient_core::settings::Section::root("Linear", "x", &root, &mut problems);
    let settings = resilient_core::retry::RetrySettings::read(&mut reader).expect("valid");
    reader.finish();
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(
        settings.base_delay(2),
        Duration::from_secs(1 + 100_000_000 * 3600)
    );
    assert_eq!(settings.base_delay(u32::MAX), Duration::MAX);
}

// ---------------------------------------------------------------- pass-through

#[tokio::test(start_paused = true)]
async fn zero_attempts_make_one_call_and_return_its_error_unwrapped() {
    let r = registry::<Linear>(table([("delay", s("10ms")), ("attempts", int(0))]));
    let calls = Calls::default();
    let out = r
        .scope(async { Linear::get()?.call(|| flaky(&calls, u32::MAX)).await })
        .await;
    assert!(matches!(out, Err(TestError::Boom(1))), "{out:?}");
    assert_eq!(calls.count(), 1);
}

#[tokio::test(start_paused = true)]
async fn disabled_spec_makes_one_call_and_returns_its_error_unwrapped() {
    let r = registry::<Linear>(table([
        ("delay", s("10ms")),
        ("attempts", int(5)),
        ("enabled", Value::Bool(false)),
    ]));
    let calls = Calls::default();
    let out = r
        .scope(async { Linear::get()?.call(|| flaky(&calls, u32::MAX)).await })
        .await;
    assert!(matches!(out, Err(TestError::Boom(1))), "{out:?}");
    assert_eq!(calls.count(), 1);
}

// ---------------------------------------------------------------- classification

/// Retries `Boom` and 5xx values; `Fatal` is not retryable.
#[derive(RetrySpec)]
#[spec("test.retry.classified", classify = custom)]
struct Classified;

impl Classify<u16, TestError> for Classified {
    fn classify(outcome: &Result<u16, TestError>) -> Verdict {
        match outcome {
            Ok(status) if *status >= 500 => Verdict::Failure,
            Ok(_) => Verdict::Success,
            Err(TestError::Boom(_)) => Verdict::Failure,
            Err(_) => Verdict::Ignore,
        }
    }
}

fn classified_registry() -> Registry {
    registry::<Classified>(table([
        ("delay", s("10ms")),
        ("attempts", int(3)),
        (
            "retry_budget",
            table([("tokens_initial", int(5)), ("ratio", int(0))]),
        ),
    ]))
}

#[tokio::test(start_paused = true)]
async fn non_retryable_error_passes_through_at_once_and_uses_no_token() {
    let r = classified_registry();
    let calls = Calls::default();
    let (out, tokens) = r
        .scope(async {
            let h = Classified::get()?;
            let out = h
                .call(|| async {
                    calls.hit();
                    Err::<u16, _>(TestError::Fatal)
                })
                .await;
            Ok::<_, TestError>((out, h.budget_tokens()))
        })
        .await
        .expect("configured");
    assert!(matches!(out, Err(TestError::Fatal)), "{out:?}");
    assert_eq!(calls.count(), 1);
    assert_eq!(tokens, Some(5.0));
}

#[tokio::test(start_paused = true)]
async fn ok_value_classified_as_failure_is_retried_then_exhausts() {
    let r = classified_registry();
    let calls = Calls::default();
    let out = r
        .scope(async {
            Classified::get()?
                .call(|| async {
                    calls.hit();
                    Ok::<u16, TestError>(503)
                })
                .await
        })
        .await;
    let err = out.expect_err("503 every time");
    assert_eq!(calls.count(), 1 + 3);
    let (made, reason, earlier, last) = exhausted(&err);
    assert_eq!((made, reason, earlier), (4, GaveUp::Attempts, 3));
    assert!(
        last.contains("classified the returned value as a failure"),
        "{last}"
    );
}

#[tokio::test(start_paused = true)]
async fn ok_value_failure_then_success_returns_the_success() {
    let r = classified_registry();
    let calls = Calls::default();
    let out = r
        .scope(async {
            Classified::get()?
                .call(|| async { Ok::<u16, TestError>(if calls.hit() < 3 { 503 } else { 200 }) })
                .await
        })
        .await;
    assert_eq!(out.ok(), Some(200));
    assert_eq!(calls.count(), 3);
}

// ---------------------------------------------------------------- exhaustion

#[derive(RetrySpec)]
#[spec("test.retry.last_failure", exhausted = last_failure)]
struct LastFailure;

#[tokio::test(start_paused = true)]
async fn last_failure_mode_returns_the_last_error_unchanged() {
    let r = registry::<LastFailure>(table([("delay", s("10ms")), ("attempts", int(2))]));
    let calls = Calls::default();
    let out = r
        .scope(async { LastFailure::get()?.call(|| flaky(&calls, u32::MAX)).await })
        .await;
    assert!(matches!(out, Err(TestError::Boom(3))), "{out:?}");
    assert_eq!(calls.count(), 3);
}

#[tokio::test(start_paused = true)]
async fn exhaustion_keeps_at_most_the_trail_limit_of_earlier_failures() {
    let r = registry::<Linear>(table([("delay", s("1ms")), ("attempts", int(100))]));
    let calls = Calls::default();
    let out = r
        .scope(async { Linear::get()?.call(|| flaky(&calls, u32::MAX)).await })
        .await;
    let err = out.expect_err("always failing");
    assert_eq!(calls.count(), 101);
    let TestError::Resilience(Error::RetryExhausted(e)) = &err else {
        panic!("{err:?}")
    };
    let (earlier, last) = (&e.earlier, &e.last);
    assert_eq!(earlier.len(), RETRY_TRAIL_MAX);
    // The most recent ones, oldest first.
    assert_eq!(
        earlier[0].to_string(),
        format!("boom {}", 101 - RETRY_TRAIL_MAX)
    );
    assert_eq!(last.to_string(), "boom 101");
    assert_eq!(
        err.to_string(),
        "`Linear` gave up after 101 calls (attempts exhausted)"
    );
}

// ---------------------------------------------------------------- overall timeout

#[derive(RetrySpec)]
#[spec("test.retry.timeout")]
struct WithTimeout;

#[tokio::test(start_paused = true)]
async fn overall_timeout_stops_before_a_wait_that_would_cross_it() {
    let r = registry::<WithTimeout>(table([
        ("delay", s("100ms")),
        ("attempts", int(10)),
        ("timeout", s("350ms")),
    ]));
    let calls = Calls::default();
    let start = Instant::now();
    let out = r
        .scope(async {
            WithTimeout::get()?
                .call(|| async {
                    let n = calls.hit();
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    Err::<(), _>(TestError::Boom(n))
                })
                .await
        })
        .await;
    let err = out.expect_err("always failing");
    // Calls start at 0, 150 and 300 ms and each takes 50 ms; at 350 ms the next
    // wait (100 ms) would end past the limit, so it is not started.
    assert_eq!(calls.count(), 3);
    assert_eq!(calls.gaps_ms(), [150, 150]);
    assert_eq!(start.elapsed(), Duration::from_millis(350));
    assert_eq!(exhausted(&err), (3, GaveUp::Timeout, 2, "boom 3".into()));
}

#[tokio::test(start_paused = true)]
async fn a_wait_that_ends_exactly_at_the_timeout_is_still_taken() {
    let r = registry::<WithTimeout>(table([
        ("delay", s("100ms")),
        ("attempts", int(10)),
        ("timeout", s("300ms")),
    ]));
    let calls = Calls::default();
    let out = r
        .scope(async { WithTimeout::get()?.call(|| flaky(&calls, u32::MAX)).await })
        .await;
    assert!(out.is_err());
    // Calls at 0, 100, 200, 300 ms: the last wait ends exactly at the limit.
    assert_eq!(calls.count(), 4);
}

// ---------------------------------------------------------------- budget

#[derive(RetrySpec)]
#[spec("test.retry.budget")]
struct Budgeted;

fn budget_registry(budget: Value) -> Registry {
    registry::<Budgeted>(table([
        ("delay", s("10ms")),
        ("attempts", int(5)),
        ("retry_budget", budget),
    ]))
}

#[tokio::test(start_paused = true)]
async fn empty_budget_ends_the_call_at_once_with_the_original_error() {
    let r = budget_registry(table([
        ("tokens_initial", int(2)),
        ("tokens_max", int(10)),
        ("ratio", int(0)),
    ]));
    let calls = Calls::default();
    let start = Instant::now();
    let first = r
        .scope(async { Budgeted::get()?.call(|| flaky(&calls, u32::MAX)).await })
        .await;
    // Two tokens: two retries, then the original error, with no third wait.
    assert!(matches!(first, Err(TestError::Boom(3))), "{first:?}");
    assert_eq!(calls.count(), 3);
    assert_eq!(start.elapsed(), Duration::from_millis(20));

    let calls = Calls::default();
    let second = r
        .scope(async { Budgeted::get()?.call(|| flaky(&calls, u32::MAX)).await })
        .await;
    assert!(matches!(second, Err(TestError::Boom(1))), "{second:?}");
    assert_eq!(
        calls.count(),
        1,
        "an empty budget allows the first call only"
    );
}

#[tokio::test(start_paused = true)]
async fn first_call_never_needs_a_token() {
    let r = budget_registry(table([("tokens_initial", int(0)), ("ratio", int(0))]));
    let calls = Calls::default();
    let out = r
        .scope(async { Budgeted::get()?.call(|| flaky(&calls, 0)).await })
        .await;
    assert_eq!(out.ok(), Some(1));
}

#[tokio::test(start_paused = true)]
async fn successes_refill_the_budget_by_ratio() {
    let r = budget_registry(table([
        ("tokens_initial", int(0)),
        ("ratio", Value::Float(0.5)),
    ]));
    let run = |failures: u32| {
        let r = r.clone();
        async move {
            let calls = Calls::default();
            let _ = r
                .scope(async { Budgeted::get()?.call(|| flaky(&calls, failures)).await })
                .await;
            calls.count()
        }
    };
    assert_eq!(run(u32::MAX).await, 1, "no token yet");
    assert_eq!(run(0).await, 1);
    assert_eq!(run(0).await, 1);
    // Two successes at 0.5 returned one token: one retry.
    assert_eq!(run(u32::MAX).await, 2);
    assert_eq!(run(u32::MAX).await, 1);
}

#[tokio::test(start_paused = true)]
async fn budget_refills_per_second_on_the_clock() {
    let r = budget_registry(table([
        ("tokens_initial", int(0)),
        ("ratio", int(0)),
        ("min_tokens_per_second", int(2)),
    ]));
    let run = || {
        let r = r.clone();
        async move {
            let calls = Calls::default();
            let _ = r
                .scope(async { Budgeted::get()?.call(|| flaky(&calls, u32::MAX)).await })
                .await;
            calls.count()
        }
    };
    assert_eq!(run().await, 1);
    tokio::time::advance(Duration::from_millis(1000)).await;
    // Two tokens arrived; the 10 ms waits of the call add a little more, not a
    // whole token (2/s needs 500 ms for one).
    assert_eq!(run().await, 3);
}

#[tokio::test(start_paused = true)]
async fn attempts_are_checked_before_the_budget() {
    let r = registry::<Budgeted>(table([
        ("delay", s("10ms")),
        ("attempts", int(1)),
        (
            "retry_budget",
            table([("tokens_initial", int(5)), ("ratio", int(0))]),
        ),
    ]));
    let calls = Calls::default();
    let (out, tokens) = r
        .scope(async {
            let h = Budgeted::get()?;
            let out = h.call(|| flaky(&calls, u32::MAX)).await;
            Ok::<_, TestError>((out, h.budget_tokens()))
        })
        .await
        .expect("configured");
    assert_eq!(exhausted(&out.expect_err("fails")).1, GaveUp::Attempts);
    assert_eq!(calls.count(), 2);
    assert_eq!(
        tokens,
        Some(4.0),
        "one retry took one token; exhaustion took none"
    );
}

/// A call of an always-failing body under a budget of 5 tokens (none
/// returned), waits of 1 s, dropped after `ms`: whether it was dropped, the
/// body's calls, and the tokens left.
async fn cancelled_after(ms: u64) -> (bool, usize, Option<f64>) {
    let r = registry::<Budgeted>(table([
        ("delay", s("1s")),
        ("attempts", int(3)),
        (
            "retry_budget",
            table([("tokens_initial", int(5)), ("ratio", int(0))]),
        ),
    ]));
    let calls = Calls::default();
    let (out, tokens) = r
        .scope(async {
            let h = Budgeted::get()?;
            let out = tokio::time::timeout(
                Duration::from_millis(ms),
                h.call(|| flaky(&calls, u32::MAX)),
            )
            .await;
            Ok::<_, TestError>((out, h.budget_tokens()))
        })
        .await
        .expect("configured");
    (out.is_err(), calls.count(), tokens)
}

#[tokio::test(start_paused = true)]
async fn a_call_cancelled_during_its_wait_returns_the_token_it_took() {
    // The first call fails at once; its retry takes a token and waits 1 s,
    // and the call is dropped half-way through that wait.
    let (dropped, calls, tokens) = cancelled_after(500).await;
    assert!(dropped, "dropped during the wait");
    assert_eq!(calls, 1, "the retry never ran");
    assert_eq!(
        tokens,
        Some(5.0),
        "the token of a retry that never ran came back"
    );
}

#[tokio::test(start_paused = true)]
async fn a_retry_that_ran_keeps_its_token_when_cancelled_later() {
    // Calls at 0 s and 1 s; dropped at 1.5 s, during the second wait.
    let (dropped, calls, tokens) = cancelled_after(1500).await;
    assert!(dropped, "dropped during the second wait");
    assert_eq!(calls, 2);
    assert_eq!(
        tokens,
        Some(4.0),
        "the retry that ran spent its token; the one that did not gave it back"
    );
}

// ---------------------------------------------------------------- registry

#[tokio::test]
async fn a_spec_without_settings_returns_not_configured_through_the_fn_error() {
    let calls = Calls::default();
    // No registry is installed in this test binary, and no scope is active.
    let out = Linear::get().map(|_| ());
    assert!(matches!(
        out,
        Err(Error::NotConfigured {
            spec: "Linear",
            path: "test.retry.linear",
            // Or `OutsideTestRegistry` while another test's scope is alive.
            ..
        })
    ));
    let out = annotated_free_fn(calls.clone(), "x".into()).await;
    assert!(
        matches!(out, Err(TestError::Resilience(Error::NotConfigured { .. }))),
        "{out:?}"
    );
    assert_eq!(calls.count(), 0, "the body never ran");
    // A scope without the spec does not fall back to anything else.
    let r = registry::<Exponential>(table([("delay", s("1ms")), ("attempts", int(1))]));
    let out = r.scope(annotated_free_fn(calls.clone(), "x".into())).await;
    assert!(
        matches!(
            out,
            Err(TestError::Resilience(Error::NotConfigured {
                spec: "Linear",
                reason: Unconfigured::NotInRegistry,
                ..
            }))
        ),
        "{out:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn scoped_registries_run_side_by_side_with_their_own_settings() {
    let two = registry::<Linear>(table([("delay", s("10ms")), ("attempts", int(2))]));
    let five = registry::<Linear>(table([("delay", s("10ms")), ("attempts", int(5))]));
    let (a, b) = (Calls::default(), Calls::default());
    let (ra, rb) = tokio::join!(
        two.scope(annotated_free_fn(a.clone(), "a".into())),
        five.scope(annotated_free_fn(b.clone(), "b".into())),
    );
    assert!(ra.is_err() && rb.is_err());
    assert_eq!((a.count(), b.count()), (3, 6));
}

#[derive(RetrySpec)]
#[spec("test.retry.shared")]
struct Shared;

#[retryable(Shared)]
async fn shared_one(calls: Calls) -> Result<u32, TestError> {
    flaky(&calls, u32::MAX).await
}

#[retryable(Shared)]
async fn shared_two(calls: Calls) -> Result<u32, TestError> {
    flaky(&calls, u32::MAX).await
}

#[tokio::test(start_paused = true)]
async fn fns_with_the_same_spec_share_one_budget() {
    let r = registry::<Shared>(table([
        ("delay", s("1ms")),
        ("attempts", int(10)),
        (
            "retry_budget",
            table([("tokens_initial", int(3)), ("ratio", int(0))]),
        ),
    ]));
    let (one, two) = (Calls::default(), Calls::default());
    let _ = r.scope(shared_one(one.clone())).await;
    let _ = r.scope(shared_two(two.clone())).await;
    assert_eq!(one.count(), 4, "three tokens, three retries");
    assert_eq!(two.count(), 1, "the other fn finds the budget empty");
}

// ---------------------------------------------------------------- the macro

/// The argument is cloned for each attempt: a body that changes its copy
/// sees the original again on the next attempt.
#[retryable(Linear)]
async fn annotated_free_fn(calls: Calls, mut label: String) -> Result<u32, TestError> {
    assert_eq!(label.len(), 1, "each attempt gets a fresh clone");
    label.push('!');
    flaky(&calls, u32::MAX).await
}

struct Client {
    calls: Calls,
    failures: u32,
}

impl Client {
    #[retryable(Linear)]
    async fn by_ref(&self, id: u32) -> Result<u32, TestError> {
        Ok(flaky(&self.calls, self.failures).await? + id)
    }

    #[retryable(Linear)]
    async fn by_arc(self: Arc<Self>, id: u32) -> Result<u32, TestError> {
        let strong = Arc::strong_count(&self);
        assert!(strong >= 2, "the body holds a clone for its attempt");
        Ok(flaky(&self.calls, self.failures).await? + id)
    }
}

#[tokio::test(start_paused = true)]
async fn annotated_methods_retry_with_the_same_counts_as_the_imperative_api() {
    let r = registry::<Linear>(table([("delay", s("10ms")), ("attempts", int(3))]));
    let client = Arc::new(Client {
        calls: Calls::default(),
        failures: 2,
    });
    assert_eq!(r.scope(client.by_ref(100)).await.ok(), Some(103));
    assert_eq!(client.calls.count(), 3);
    assert_eq!(client.calls.gaps_ms(), [10, 10]);

    let client = Arc::new(Client {
        calls: Calls::default(),
        failures: 2,
    });
    assert_eq!(
        r.scope(Arc::clone(&client).by_arc(100)).await.ok(),
        Some(103)
    );
    assert_eq!(client.calls.count(), 3);
    assert_eq!(
        Arc::strong_count(&client),
        1,
        "every attempt's clone was dropped"
    );
}

#[tokio::test(start_paused = true)]
async fn dropping_a_call_while_it_waits_stops_its_retries() {
    let r = registry::<Linear>(table([("delay", s("1s")), ("attempts", int(3))]));
    let calls = Calls::default();
    let out = tokio::time::timeout(
        Duration::from_millis(1500),
        r.scope(annotated_free_fn(calls.clone(), "x".into())),
    )
    .await;
    assert!(out.is_err(), "timed out while waiting for the third call");
    tokio::time::advance(Duration::from_secs(10)).await;
    assert_eq!(calls.count(), 2, "no call after the future was dropped");
}

#[test]
fn returned_futures_are_send() {
    fn assert_send<T: Send>(_: &T) {}
    let client = Arc::new(Client {
        calls: Calls::default(),
        failures: 0,
    });
    assert_send(&client.by_ref(1));
    assert_send(&Arc::clone(&client).by_arc(1));
    assert_send(&annotated_free_fn(Calls::default(), "x".into()));
}
