//! `#[hedged("100ms")]`: a value where the spec goes.
use resilient_core::hedged;
use ui_tests::UiError;

#[hedged("100ms")]
pub async fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
