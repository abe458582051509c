//! `#[retryable]` without a spec.
use resilient_core::retryable;
use ui_tests::UiError;

#[retryable]
pub async fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
