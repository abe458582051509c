//! A blocking fn must return a `Result` too.
use resilient_core::retryable;
use ui_tests::UiRetry;

#[retryable(UiRetry)]
pub fn find(id: u64) -> u64 {
    id
}

fn main() {}
