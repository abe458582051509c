//! An owned argument that is not `Clone`: hedging cannot pass it to a
//! second attempt.
use resilient_core::{hedged, HedgingSpec};
use ui_tests::UiError;

#[derive(HedgingSpec)]
#[spec("ui.hedging.pet")]
pub struct PetHedging;

pub struct Query {
    pub id: u64,
}

#[hedged(PetHedging)]
pub async fn find(query: Query) -> Result<u64, UiError> {
    Ok(query.id)
}

fn main() {}
