//! `#[timeout]` given twice on one fn.
use resilient_core::{timeout, TimeoutSpec};
use ui_tests::UiError;

#[derive(TimeoutSpec)]
#[spec("ui.timeout.a")]
pub struct ATimeout;

#[derive(TimeoutSpec)]
#[spec("ui.timeout.b")]
pub struct BTimeout;

#[timeout(ATimeout)]
#[timeout(BTimeout)]
pub async fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
