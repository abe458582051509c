//! `#[spec("Resilient.Retry.PetStore")]`: environment overrides reach only
//! lower-case keys, so the path must be snake_case (the fix is suggested).
use resilient_core::RetrySpec;

#[derive(RetrySpec)]
#[spec("Resilient.Retry.PetStore")]
pub struct PetRetry;

fn main() {}
