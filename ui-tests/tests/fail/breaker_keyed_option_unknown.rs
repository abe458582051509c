//! `#[circuit_breakable(HostBreaker, keys = host)]`: an unknown option after
//! the spec (a misspelt `key`); only `key = ..` goes there.
use resilient_core::{circuit_breakable, CircuitBreakerSpec};
use ui_tests::UiError;

#[derive(CircuitBreakerSpec)]
#[spec("ui.breaker.host")]
pub struct HostBreaker;

#[circuit_breakable(HostBreaker, keys = host)]
pub async fn fetch(host: &str, path: &str) -> Result<String, UiError> {
    Ok(format!("https://{host}{path}"))
}

fn main() {}
