//! An error type the user cannot change: `std::io::Error`.
use resilient_core::retryable;
use ui_tests::UiRetry;

#[retryable(UiRetry)]
pub async fn read(id: u64) -> std::io::Result<u64> {
    Ok(id)
}

fn main() {}
