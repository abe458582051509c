//! `#[retryable("UiRetry")]`: the spec written as a string instead of a type.
use resilient_core::retryable;
use ui_tests::UiError;

#[retryable("UiRetry")]
pub async fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
