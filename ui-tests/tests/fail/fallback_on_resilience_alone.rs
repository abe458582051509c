//! `on = resilience` with no resilience attribute below the fallback: it
//! would see the body's errors only, never a resilience error, so it could
//! never be taken; the error is at `on = resilience`.
use futures_util::stream;
use resilient_core::stream::Stream;
use resilient_core::{fallback, retryable};
use ui_tests::{UiError, UiRetry};

// Alone.
#[fallback(method = "cached(id)", on = resilience)]
pub async fn find(id: u64) -> Result<String, UiError> {
    Ok(id.to_string())
}

// The retry is above the fallback, outside it: its errors never reach it.
#[retryable(UiRetry)]
#[fallback(method = "cached(id)", on = resilience)]
pub async fn find_retried(id: u64) -> Result<String, UiError> {
    Ok(id.to_string())
}

// A blocking fn.
#[fallback(on = resilience, method = "cached(id)")]
pub fn find_blocking(id: u64) -> Result<String, UiError> {
    Ok(id.to_string())
}

// A fn that returns a stream.
#[fallback(method = "replay(id)", on = resilience)]
pub fn feed(id: u64) -> impl Stream<Item = Result<u64, UiError>> {
    stream::iter(vec![Ok(id)])
}

fn replay(id: u64) -> impl Stream<Item = Result<u64, UiError>> {
    stream::iter(vec![Ok(id)])
}

fn cached(id: u64) -> Result<String, UiError> {
    Ok(id.to_string())
}

fn main() {}
