//! A plain fn that returns a boxed future, written so by the user (no
//! `#[async_trait]`): told to make it an `async fn`.
use std::future::Future;
use std::pin::Pin;

use resilient_core::retryable;
use ui_tests::{UiError, UiRetry};

#[retryable(UiRetry)]
pub fn find(id: u64) -> Pin<Box<dyn Future<Output = Result<u64, UiError>> + Send>> {
    Box::pin(async move { Ok(id) })
}

fn main() {}
