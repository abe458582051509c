//! `#[circuit_breakable(UiRetry)]`: a retry spec given to the breaker
//! attribute, which needs a `#[derive(CircuitBreakerSpec)]` type.
use resilient_core::circuit_breakable;
use ui_tests::{UiError, UiRetry};

#[circuit_breakable(UiRetry)]
pub async fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
