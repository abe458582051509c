//! `#[retryable(PetBreaker)]`: a circuit breaker spec given to the retry
//! attribute, which needs a `#[derive(RetrySpec)]` type.
use resilient_core::{retryable, CircuitBreakerSpec};
use ui_tests::UiError;

#[derive(CircuitBreakerSpec)]
#[spec("ui.breaker.pet")]
pub struct PetBreaker;

#[retryable(PetBreaker)]
pub async fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
