//! `#[retryable(3)]`: the argument is not a type.
use resilient_core::retryable;
use ui_tests::UiError;

#[retryable(3)]
pub async fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
