//! `#[circuit_breakable]` given twice on one fn.
use resilient_core::{circuit_breakable, CircuitBreakerSpec};
use ui_tests::UiError;

#[derive(CircuitBreakerSpec)]
#[spec("ui.breaker.a")]
pub struct ABreaker;

#[derive(CircuitBreakerSpec)]
#[spec("ui.breaker.b")]
pub struct BBreaker;

#[circuit_breakable(ABreaker)]
#[circuit_breakable(BBreaker)]
pub async fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
