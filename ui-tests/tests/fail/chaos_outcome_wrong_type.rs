//! `outcome = ..` naming a fn whose output is not the annotated fn's.
use resilient_core::{chaos, ChaosSpec};
use ui_tests::UiError;

#[derive(ChaosSpec)]
#[spec("ui.chaos.pet")]
pub struct PetChaos;

fn unavailable() -> Result<String, UiError> {
    Ok("503".into())
}

#[chaos(PetChaos, outcome = unavailable)]
pub async fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
