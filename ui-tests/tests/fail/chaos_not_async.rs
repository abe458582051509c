//! `#[chaos]` on a fn that is not `async`.
use resilient_core::{chaos, ChaosSpec};
use ui_tests::UiError;

#[derive(ChaosSpec)]
#[spec("ui.chaos.pet")]
pub struct PetChaos;

#[chaos(PetChaos)]
pub fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
