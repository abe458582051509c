//! `#[circuit_breakable]` on a fn that is not `async`.
use resilient_core::{circuit_breakable, CircuitBreakerSpec};
use ui_tests::UiError;

#[derive(CircuitBreakerSpec)]
#[spec("ui.breaker.pet")]
pub struct PetBreaker;

#[circuit_breakable(PetBreaker)]
pub fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
