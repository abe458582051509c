//! `#[circuit_breakable]` without a spec.
use resilient_core::circuit_breakable;
use ui_tests::UiError;

#[circuit_breakable]
pub async fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
