//! `#[chaos(UiRetry)]`: a retry spec given to the chaos attribute, which
//! needs a `#[derive(ChaosSpec)]` type.
use resilient_core::chaos;
use ui_tests::{UiError, UiRetry};

#[chaos(UiRetry)]
pub async fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
