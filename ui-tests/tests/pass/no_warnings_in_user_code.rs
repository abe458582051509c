//! The attributes leave no warning in the user's code: single-expression
//! bodies (which a block around them would make `unused_braces`), an inner
//! attribute first in the body, and every attribute.
#![deny(warnings)]

use resilient_core::{
    circuit_breakable, concurrency_limit, fallback, rate_limited, retryable, timeout,
    CircuitBreakerSpec, ConcurrencyLimitSpec, RateLimiterSpec, TimeoutSpec,
};
use ui_tests::{UiError, UiRetry};

#[derive(CircuitBreakerSpec)]
#[spec("ui.breaker.pet")]
pub struct PetBreaker;

#[derive(ConcurrencyLimitSpec)]
#[spec("ui.limit.pet")]
pub struct PetLimit;

#[derive(RateLimiterSpec)]
#[spec("ui.rate.pet")]
pub struct PetRate;

#[derive(TimeoutSpec)]
#[spec("ui.timeout.pet")]
pub struct PetTimeout;

#[retryable(UiRetry)]
pub async fn retried(id: u64) -> Result<u64, UiError> { Ok(id) }

#[circuit_breakable(PetBreaker)]
pub async fn broken(id: u64) -> Result<u64, UiError> { Ok(id) }

#[concurrency_limit(PetLimit)]
pub async fn limited(id: u64) -> Result<u64, UiError> { Ok(id) }

#[rate_limited(PetRate)]
pub async fn rated(id: u64) -> Result<u64, UiError> { Ok(id) }

#[timeout(PetTimeout)]
pub async fn timed(id: u64) -> Result<u64, UiError> { Ok(id) }

#[fallback(method = "cached(id)")]
pub async fn fell_back(id: u64) -> Result<u64, UiError> { Ok(id) }

fn cached(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

#[fallback(method = "cached(id)")]
#[circuit_breakable(PetBreaker)]
#[retryable(UiRetry)]
#[rate_limited(PetRate)]
#[concurrency_limit(PetLimit)]
#[timeout(PetTimeout)]
pub async fn all_six(id: u64) -> Result<u64, UiError> {
    #![allow(clippy::needless_return)]
    return Ok(id);
}

fn main() {}
