//! `#[retryable(attempts = 3)]`: a setting given instead of the spec type.
use resilient_core::retryable;
use ui_tests::UiError;

#[retryable(attempts = 3)]
pub async fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
