//! A type error in the body of a fn that returns a stream, under all six attributes a stream takes, is reported in the body.
use resilient_core::{circuit_breakable, concurrency_limit, fallback, rate_limited, retryable, timeout, CircuitBreakerSpec, ConcurrencyLimitSpec, RateLimiterSpec, TimeoutSpec};
use std::pin::Pin;

use futures_util::stream::{self, BoxStream, StreamExt};
use resilient_core::stream::Stream;
use ui_tests::{UiError, UiRetry};

#[fallback(method = "cached(id)")] #[retryable(UiRetry)] #[timeout(PetTimeout)] #[circuit_breakable(PetBreaker)] #[concurrency_limit(PetLimit)] #[rate_limited(PetRate)]
pub fn tail(id: u64) -> impl Stream<Item = Result<u64, UiError>> {
    let name = id.to_string();
    stream::iter(vec![Ok(name)])
}

#[fallback(method = "cached(id)")] #[retryable(UiRetry)] #[timeout(PetTimeout)] #[circuit_breakable(PetBreaker)] #[concurrency_limit(PetLimit)] #[rate_limited(PetRate)]
pub fn early_return(id: u64) -> Pin<Box<dyn Stream<Item = Result<u64, UiError>> + Send>> {
    let name = id.to_string();
    if id == 0 {
        return Box::pin(stream::iter(vec![Ok(name)]));
    }
    Box::pin(stream::iter(vec![Ok(id)]))
}

#[fallback(method = "cached(id)")] #[retryable(UiRetry)] #[timeout(PetTimeout)] #[circuit_breakable(PetBreaker)] #[concurrency_limit(PetLimit)] #[rate_limited(PetRate)]
pub fn boxed(id: u64) -> BoxStream<'static, Result<u64, UiError>> {
    let name = id.to_string();
    stream::iter(vec![Ok(name)]).boxed()
}

#[fallback(method = "cached(id)")] #[retryable(UiRetry)] #[timeout(PetTimeout)] #[circuit_breakable(PetBreaker)] #[concurrency_limit(PetLimit)] #[rate_limited(PetRate)]
pub fn not_a_stream(id: u64) -> impl Stream<Item = Result<u64, UiError>> {
    Ok(id)
}

fn main() {}

#[derive(CircuitBreakerSpec)]
#[spec("ui.breaker.pet")]
pub struct PetBreaker;

#[derive(ConcurrencyLimitSpec)]
#[spec("ui.limit.pet")]
pub struct PetLimit;

#[derive(RateLimiterSpec)]
#[spec("ui.rate.pet")]
pub struct PetRate;

#[derive(TimeoutSpec)]
#[spec("ui.timeout.pet")]
pub struct PetTimeout;

fn cached(id: u64) -> impl Stream<Item = Result<u64, UiError>> {
    stream::iter(vec![Ok(id)])
}
