//! `#[hedged]` given twice on one fn.
use resilient_core::{hedged, HedgingSpec};
use ui_tests::UiError;

#[derive(HedgingSpec)]
#[spec("ui.hedging.a")]
pub struct AHedging;

#[derive(HedgingSpec)]
#[spec("ui.hedging.b")]
pub struct BHedging;

#[hedged(AHedging)]
#[hedged(BHedging)]
pub async fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
