//! `#[retryable]` on a fn without a return type: failures need an error type.
use resilient_core::retryable;

#[retryable(UiRetry)]
pub async fn ping() {}

fn main() {}
