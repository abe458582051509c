//! `#[chaos]` composes with the six other attributes, above, between and
//! below them, each imported by name (an unused import would be an error
//! here); every future is `Send`; with no registry a call returns
//! `NotConfigured` without running the body.
#![deny(warnings)]

use std::sync::atomic::{AtomicU32, Ordering};

use resilient_core::{
    chaos, circuit_breakable, concurrency_limit, fallback, rate_limited, retryable, timeout,
    ChaosSpec, CircuitBreakerSpec, ConcurrencyLimitSpec, RateLimiterSpec, TimeoutSpec,
};
use ui_tests::{UiError, UiRetry};

#[derive(ChaosSpec)]
#[spec("ui.chaos.all")]
pub struct AllChaos;

#[derive(CircuitBreakerSpec)]
#[spec("ui.chaos.breaker")]
pub struct ChaosBreaker;

#[derive(TimeoutSpec)]
#[spec("ui.chaos.timeout")]
pub struct ChaosTimeout;

#[derive(ConcurrencyLimitSpec)]
#[spec("ui.chaos.concurrency")]
pub struct ChaosLimit;

#[derive(RateLimiterSpec)]
#[spec("ui.chaos.rate")]
pub struct ChaosRate;

static BODY_RUNS: AtomicU32 = AtomicU32::new(0);

/// Innermost: below the timeout, its latency times out; below the retry,
/// its errors are retried.
#[fallback(method = "cached(id)")]
#[circuit_breakable(ChaosBreaker)]
#[retryable(UiRetry)]
#[timeout(ChaosTimeout)]
#[concurrency_limit(ChaosLimit)]
#[rate_limited(ChaosRate)]
#[chaos(AllChaos)]
pub async fn innermost(id: u64) -> Result<u64, UiError> {
    BODY_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(id)
}

/// Outermost, then in the middle.
#[chaos(AllChaos)]
#[retryable(UiRetry)]
#[timeout(ChaosTimeout)]
pub async fn outermost(id: u64) -> Result<u64, UiError> {
    BODY_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(id)
}

#[timeout(ChaosTimeout)]
#[chaos(AllChaos)]
#[retryable(UiRetry)]
pub async fn between(id: u64) -> Result<u64, UiError> {
    BODY_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(id)
}

async fn cached(id: u64) -> Result<u64, UiError> {
    Ok(id + 1000)
}

fn assert_send<T: Send>(_: &T) {}

fn main() {
    assert_send(&innermost(1));
    assert_send(&outermost(1));
    assert_send(&between(1));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|e| e.to_string());
    let Ok(rt) = rt else { return };
    for out in [
        rt.block_on(outermost(1)),
        rt.block_on(between(1)),
    ] {
        assert!(matches!(
            out,
            Err(UiError::Resilience(resilient_core::Error::NotConfigured { .. }))
        ));
    }
    assert_eq!(BODY_RUNS.load(Ordering::SeqCst), 0);
}
