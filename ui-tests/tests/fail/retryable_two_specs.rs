//! `#[retryable(A, B)]`: two specs in one attribute.
use resilient_core::{retryable, RetrySpec};
use ui_tests::UiError;

#[derive(RetrySpec)]
#[spec("ui.retry.other")]
pub struct OtherRetry;

#[retryable(ui_tests::UiRetry, OtherRetry)]
pub async fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
