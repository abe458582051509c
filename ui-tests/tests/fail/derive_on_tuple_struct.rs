//! `#[derive(RetrySpec)]` on a tuple struct: a spec must be a unit struct.
use resilient_core::RetrySpec;

#[derive(RetrySpec)]
#[spec("ui.retry.pet")]
pub struct PetRetry(pub u32);

fn main() {}
