//! A `&mut` argument: every attempt would need it at once.
use resilient_core::{hedged, HedgingSpec};
use ui_tests::UiError;

#[derive(HedgingSpec)]
#[spec("ui.hedging.pet")]
pub struct PetHedging;

#[hedged(PetHedging)]
pub async fn find(seen: &mut u32) -> Result<u32, UiError> {
    *seen += 1;
    Ok(*seen)
}

fn main() {}
