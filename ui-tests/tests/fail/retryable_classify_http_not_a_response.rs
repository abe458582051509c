//! `classify = http` on a fn that returns no HTTP response.
use resilient_core::{retryable, RetrySpec};
use ui_tests::UiError;

#[derive(RetrySpec)]
#[spec("ui.retry.http", classify = http)]
pub struct HttpRetry;

#[retryable(HttpRetry)]
pub async fn status() -> Result<u16, UiError> {
    Ok(200)
}

fn main() {}
