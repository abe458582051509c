//! A resilience attribute above `#[tokio::main]` sees the `async fn` as
//! written, and tokio's attribute then runs the expanded fn on a runtime.
use resilient_core::retryable;
use ui_tests::{UiError, UiRetry};

#[retryable(UiRetry)]
#[tokio::main(flavor = "current_thread")]
async fn run(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {
    // No registry is installed: the call answers `NotConfigured` through
    // the fn's error type, without a runtime of the caller's.
    assert!(matches!(run(7), Err(UiError::Resilience(_))));
}
