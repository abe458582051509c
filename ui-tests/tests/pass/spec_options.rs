//! A spec with its own classification and the last-failure exhaustion mode.
#![deny(warnings)]

use resilient_core::{retryable, Classify, RetrySpec, Verdict};

#[derive(Debug)]
pub struct NotAnError;

impl From<resilient_core::Error> for NotAnError {
    fn from(_: resilient_core::Error) -> Self {
        NotAnError
    }
}

/// `exhausted = last_failure` boxes nothing, so the error type need not be a
/// `std::error::Error`.
#[derive(RetrySpec)]
#[spec("ui.retry.http", classify = custom, exhausted = last_failure)]
pub struct HttpRetry;

impl Classify<u16, NotAnError> for HttpRetry {
    fn classify(outcome: &Result<u16, NotAnError>) -> Verdict {
        match outcome {
            Ok(status) if *status >= 500 => Verdict::Failure,
            Ok(_) => Verdict::Success,
            Err(_) => Verdict::Ignore,
        }
    }
}

#[retryable(HttpRetry)]
pub async fn status() -> Result<u16, NotAnError> {
    Ok(200)
}

fn main() {
    let _ = status();
}
