//! `key` given twice in one `#[circuit_breakable]`.
use resilient_core::{circuit_breakable, CircuitBreakerSpec};
use ui_tests::UiError;

#[derive(CircuitBreakerSpec)]
#[spec("ui.breaker.host")]
pub struct HostBreaker;

#[circuit_breakable(HostBreaker, key = host, key = path)]
pub async fn fetch(host: &str, path: &str) -> Result<String, UiError> {
    Ok(format!("https://{host}{path}"))
}

fn main() {}
