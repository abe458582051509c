//! A type error in the body of a `#[retryable]` fn is reported in the body.
use resilient_core::retryable;
use ui_tests::{UiError, UiRetry};

#[retryable(UiRetry)]
pub async fn tail(id: u64) -> Result<u64, UiError> {
    let name = id.to_string();
    Ok(name)
}

#[retryable(UiRetry)]
pub async fn early_return(id: u64) -> Result<u64, UiError> {
    let name = id.to_string();
    if id == 0 {
        return Ok(name);
    }
    Ok(id)
}

#[retryable(UiRetry)]
pub async fn question_mark(id: u64) -> Result<u64, UiError> {
    let parsed: Result<String, UiError> = Ok(id.to_string());
    let name = parsed?;
    Ok(name)
}

fn main() {}
