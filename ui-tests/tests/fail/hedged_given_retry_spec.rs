//! `#[hedged(UiRetry)]`: a retry spec given to the hedging attribute, which
//! needs a `#[derive(HedgingSpec)]` type.
use resilient_core::hedged;
use ui_tests::{UiError, UiRetry};

#[hedged(UiRetry)]
pub async fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
