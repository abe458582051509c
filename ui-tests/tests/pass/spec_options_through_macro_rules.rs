//! Spec options and fallback arguments handed on by a `macro_rules!` as
//! `$value:expr` arrive in an invisible group, and read as written.
use resilient_core::{circuit_breakable, fallback, CircuitBreakerSpec, RetrySpec};
use ui_tests::UiError;

macro_rules! retry_spec {
    ($name:ident, $path:literal, $classify:expr, $exhausted:expr) => {
        #[derive(RetrySpec)]
        #[spec($path, classify = $classify, exhausted = $exhausted)]
        pub struct $name;
    };
}

retry_spec!(PetRetry, "ui.macro_rules.options", all_errors, last_failure);

#[derive(CircuitBreakerSpec)]
#[spec("ui.macro_rules.breaker")]
pub struct PetBreaker;

macro_rules! with_fallback {
    ($name:ident, $on:expr) => {
        #[fallback(method = "cached(id)", on = $on)]
        #[circuit_breakable(PetBreaker)]
        pub async fn $name(id: u64) -> Result<String, UiError> {
            Ok(id.to_string())
        }
    };
}

with_fallback!(find, rejection);

fn cached(id: u64) -> Result<String, UiError> {
    Ok(id.to_string())
}

fn main() {
    let _ = find(1);
}
