//! Methods: `&self`, `self: Arc<Self>`, owned `self`, trait impls and trait
//! default methods; the returned future is `Send` when the body's is.
#![deny(warnings)]

use std::sync::Arc;
use ui_tests::{UiError, UiRetry};
use resilient_core::retryable;

#[derive(Clone)]
pub struct Client {
    base: String,
}

impl Client {
    #[retryable(UiRetry)]
    pub async fn by_ref(&self, id: u64) -> Result<String, UiError> {
        Ok(format!("{}/{id}", self.base))
    }

    #[retryable(UiRetry)]
    pub async fn by_arc(self: Arc<Self>, id: u64) -> Result<String, UiError> {
        let this = &self;
        Ok(format!("{}/{id}/{}", self.base, this.base.len()))
    }

    #[retryable(UiRetry)]
    pub async fn by_value(self) -> Result<String, UiError> {
        Ok(self.base)
    }

    #[retryable(UiRetry)]
    pub async fn generic<T: Clone + ToString + Send + Sync>(&self, value: T) -> Result<String, UiError> {
        Ok(value.to_string())
    }
}

trait Store {
    fn load(&self, id: u64) -> impl std::future::Future<Output = Result<u64, UiError>> + Send;

    #[retryable(UiRetry)]
    async fn load_default(&self, id: u64) -> Result<u64, UiError> {
        Ok(id)
    }
}

impl Store for Client {
    #[retryable(UiRetry)]
    async fn load(&self, id: u64) -> Result<u64, UiError> {
        Ok(id + self.base.len() as u64)
    }
}

fn assert_send<T: Send>(_: T) {}

fn main() {
    let client = Client { base: "http://pets".into() };
    assert_send(client.by_ref(1));
    assert_send(Arc::new(client.clone()).by_arc(1));
    assert_send(client.clone().by_value());
    assert_send(client.generic(5u8));
    assert_send(client.load(1));
}
