//! `Verdict::Fatal`: a failure no attempt may follow. Retry returns it at
//! once, unchanged; a breaker counts it as a failure; hedging ends the call
//! with it without starting another attempt.

use std::sync::atomic::{AtomicU64, Ordering};

use resilient_core::settings::Value;
use resilient_core::{
    circuit_breakable, hedged, retryable, CircuitBreakerSpec, Classify, Error, HedgingSpec,
    Registry, RetrySpec, Verdict,
};

type TestResult = Result<(), Box<dyn std::error::Error>>;

#[derive(Debug, thiserror::Error)]
enum TestError {
    #[error("fatal")]
    Fatal,
    #[error("transient")]
    Transient,
    #[error(transparent)]
    Resilience(#[from] Error),
}

/// `TestError::Fatal` is fatal, `TestError::Transient` a plain failure.
struct Outcomes;
impl resilient_core::Classifier for Outcomes {}
impl Classify<(), TestError> for Outcomes {
    fn classify(outcome: &Result<(), TestError>) -> Verdict {
        match outcome {
            Ok(()) => Verdict::Success,
            Err(TestError::Fatal) => Verdict::Fatal,
            Err(_) => Verdict::Failure,
        }
    }
}

#[derive(RetrySpec)]
#[spec("fatal.retry", classify = Outcomes)]
struct FatalRetry;

#[derive(CircuitBreakerSpec)]
#[spec("fatal.breaker", classify = Outcomes)]
struct FatalBreaker;

#[derive(HedgingSpec)]
#[spec("fatal.hedging", classify = Outcomes)]
struct FatalHedging;

fn table<const N: usize>(pairs: [(&str, Value); N]) -> Value {
    Value::Table(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

fn registry() -> Result<Registry, Box<dyn std::error::Error>> {
    let root = table([(
        "fatal",
        table([
            (
                "retry",
                table([
                    ("delay", Value::Str("10ms".into())),
                    ("attempts", Value::Int(3)),
                ]),
            ),
            (
                "breaker",
                table([
                    ("failure_rate_threshold", Value::Int(50)),
                    ("minimum_required_calls", Value::Int(10)),
                    ("wait_duration_in_open_state", Value::Str("1s".into())),
                    ("permitted_calls_in_half_open_state", Value::Int(1)),
                    ("count_based", table([("window_size", Value::Int(10))])),
                ]),
            ),
            (
                "hedging",
                table([
                    ("delay", Value::Str("100ms".into())),
                    ("max_hedged_attempts", Value::Int(2)),
                ]),
            ),
        ]),
    )]);
    Ok(Registry::builder()
        .spec::<FatalRetry>()
        .spec::<FatalBreaker>()
        .spec::<FatalHedging>()
        .build(&root)
        .map_err(|problems| format!("{problems:?}"))?)
}

#[circuit_breakable(FatalBreaker)]
#[retryable(FatalRetry)]
async fn call(calls: &AtomicU64, fatal: bool) -> Result<(), TestError> {
    calls.fetch_add(1, Ordering::SeqCst);
    Err(if fatal {
        TestError::Fatal
    } else {
        TestError::Transient
    })
}

#[hedged(FatalHedging)]
async fn hedged_call(calls: &AtomicU64, fatal: bool) -> Result<(), TestError> {
    calls.fetch_add(1, Ordering::SeqCst);
    Err(if fatal {
        TestError::Fatal
    } else {
        TestError::Transient
    })
}

#[tokio::test(start_paused = true)]
async fn retry_returns_a_fatal_failure_at_once_and_unchanged() -> TestResult {
    let r = registry()?;
    let calls = AtomicU64::new(0);
    let out = r.scope(call(&calls, true)).await;
    assert!(matches!(out, Err(TestError::Fatal)), "{out:?}");
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // A plain failure, for contrast: 1 call and 3 retries, then exhausted.
    let calls = AtomicU64::new(0);
    let out = r.scope(call(&calls, false)).await;
    assert!(
        matches!(out, Err(TestError::Resilience(Error::RetryExhausted(_)))),
        "{out:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_breaker_counts_a_fatal_failure_as_a_failure() -> TestResult {
    let r = registry()?;
    let calls = AtomicU64::new(0);
    let _ = r.scope(call(&calls, true)).await;
    let window = r.sync_scope(FatalBreaker::get)?.metrics().window;
    assert_eq!((window.total, window.failures), (1, 1));
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn hedging_ends_the_call_with_a_fatal_failure() -> TestResult {
    let r = registry()?;
    let calls = AtomicU64::new(0);
    let out = r.scope(hedged_call(&calls, true)).await;
    assert!(matches!(out, Err(TestError::Fatal)), "{out:?}");
    assert_eq!(calls.load(Ordering::SeqCst), 1, "no hedge after it");

    // A plain failure starts the next attempt at once: 3 attempts.
    let calls = AtomicU64::new(0);
    let out = r.scope(hedged_call(&calls, false)).await;
    assert!(out.is_err(), "{out:?}");
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    Ok(())
}
