//! An annotated fn's future is `Send` whenever its body's is, even when the
//! fn's success or error type is not `Send`: no layer keeps the outcome, or
//! the fn's error, across an await.
use std::error::Error as StdError;
use std::rc::Rc;

use resilient_core::{
    circuit_breakable, concurrency_limit, fallback, rate_limited, retryable, timeout,
    CircuitBreakerSpec, ConcurrencyLimitSpec, RateLimiterSpec, RetrySpec, TimeoutSpec,
};

#[derive(RetrySpec)]
#[spec("ui.send.retry", exhausted = last_failure)]
pub struct LastFailure;

#[derive(CircuitBreakerSpec)]
#[spec("ui.send.breaker")]
pub struct Breaker;

#[derive(RateLimiterSpec)]
#[spec("ui.send.rate")]
pub struct Rate;

#[derive(ConcurrencyLimitSpec)]
#[spec("ui.send.limit")]
pub struct Limit;

#[derive(TimeoutSpec)]
#[spec("ui.send.timeout")]
pub struct Timeout;

async fn dependency() {}

#[retryable(LastFailure)]
#[circuit_breakable(Breaker)]
#[rate_limited(Rate)]
#[concurrency_limit(Limit)]
#[timeout(Timeout)]
pub async fn boxed_error(id: u32) -> Result<u32, Box<dyn StdError>> {
    dependency().await;
    Ok(id)
}

#[circuit_breakable(Breaker)]
pub async fn breaker_boxed_error(id: u32) -> Result<u32, Box<dyn StdError>> {
    dependency().await;
    Ok(id)
}

#[concurrency_limit(Limit)]
pub async fn limit_boxed_error(id: u32) -> Result<u32, Box<dyn StdError>> {
    dependency().await;
    Ok(id)
}

#[rate_limited(Rate)]
pub async fn rate_boxed_error(id: u32) -> Result<u32, Box<dyn StdError>> {
    dependency().await;
    Ok(id)
}

// A sync fallback's answer is not awaited, and an async one's future is all
// the fn's future holds across its await.
#[fallback(method = "cached(id)")]
#[retryable(LastFailure)]
#[timeout(Timeout)]
pub async fn fallback_boxed_error(id: u32) -> Result<u32, Box<dyn StdError>> {
    dependency().await;
    Ok(id)
}

fn cached(id: u32) -> Result<u32, Box<dyn StdError>> {
    Ok(id)
}

#[fallback(method = "fetched(id)")]
#[circuit_breakable(Breaker)]
pub async fn async_fallback_boxed_error(id: u32) -> Result<u32, Box<dyn StdError>> {
    dependency().await;
    Ok(id)
}

#[timeout(Timeout)]
#[fallback(method = "fetched(id)")]
#[retryable(LastFailure)]
pub async fn timed_async_fallback_boxed_error(id: u32) -> Result<u32, Box<dyn StdError>> {
    dependency().await;
    Ok(id)
}

async fn fetched(id: u32) -> Result<u32, Box<dyn StdError>> {
    dependency().await;
    Ok(id)
}

#[retryable(ui_tests::UiRetry)]
pub async fn rc_value(id: u32) -> Result<Rc<u32>, ui_tests::UiError> {
    dependency().await;
    Ok(Rc::new(id))
}

fn assert_send<T: Send>(_: T) {}

fn main() {
    assert_send(boxed_error(1));
    assert_send(breaker_boxed_error(1));
    assert_send(limit_boxed_error(1));
    assert_send(rate_boxed_error(1));
    assert_send(fallback_boxed_error(1));
    assert_send(async_fallback_boxed_error(1));
    assert_send(timed_async_fallback_boxed_error(1));
    assert_send(rc_value(1));
}
