//! `#[derive(RetrySpec)]` on a union: a spec must be a unit struct.
use resilient_core::RetrySpec;

#[derive(RetrySpec)]
#[spec("ui.retry.pet")]
pub union PetRetry {
    pub attempts: u32,
}

fn main() {}
