//! `#[tokio::test]` above `#[retryable]`: tokio's attribute runs first and
//! leaves a plain fn.
use resilient_core::retryable;
use ui_tests::{UiError, UiRetry};

#[tokio::test]
#[retryable(UiRetry)]
async fn finds_a_pet() -> Result<(), UiError> {
    Ok(())
}

fn main() {}
