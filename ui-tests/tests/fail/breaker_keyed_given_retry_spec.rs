//! `#[circuit_breakable(UiRetry, key = host)]`: a retry spec with a key;
//! one error, at the spec, as without the key.
use resilient_core::circuit_breakable;
use ui_tests::UiError;

#[circuit_breakable(ui_tests::UiRetry, key = host)]
pub async fn fetch(host: &str, path: &str) -> Result<String, UiError> {
    Ok(format!("https://{host}{path}"))
}

fn main() {}
