//! `#[chaos(PetChaos, key = host)]`: a chaos spec has one instance; `key` is
//! for breakers and limits, not a chaos option.
use resilient_core::{chaos, ChaosSpec};
use ui_tests::UiError;

#[derive(ChaosSpec)]
#[spec("ui.chaos.pet")]
pub struct PetChaos;

#[chaos(PetChaos, key = host)]
pub async fn fetch(host: &str, path: &str) -> Result<String, UiError> {
    Ok(format!("https://{host}{path}"))
}

fn main() {}
