//! An application's path: a registry installed once, calls with no scope
//! anywhere in the process, each spec's instance reached through its slot.
//! One test in this binary, so that no other test's scope is alive.

#![allow(clippy::expect_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::*;

use std::sync::atomic::{AtomicU32, Ordering};

use resilient_core::circuit_breaker::State;
use resilient_core::{
    circuit_breakable, retryable, CircuitBreakerSpec, Error, Registry, RetrySpec,
};

#[derive(RetrySpec)]
#[spec("installed.retry")]
struct R;

#[derive(CircuitBreakerSpec)]
#[spec("installed.breaker")]
struct B;

#[derive(RetrySpec)]
#[spec("installed.absent")]
struct Absent;

#[derive(Debug, thiserror::Error)]
enum TestError {
    #[error("down")]
    Down,
    #[error(transparent)]
    Resilience(#[from] Error),
}

#[circuit_breakable(B)]
#[retryable(R)]
async fn down(runs: &AtomicU32) -> Result<(), TestError> {
    runs.fetch_add(1, Ordering::SeqCst);
    Err(TestError::Down)
}

#[retryable(Absent)]
async fn absent(runs: &AtomicU32) -> Result<(), TestError> {
    runs.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn installed_instances_are_shared_by_calls_and_handles() {
    let runs = AtomicU32::new(0);
    // Before install: no settings, the body never runs.
    assert!(matches!(
        down(&runs).await,
        Err(TestError::Resilience(Error::NotConfigured {
            spec: "B",
            ..
        }))
    ));
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    build(
        Registry::builder().spec::<R>().spec::<B>(),
        vec![
            (
                "installed.retry",
                table([("delay", s("1ms")), ("attempts", int(2))]),
            ),
            (
                "installed.breaker",
                table([
                    ("failure_rate_threshold", int(100)),
                    ("minimum_required_calls", int(2)),
                    ("wait_duration_in_open_state", s("1h")),
                    ("permitted_calls_in_half_open_state", int(1)),
                    ("count_based", table([("window_size", int(2))])),
                ]),
            ),
        ],
    )
    .install()
    .expect("first install");

    // 3 calls per retry; the breaker counts each exhausted retry once.
    for _ in 0..2 {
        assert!(matches!(
            down(&runs).await,
            Err(TestError::Resilience(Error::RetryExhausted(e))) if e.calls == 3
        ));
    }
    assert_eq!(runs.load(Ordering::SeqCst), 6);
    // The handle reaches the same breaker the calls went through.
    let breaker = B::get().expect("installed");
    assert_eq!(breaker.state(), State::Open);
    assert_eq!(breaker.metrics().opened, 1);
    assert!(matches!(
        down(&runs).await,
        Err(TestError::Resilience(Error::CallNotPermitted {
            spec: "B",
            ..
        }))
    ));
    assert_eq!(runs.load(Ordering::SeqCst), 6, "rejected without a call");

    // A spec the installed registry was built without has no settings.
    assert!(matches!(
        absent(&runs).await,
        Err(TestError::Resilience(Error::NotConfigured {
            spec: "Absent",
            ..
        }))
    ));
    assert_eq!(runs.load(Ordering::SeqCst), 6);
}
