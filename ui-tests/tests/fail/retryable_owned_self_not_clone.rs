//! A method taking `self` by value, whose type is not `Clone`: retry needs
//! a fresh receiver for each attempt.
use resilient_core::retryable;
use ui_tests::{UiError, UiRetry};

pub struct Conn {
    pub sent: u32,
}

impl Conn {
    #[retryable(UiRetry)]
    pub async fn send(self) -> Result<u32, UiError> {
        Ok(self.sent)
    }
}

fn main() {}
