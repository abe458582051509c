//! `?` on an `Option` in a fn returning `Result`: rustc's error points at
//! the `?` and labels the fn's body, not the attribute.
use resilient_core::retryable;
use ui_tests::{UiError, UiRetry};

#[retryable(UiRetry)]
pub async fn find(id: u64) -> Result<u64, UiError> {
    let x: Option<u64> = Some(id);
    let y = x?;
    Ok(y)
}

fn main() {}
