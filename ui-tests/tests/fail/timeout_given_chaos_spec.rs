//! `#[timeout(PetChaos)]`: a chaos spec given to the timeout attribute.
use resilient_core::{timeout, ChaosSpec};
use ui_tests::UiError;

#[derive(ChaosSpec)]
#[spec("ui.chaos.pet")]
pub struct PetChaos;

#[timeout(PetChaos)]
pub async fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
