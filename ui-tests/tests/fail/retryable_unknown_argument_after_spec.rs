//! `#[retryable(ui_tests::UiRetry, attempts = 3)]`: a setting given as an attribute
//! argument; settings belong in the spec's config section.
use resilient_core::retryable;
use ui_tests::UiError;

#[retryable(ui_tests::UiRetry, attempts = 3)]
pub async fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
