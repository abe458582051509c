//! `#[chaos(PetChaos, error_rate = 0.1)]`: a setting written after the spec.
use resilient_core::{chaos, ChaosSpec};
use ui_tests::UiError;

#[derive(ChaosSpec)]
#[spec("ui.chaos.pet")]
pub struct PetChaos;

#[chaos(PetChaos, error_rate = 0.1)]
pub async fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
