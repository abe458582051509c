//! A type error in the body of a `#[retryable]` fn that returns a stream is reported in the body.
use resilient_core::retryable;
use std::pin::Pin;

use futures_util::stream::{self, BoxStream, StreamExt};
use resilient_core::stream::Stream;
use ui_tests::{UiError, UiRetry};

#[retryable(UiRetry)]
pub fn tail(id: u64) -> impl Stream<Item = Result<u64, UiError>> {
    let name = id.to_string();
    stream::iter(vec![Ok(name)])
}

#[retryable(UiRetry)]
pub fn early_return(id: u64) -> Pin<Box<dyn Stream<Item = Result<u64, UiError>> + Send>> {
    let name = id.to_string();
    if id == 0 {
        return Box::pin(stream::iter(vec![Ok(name)]));
    }
    Box::pin(stream::iter(vec![Ok(id)]))
}

#[retryable(UiRetry)]
pub fn boxed(id: u64) -> BoxStream<'static, Result<u64, UiError>> {
    let name = id.to_string();
    stream::iter(vec![Ok(name)]).boxed()
}

#[retryable(UiRetry)]
pub fn not_a_stream(id: u64) -> impl Stream<Item = Result<u64, UiError>> {
    Ok(id)
}

fn main() {}
