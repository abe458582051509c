//! `#[chaos(0.1)]`: a value where the spec goes.
use resilient_core::chaos;
use ui_tests::UiError;

#[chaos(0.1)]
pub async fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
