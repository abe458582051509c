//! A `classify = custom` spec used with a result type it has no `Classify`
//! implementation for.
use resilient_core::{retryable, RetrySpec};
use ui_tests::UiError;

#[derive(RetrySpec)]
#[spec("ui.retry.http", classify = custom)]
pub struct HttpRetry;

#[retryable(HttpRetry)]
pub async fn status() -> Result<u16, UiError> {
    Ok(200)
}

fn main() {}
