//! `#[timeout(UiRetry)]`: a retry spec given to the timeout attribute, which
//! needs a `#[derive(TimeoutSpec)]` type.
use resilient_core::timeout;
use ui_tests::{UiError, UiRetry};

#[timeout(UiRetry)]
pub async fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
