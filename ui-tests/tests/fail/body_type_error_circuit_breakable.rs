//! A type error in the body of a `#[circuit_breakable]` fn is reported in the body.
use resilient_core::{circuit_breakable, CircuitBreakerSpec};
use ui_tests::UiError;

#[circuit_breakable(PetBreaker)]
pub async fn tail(id: u64) -> Result<u64, UiError> {
    let name = id.to_string();
    Ok(name)
}

#[circuit_breakable(PetBreaker)]
pub async fn early_return(id: u64) -> Result<u64, UiError> {
    let name = id.to_string();
    if id == 0 {
        return Ok(name);
    }
    Ok(id)
}

#[circuit_breakable(PetBreaker)]
pub async fn question_mark(id: u64) -> Result<u64, UiError> {
    let parsed: Result<String, UiError> = Ok(id.to_string());
    let name = parsed?;
    Ok(name)
}

#[derive(CircuitBreakerSpec)]
#[spec("ui.breaker.pet")]
pub struct PetBreaker;

fn main() {}
