//! `exhausted` is a retry spec's option; a hedging spec takes `classify`.
use resilient_core::HedgingSpec;

#[derive(HedgingSpec)]
#[spec("ui.hedging.pet", exhausted = last_failure)]
pub struct PetHedging;

fn main() {}
