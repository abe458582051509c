//! `on = rejection` with no breaker, rate limiter, concurrency limit or
//! retry below the fallback, and `on = timeout` with no `#[timeout]` below it:
//! neither fallback could ever be taken; each error is at its `on = ..`.
use resilient_core::{fallback, retryable, timeout, TimeoutSpec};
use ui_tests::{UiError, UiRetry};

#[derive(TimeoutSpec)]
#[spec("ui.timeout.pet")]
pub struct PetTimeout;

#[fallback(method = "cached(id)", on = rejection)]
#[timeout(PetTimeout)]
pub async fn find(id: u64) -> Result<String, UiError> {
    Ok(id.to_string())
}

#[fallback(method = "cached(id)", on = timeout)]
#[retryable(UiRetry)]
pub async fn find_retried(id: u64) -> Result<String, UiError> {
    Ok(id.to_string())
}

fn cached(id: u64) -> Result<String, UiError> {
    Ok(id.to_string())
}

fn main() {}
