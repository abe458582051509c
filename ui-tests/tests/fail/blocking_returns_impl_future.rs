//! A plain fn that returns a future: told to write it as an `async fn`
//! (a blocking fn returns its `Result`).
use std::future::Future;

use resilient_core::retryable;
use ui_tests::{UiError, UiRetry};

#[retryable(UiRetry)]
pub fn find(id: u64) -> impl Future<Output = Result<u64, UiError>> {
    async move { Ok(id) }
}

fn main() {}
