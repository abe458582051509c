//! `#[retryable]` on a method of an `#[async_trait]` impl: `async_trait`
//! runs first and leaves a fn that returns a boxed future.
use resilient_core::retryable;
use ui_tests::{UiError, UiRetry};

#[async_trait::async_trait]
pub trait Pets {
    async fn find(&self, id: u64) -> Result<u64, UiError>;
}

pub struct Store;

#[async_trait::async_trait]
impl Pets for Store {
    #[retryable(UiRetry)]
    async fn find(&self, id: u64) -> Result<u64, UiError> {
        Ok(id)
    }
}

fn main() {}
