//! `on = resilience` with only `#[hedged]` below the fallback: a hedge
//! raises no error of its own, so the fallback could never be taken.
use resilient_core::{fallback, hedged, HedgingSpec};
use ui_tests::UiError;

#[derive(HedgingSpec)]
#[spec("ui.hedging.pet")]
pub struct PetHedging;

#[fallback(method = "cached(id)", on = resilience)]
#[hedged(PetHedging)]
pub async fn find(id: u64) -> Result<String, UiError> {
    Ok(id.to_string())
}

fn cached(id: u64) -> Result<String, UiError> {
    Ok(id.to_string())
}

fn main() {}
