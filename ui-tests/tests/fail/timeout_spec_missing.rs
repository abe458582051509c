//! `#[timeout]` without a spec.
use resilient_core::timeout;
use ui_tests::UiError;

#[timeout]
pub async fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
