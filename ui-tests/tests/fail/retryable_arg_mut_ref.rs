//! A `&mut` argument: retry runs the body again, so it cannot lend it twice.
use resilient_core::retryable;
use ui_tests::{UiError, UiRetry};

#[retryable(UiRetry)]
pub async fn bump(count: &mut u32) -> Result<u32, UiError> {
    *count += 1;
    Ok(*count)
}

fn main() {}
