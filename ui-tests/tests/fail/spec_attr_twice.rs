//! Two `#[spec]` attributes on one spec: a spec has exactly one config path.
use resilient_core::RetrySpec;

#[derive(RetrySpec)]
#[spec("ui.retry.pet")]
#[spec("ui.retry.pet.fast")]
pub struct PetRetry;

fn main() {}
