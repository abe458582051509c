//! Under retry, an owned receiver is cloned for each attempt and `self` in
//! the body renamed; a `use` of a module's `self` in the body stays as it is.
use resilient_core::retryable;
use ui_tests::{UiError, UiRetry};

#[derive(Clone)]
pub struct Client {
    pub base: u64,
}

impl Client {
    #[retryable(UiRetry)]
    pub async fn write(self, id: u64) -> Result<u64, UiError> {
        use std::io::{self, Write};
        let mut sink = io::sink();
        sink.write_all(b"x").map_err(|_| UiError::Failed)?;
        Ok(self.base + id)
    }
}

fn main() {}
