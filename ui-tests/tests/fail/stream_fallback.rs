//! `#[fallback]` does not take a stream (yet): an error at its attribute
//! that says what to do instead; the `#[timeout]` beside it is fine.
use futures_util::stream;
use resilient_core::stream::Stream;
use resilient_core::{fallback, retryable, timeout, TimeoutSpec};
use ui_tests::{UiError, UiRetry};

#[derive(TimeoutSpec)]
#[spec("ui.timeout.feed")]
pub struct FeedTimeout;

#[fallback(method = "spare()")]
#[timeout(FeedTimeout)]
#[retryable(UiRetry)]
pub fn numbers() -> impl Stream<Item = Result<u64, UiError>> {
    stream::iter((0..3).map(Ok))
}

pub fn spare() -> impl Stream<Item = Result<u64, UiError>> {
    stream::iter((0..3).map(Ok))
}

fn main() {}
