//! A `&mut` argument under a breaker with a retry below it: the breaker alone
//! would call the body once, but the retry runs it again for each attempt.
use resilient_core::{circuit_breakable, retryable, CircuitBreakerSpec};
use ui_tests::{UiError, UiRetry};

#[derive(CircuitBreakerSpec)]
#[spec("ui.breaker.pet")]
pub struct PetBreaker;

#[circuit_breakable(PetBreaker)]
#[retryable(UiRetry)]
pub async fn bump(count: &mut u32) -> Result<u32, UiError> {
    *count += 1;
    Ok(*count)
}

fn main() {}
