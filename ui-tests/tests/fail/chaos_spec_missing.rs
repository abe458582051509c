//! `#[chaos]` without a spec.
use resilient_core::chaos;
use ui_tests::UiError;

#[chaos]
pub async fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
