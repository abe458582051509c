//! `#[circuit_breakable(HostBreaker, key)]`: `key` without its expression.
use resilient_core::{circuit_breakable, CircuitBreakerSpec};
use ui_tests::UiError;

#[derive(CircuitBreakerSpec)]
#[spec("ui.breaker.host")]
pub struct HostBreaker;

#[circuit_breakable(HostBreaker, key)]
pub async fn fetch(host: &str, path: &str) -> Result<String, UiError> {
    Ok(format!("https://{host}{path}"))
}

fn main() {}
