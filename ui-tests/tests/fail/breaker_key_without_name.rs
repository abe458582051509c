//! `#[circuit_breakable(HostBreaker, host)]`: the key's expression without
//! `key =`.
use resilient_core::{circuit_breakable, CircuitBreakerSpec};
use ui_tests::UiError;

#[derive(CircuitBreakerSpec)]
#[spec("ui.breaker.host")]
pub struct HostBreaker;

#[circuit_breakable(HostBreaker, host)]
pub async fn fetch(host: &str, path: &str) -> Result<String, UiError> {
    Ok(format!("https://{host}{path}"))
}

fn main() {}
