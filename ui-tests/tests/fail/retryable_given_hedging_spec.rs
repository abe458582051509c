//! `#[retryable(PetHedging)]`: a hedging spec given to the retry attribute.
use resilient_core::{retryable, HedgingSpec};
use ui_tests::UiError;

#[derive(HedgingSpec)]
#[spec("ui.hedging.pet")]
pub struct PetHedging;

#[retryable(PetHedging)]
pub async fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
