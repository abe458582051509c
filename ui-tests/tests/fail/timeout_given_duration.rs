//! A duration where `#[timeout]` takes its spec.
use resilient_core::timeout;
use std::time::Duration;
use ui_tests::UiError;

#[timeout(Duration::from_secs(2))]
pub async fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {
    let _ = Duration::ZERO;
}
