//! `#[retryable(PetRetry, key = host)]`: a retry spec has one instance;
//! `key` is for breakers and limits.
use resilient_core::{retryable, RetrySpec};
use ui_tests::UiError;

#[derive(RetrySpec)]
#[spec("ui.retry.pet")]
pub struct PetRetry;

#[retryable(PetRetry, key = host)]
pub async fn fetch(host: String, path: String) -> Result<String, UiError> {
    Ok(format!("https://{host}{path}"))
}

fn main() {}
