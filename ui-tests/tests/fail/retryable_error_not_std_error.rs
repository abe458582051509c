//! An error type that is not a `std::error::Error`, with a spec that gives up
//! with `resilient_core::Error::RetryExhausted` (the default exhaustion mode).
use resilient_core::retryable;
use ui_tests::UiRetry;

#[derive(Debug)]
pub struct NotAnError;

impl From<resilient_core::Error> for NotAnError {
    fn from(_: resilient_core::Error) -> Self {
        NotAnError
    }
}

#[retryable(UiRetry)]
pub async fn find(id: u64) -> Result<u64, NotAnError> {
    Ok(id)
}

fn main() {}
