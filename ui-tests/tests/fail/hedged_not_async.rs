//! `#[hedged]` on a fn that is not `async`.
use resilient_core::{hedged, HedgingSpec};
use ui_tests::UiError;

#[derive(HedgingSpec)]
#[spec("ui.hedging.pet")]
pub struct PetHedging;

#[hedged(PetHedging)]
pub fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
