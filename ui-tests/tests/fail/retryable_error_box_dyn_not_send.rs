//! `Box<dyn std::error::Error>`: `RetryExhausted` keeps the last failure as a
//! `Send + Sync` source; one error says so, not one each for `Send`, `Sync`
//! and `Sized`.
use resilient_core::retryable;
use ui_tests::UiRetry;

#[retryable(UiRetry)]
pub async fn find(id: u64) -> Result<u64, Box<dyn std::error::Error>> {
    Ok(id)
}

fn main() {}
