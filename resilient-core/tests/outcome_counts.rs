//! Every call through a spec counts exactly one outcome for that spec: over a
//! mixed run of successes, failures, timeouts and rejections through all five
//! mechanisms, each spec's `resilient_calls_total` sums to the calls that
//! reached it.

#![allow(clippy::expect_used, clippy::unwrap_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::capture::Meters;
use support::*;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use resilient_core::{
    circuit_breakable, concurrency_limit, rate_limited, retryable, timeout, CircuitBreakerSpec,
    ConcurrencyLimitSpec, Error, RateLimiterSpec, Registry, RetrySpec, TimeoutSpec,
};

#[derive(Debug, thiserror::Error)]
enum MixError {
    #[error("dependency failed")]
    Failed,
    #[error(transparent)]
    Resilience(#[from] Error),
}

#[derive(RateLimiterSpec)]
#[spec("outcomes.rate")]
struct MixRate;

#[derive(ConcurrencyLimitSpec)]
#[spec("outcomes.limit")]
struct MixLimit;

#[derive(CircuitBreakerSpec)]
#[spec("outcomes.breaker")]
struct MixBreaker;

#[derive(TimeoutSpec)]
#[spec("outcomes.timeout")]
struct MixTimeout;

#[derive(RetrySpec)]
#[spec("outcomes.retry")]
struct MixRetry;

/// What the body does.
#[derive(Debug, Clone, Copy)]
enum Body {
    Succeed,
    /// Succeeds after 50 ms: long enough to hold a place while others come.
    Hold,
    /// Fails every attempt.
    Fail,
    /// Sleeps past the timeout.
    Hang,
}

static ATTEMPTS: AtomicU32 = AtomicU32::new(0);

#[rate_limited(MixRate)]
#[concurrency_limit(MixLimit)]
#[circuit_breakable(MixBreaker)]
#[timeout(MixTimeout)]
#[retryable(MixRetry)]
async fn mixed(body: Body) -> Result<(), MixError> {
    ATTEMPTS.fetch_add(1, Ordering::SeqCst);
    match body {
        Body::Succeed => Ok(()),
        Body::Hold => {
            tokio::time::sleep(Duration::from_millis(50)).await;
            Ok(())
        }
        Body::Fail => Err(MixError::Failed),
        Body::Hang => {
            tokio::time::sleep(Duration::from_secs(10)).await;
            Ok(())
        }
    }
}

const SPECS: [(&str, &str, &str); 5] = [
    ("MixRate", "outcomes.rate", "rate_limiter"),
    ("MixLimit", "outcomes.limit", "concurrency_limit"),
    ("MixBreaker", "outcomes.breaker", "circuit_breaker"),
    ("MixTimeout", "outcomes.timeout", "timeout"),
    ("MixRetry", "outcomes.retry", "retry"),
];

const OUTCOMES: [&str; 6] = [
    "success",
    "failure",
    "ignored",
    "rejected",
    "timed_out",
    "cancelled",
];

#[tokio::test(start_paused = true)]
async fn each_spec_counts_one_outcome_per_call_that_reached_it() {
    let meters = Meters::default();
    // The recorder in use for the whole test: the series of an outcome that
    // is not exported from the start (`cancelled`) is registered when the
    // first such call ends.
    let _recorder = metrics::set_default_local_recorder(&meters);
    let registry = {
        build(
            Registry::builder()
                .spec::<MixRate>()
                .spec::<MixLimit>()
                .spec::<MixBreaker>()
                .spec::<MixTimeout>()
                .spec::<MixRetry>(),
            vec![
                (
                    "outcomes.rate",
                    metered(table([
                        ("limit_for_period", int(20)),
                        ("limit_refresh_period", s("1h")),
                    ])),
                ),
                ("outcomes.limit", metered(table([("limit", int(2))]))),
                (
                    "outcomes.breaker",
                    metered(table([
                        ("failure_rate_threshold", int(50)),
                        ("minimum_required_calls", int(8)),
                        ("wait_duration_in_open_state", s("1h")),
                        ("permitted_calls_in_half_open_state", int(1)),
                        ("count_based", table([("window_size", int(8))])),
                    ])),
                ),
                (
                    "outcomes.timeout",
                    metered(table([("duration", s("100ms"))])),
                ),
                (
                    "outcomes.retry",
                    metered(table([("delay", s("10ms")), ("attempts", int(1))])),
                ),
            ],
        )
    };
    let _default = registry.set_default();
    let mut calls = 0u64;

    // 5 successes.
    for _ in 0..5 {
        mixed(Body::Succeed).await.unwrap();
        calls += 1;
    }
    // 3 at once on a limit of 2: the third is rejected.
    let held: Vec<_> = (0..3).map(|_| tokio::spawn(mixed(Body::Hold))).collect();
    calls += 3;
    let mut limit_rejected = 0;
    for h in held {
        if let Err(MixError::Resilience(Error::ConcurrencyLimitReached { .. })) = h.await.unwrap() {
            limit_rejected += 1;
        }
    }
    assert_eq!(limit_rejected, 1);
    // 2 timeouts (the retry inside is cancelled), 2 exhausted retries: the
    // window of 8 holds 4 failures in 8, and the breaker opens.
    for body in [Body::Hang, Body::Fail, Body::Hang, Body::Fail] {
        mixed(body).await.unwrap_err();
        calls += 1;
    }
    // Rejected by the open breaker until the rate limit's 20 are spent,
    // then by the rate limiter.
    for _ in 0..10 {
        mixed(Body::Succeed).await.unwrap_err();
        calls += 1;
    }

    let sums: Vec<u64> = SPECS
        .iter()
        .map(|spec| OUTCOMES.iter().map(|o| meters.calls(*spec, o)).sum())
        .collect();
    // Each layer is reached by the calls the layer outside it let in.
    let mut reached = calls;
    for (spec, sum) in SPECS.iter().zip(&sums) {
        assert_eq!(
            *sum, reached,
            "{}: one outcome per call that reached it",
            spec.0
        );
        reached -= meters.calls(*spec, "rejected");
    }

    let [rate, limit, breaker, time, retry] = SPECS;
    assert_eq!(calls, 22);
    assert_eq!(meters.calls(rate, "rejected"), 2);
    // A rejection inside is a failed call for the limits outside: 1 + 4 + 8.
    assert_eq!(meters.calls(rate, "success"), 7);
    assert_eq!(meters.calls(rate, "failure"), 13);
    assert_eq!(meters.calls(limit, "rejected"), 1);
    assert_eq!(meters.calls(breaker, "rejected"), 8);
    assert_eq!(meters.calls(breaker, "failure"), 4);
    assert_eq!(meters.calls(time, "timed_out"), 2);
    assert_eq!(meters.calls(time, "failure"), 2, "the exhausted retries");
    assert_eq!(meters.calls(time, "success"), 7);
    assert_eq!(
        meters.calls(retry, "cancelled"),
        2,
        "dropped by the timeout"
    );
    assert_eq!(meters.calls(retry, "failure"), 2);
    assert_eq!(meters.calls(retry, "success"), 7);
    // 7 successes, 2 hung (each cancelled in its first attempt), 2 failed
    // twice.
    assert_eq!(ATTEMPTS.load(Ordering::SeqCst), 7 + 2 + 2 * 2);
}

#[derive(TimeoutSpec)]
#[spec("outcomes.alone.timeout")]
struct AloneTimeout;

#[timeout(AloneTimeout)]
async fn hangs() -> Result<(), MixError> {
    tokio::time::sleep(Duration::from_secs(10)).await;
    Ok(())
}

/// The count the issue was filed with: a timed-out call was counted both
/// `failure` and `timed_out`.
#[tokio::test(start_paused = true)]
async fn a_timed_out_call_counts_timed_out_only() {
    let meters = Meters::default();
    let registry = metrics::with_local_recorder(&meters, || {
        registry::<AloneTimeout>(metered(table([("duration", s("100ms"))])))
    });
    let spec = ("AloneTimeout", "outcomes.alone.timeout", "timeout");
    for _ in 0..13 {
        registry.scope(hangs()).await.unwrap_err();
    }
    let all: u64 = OUTCOMES.iter().map(|o| meters.calls(spec, o)).sum();
    assert_eq!(all, 13);
    assert_eq!(meters.calls(spec, "timed_out"), 13);
    // And through the handle.
    let handle = registry.sync_scope(AloneTimeout::get).unwrap();
    let out: Result<(), MixError> = handle
        .call(|| async {
            tokio::time::sleep(Duration::from_secs(10)).await;
            Ok(())
        })
        .await;
    assert!(out.is_err());
    assert_eq!(meters.calls(spec, "timed_out"), 14);
    assert_eq!(meters.calls(spec, "failure"), 0);
}
