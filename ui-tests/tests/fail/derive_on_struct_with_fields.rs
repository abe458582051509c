//! `#[derive(RetrySpec)]` on a struct with named fields: a spec must be a unit
//! struct; its settings belong in the config section.
use resilient_core::RetrySpec;

#[derive(RetrySpec)]
#[spec("ui.retry.pet")]
pub struct PetRetry {
    pub attempts: u32,
}

fn main() {}
