//! An error type the user cannot change: `String`.
use resilient_core::retryable;
use ui_tests::UiRetry;

#[retryable(UiRetry)]
pub async fn find(id: u64) -> Result<u64, String> {
    Ok(id)
}

fn main() {}
