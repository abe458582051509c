//! A type error in the body of a fn under all six attributes is reported in the body.
use resilient_core::{circuit_breakable, concurrency_limit, fallback, rate_limited, retryable, timeout, CircuitBreakerSpec, ConcurrencyLimitSpec, RateLimiterSpec, TimeoutSpec};
use ui_tests::{UiError, UiRetry};

#[fallback(method = "cached(id)")] #[circuit_breakable(PetBreaker)] #[concurrency_limit(PetLimit)] #[rate_limited(PetRate)] #[retryable(UiRetry)] #[timeout(PetTimeout)]
pub async fn tail(id: u64) -> Result<u64, UiError> {
    let name = id.to_string();
    Ok(name)
}

#[fallback(method = "cached(id)")] #[circuit_breakable(PetBreaker)] #[concurrency_limit(PetLimit)] #[rate_limited(PetRate)] #[retryable(UiRetry)] #[timeout(PetTimeout)]
pub async fn early_return(id: u64) -> Result<u64, UiError> {
    let name = id.to_string();
    if id == 0 {
        return Ok(name);
    }
    Ok(id)
}

#[fallback(method = "cached(id)")] #[circuit_breakable(PetBreaker)] #[concurrency_limit(PetLimit)] #[rate_limited(PetRate)] #[retryable(UiRetry)] #[timeout(PetTimeout)]
pub async fn question_mark(id: u64) -> Result<u64, UiError> {
    let parsed: Result<String, UiError> = Ok(id.to_string());
    let name = parsed?;
    Ok(name)
}

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

fn cached(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
