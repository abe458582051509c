//! `#[derive(RetrySpec)]` on an enum: a spec must be a unit struct.
use resilient_core::RetrySpec;

#[derive(RetrySpec)]
#[spec("ui.retry.pet")]
pub enum PetRetry {
    Fast,
    Slow,
}

fn main() {}
