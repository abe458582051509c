//! `#[tokio::main]` above `#[retryable]`: tokio's attribute runs first and
//! leaves a plain fn.
use resilient_core::retryable;
use ui_tests::{UiError, UiRetry};

#[tokio::main(flavor = "current_thread")]
#[retryable(UiRetry)]
async fn main() -> Result<(), UiError> {
    Ok(())
}
