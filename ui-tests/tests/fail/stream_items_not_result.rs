//! A stream under the attributes must yield `Result`s.
use futures_util::stream;
use resilient_core::retryable;
use resilient_core::stream::Stream;
use ui_tests::UiRetry;

#[retryable(UiRetry)]
pub fn numbers() -> impl Stream<Item = u64> {
    stream::iter(0..3)
}

fn main() {}
