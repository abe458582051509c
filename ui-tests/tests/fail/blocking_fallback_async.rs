//! A blocking fn's fallback is a plain fn: an `async fn` fallback cannot be
//! awaited there.
use resilient_core::{fallback, retryable};
use ui_tests::{UiError, UiRetry};

#[fallback(method = "cached(id)")]
#[retryable(UiRetry)]
pub fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

pub async fn cached(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
