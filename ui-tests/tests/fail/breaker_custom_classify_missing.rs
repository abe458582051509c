//! A `classify = custom` breaker spec used with a result type it has no
//! `Classify` implementation for.
use resilient_core::{circuit_breakable, CircuitBreakerSpec};
use ui_tests::UiError;

#[derive(CircuitBreakerSpec)]
#[spec("ui.breaker.http", classify = custom)]
pub struct HttpBreaker;

#[circuit_breakable(HttpBreaker)]
pub async fn status() -> Result<u16, UiError> {
    Ok(200)
}

fn main() {}
