//! An `async fn` that returns a stream: the stream fn is a plain fn.
use futures_util::stream;
use resilient_core::retryable;
use resilient_core::stream::Stream;
use ui_tests::{UiError, UiRetry};

#[retryable(UiRetry)]
pub async fn numbers() -> impl Stream<Item = Result<u64, UiError>> {
    stream::iter((0..3).map(Ok))
}

fn main() {}
