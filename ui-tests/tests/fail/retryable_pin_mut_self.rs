//! A method taking `self: Pin<&mut Self>`: retry runs the body again, so it
//! cannot lend `self` mutably twice.
use std::pin::Pin;

use resilient_core::retryable;
use ui_tests::{UiError, UiRetry};

pub struct Conn {
    pub sent: u32,
}

impl Conn {
    #[retryable(UiRetry)]
    pub async fn send(self: Pin<&mut Self>) -> Result<u32, UiError> {
        Ok(self.sent)
    }
}

fn main() {}
