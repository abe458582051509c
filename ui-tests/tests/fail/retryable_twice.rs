//! `#[retryable]` given twice on one fn.
use resilient_core::retryable;
use ui_tests::UiError;

#[retryable(ui_tests::UiRetry)]
#[retryable(ui_tests::UiRetry)]
pub async fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
