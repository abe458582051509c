//! An attribute written below the first resilience attribute is collected by
//! it, yet its import still counts as used: no `unused_imports` warning.
#![deny(warnings)]

use resilient_core::{circuit_breakable, retryable, CircuitBreakerSpec};
use ui_tests::{UiError, UiRetry};

#[derive(CircuitBreakerSpec)]
#[spec("ui.breaker.imports")]
pub struct ImportsBreaker;

#[circuit_breakable(ImportsBreaker)]
#[retryable(UiRetry)]
pub async fn only_use(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {
    let _ = only_use(1);
}
