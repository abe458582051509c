//! `classify` on a chaos spec, which does not classify.
use resilient_core::ChaosSpec;

#[derive(ChaosSpec)]
#[spec("ui.chaos.pet", classify = custom)]
pub struct PetChaos;

fn main() {}
