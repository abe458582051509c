//! `#[hedged]` composes with the seven other attributes, above, between and
//! below them, each imported by name (an unused import would be an error
//! here); its spec takes `classify` as a retry spec does; every future is
//! `Send`; with no registry a call returns `NotConfigured` without running
//! the body; a method with `&self` and a by-reference argument is hedged
//! too.
#![deny(warnings)]

use std::sync::atomic::{AtomicU32, Ordering};

use resilient_core::{
    chaos, circuit_breakable, concurrency_limit, fallback, hedged, rate_limited, retryable,
    timeout, ChaosSpec, CircuitBreakerSpec, ConcurrencyLimitSpec, HedgingSpec, RateLimiterSpec,
    TimeoutSpec,
};
use ui_tests::{UiError, UiRetry};

#[derive(HedgingSpec)]
#[spec("ui.hedging.all", classify = all_errors)]
pub struct AllHedging;

#[derive(ChaosSpec)]
#[spec("ui.hedging.chaos")]
pub struct HedgeChaos;

#[derive(CircuitBreakerSpec)]
#[spec("ui.hedging.breaker")]
pub struct HedgeBreaker;

#[derive(TimeoutSpec)]
#[spec("ui.hedging.timeout")]
pub struct HedgeTimeout;

#[derive(ConcurrencyLimitSpec)]
#[spec("ui.hedging.concurrency")]
pub struct HedgeLimit;

#[derive(RateLimiterSpec)]
#[spec("ui.hedging.rate")]
pub struct HedgeRate;

static BODY_RUNS: AtomicU32 = AtomicU32::new(0);

/// Innermost.
#[fallback(method = "cached(id)")]
#[circuit_breakable(HedgeBreaker)]
#[retryable(UiRetry)]
#[timeout(HedgeTimeout)]
#[concurrency_limit(HedgeLimit)]
#[rate_limited(HedgeRate)]
#[chaos(HedgeChaos)]
#[hedged(AllHedging)]
pub async fn innermost(id: u64) -> Result<u64, UiError> {
    BODY_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(id)
}

/// Outermost: a timeout per attempt, a retry inside each attempt.
#[hedged(AllHedging)]
#[timeout(HedgeTimeout)]
#[retryable(UiRetry)]
pub async fn outermost(id: u64) -> Result<u64, UiError> {
    BODY_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(id)
}

/// Between: a timeout on the whole hedged call, a limit per attempt, a
/// fallback inside each attempt.
#[timeout(HedgeTimeout)]
#[hedged(AllHedging)]
#[concurrency_limit(HedgeLimit)]
#[fallback(method = "cached(id)")]
pub async fn between(id: u64, name: String) -> Result<u64, UiError> {
    BODY_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(id + name.len() as u64)
}

async fn cached(id: u64) -> Result<u64, UiError> {
    Ok(id + 1000)
}

pub struct Replica {
    pub base: u64,
}

impl Replica {
    #[hedged(AllHedging)]
    pub async fn get(&self, key: &str) -> Result<u64, UiError> {
        BODY_RUNS.fetch_add(1, Ordering::SeqCst);
        Ok(self.base + key.len() as u64)
    }
}

fn assert_send<T: Send>(_: &T) {}

fn main() {
    let replica = Replica { base: 1 };
    assert_send(&innermost(1));
    assert_send(&outermost(1));
    assert_send(&between(1, String::new()));
    assert_send(&replica.get("k"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|e| e.to_string());
    let Ok(rt) = rt else { return };
    for out in [
        rt.block_on(outermost(1)),
        rt.block_on(between(1, String::from("x"))),
        rt.block_on(replica.get("k")),
    ] {
        assert!(matches!(
            out,
            Err(UiError::Resilience(resilient_core::Error::NotConfigured { .. }))
        ));
    }
    assert_eq!(BODY_RUNS.load(Ordering::SeqCst), 0);
}
