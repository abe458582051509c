//! `#[retryable]` on a struct instead of an `async fn`.
use resilient_core::retryable;

#[retryable(ui_tests::UiRetry)]
pub struct Client;

fn main() {}
