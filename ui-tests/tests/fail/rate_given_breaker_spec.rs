//! `#[rate_limited(PetBreaker)]`: a circuit breaker spec given to the rate
//! limiter attribute, which needs a `#[derive(RateLimiterSpec)]` type.
use resilient_core::{rate_limited, CircuitBreakerSpec};
use ui_tests::UiError;

#[derive(CircuitBreakerSpec)]
#[spec("ui.breaker.pet")]
pub struct PetBreaker;

#[rate_limited(PetBreaker)]
pub async fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
