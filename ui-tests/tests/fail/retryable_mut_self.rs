//! A method taking `&mut self`: retry runs the body again, so it cannot lend
//! `self` mutably twice.
use resilient_core::retryable;
use ui_tests::{UiError, UiRetry};

pub struct Counter {
    pub count: u32,
}

impl Counter {
    #[retryable(UiRetry)]
    pub async fn bump(&mut self) -> Result<u32, UiError> {
        self.count += 1;
        Ok(self.count)
    }
}

fn main() {}
