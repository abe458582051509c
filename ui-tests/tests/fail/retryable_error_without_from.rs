//! An error type without `From<resilient_core::Error>`: it cannot carry a
//! resilience failure.
use resilient_core::retryable;
use ui_tests::UiRetry;

#[derive(Debug, thiserror::Error)]
#[error("failed")]
pub struct PetError;

#[retryable(UiRetry)]
pub async fn find(id: u64) -> Result<u64, PetError> {
    Ok(id)
}

fn main() {}
