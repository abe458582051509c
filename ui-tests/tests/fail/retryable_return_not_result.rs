//! `#[retryable]` on a fn returning `u32`: failures need an error type.
use resilient_core::retryable;

#[retryable(UiRetry)]
pub async fn count() -> u32 {
    1
}

fn main() {}
