//! The same stream fns without attributes: the annotated cases' errors must read exactly as these.
// (no attribute, no import)
use std::pin::Pin;

use futures_util::stream::{self, BoxStream, StreamExt};
use resilient_core::stream::Stream;
use ui_tests::UiError;

// (no attribute)
pub fn tail(id: u64) -> impl Stream<Item = Result<u64, UiError>> {
    let name = id.to_string();
    stream::iter(vec![Ok(name)])
}

// (no attribute)
pub fn early_return(id: u64) -> Pin<Box<dyn Stream<Item = Result<u64, UiError>> + Send>> {
    let name = id.to_string();
    if id == 0 {
        return Box::pin(stream::iter(vec![Ok(name)]));
    }
    Box::pin(stream::iter(vec![Ok(id)]))
}

// (no attribute)
pub fn boxed(id: u64) -> BoxStream<'static, Result<u64, UiError>> {
    let name = id.to_string();
    stream::iter(vec![Ok(name)]).boxed()
}

// (no attribute)
pub fn not_a_stream(id: u64) -> impl Stream<Item = Result<u64, UiError>> {
    Ok(id)
}

fn main() {}
