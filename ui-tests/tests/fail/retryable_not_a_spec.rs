//! `#[retryable(NotASpec)]`: the type is not declared with
//! `#[derive(RetrySpec)]`.
use resilient_core::retryable;
use ui_tests::UiError;

pub struct NotASpec;

#[retryable(NotASpec)]
pub async fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
