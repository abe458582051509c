//! A `&mut` inside a tuple argument: retry cannot clone it for another
//! attempt, so it is rejected at the `&mut`, not with a `Clone` error at the
//! attribute.
use resilient_core::retryable;
use ui_tests::{UiError, UiRetry};

#[retryable(UiRetry)]
pub async fn bump((count, step): (&mut u32, u32)) -> Result<u32, UiError> {
    *count += step;
    Ok(*count)
}

fn main() {}
