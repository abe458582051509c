//! The fallback of a stream fn returns a stream of the fn's items, not one
//! answer.
use futures_util::stream;
use resilient_core::stream::Stream;
use resilient_core::{fallback, retryable};
use ui_tests::{UiError, UiRetry};

#[fallback(method = "spare(from)")]
#[retryable(UiRetry)]
pub fn numbers(from: u64) -> impl Stream<Item = Result<u64, UiError>> {
    stream::iter((from..from + 3).map(Ok))
}

pub fn spare(from: u64) -> Result<u64, UiError> {
    Ok(from)
}

fn main() {}
