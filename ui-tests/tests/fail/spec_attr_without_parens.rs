//! `#[spec]` without the config path in parentheses.
use resilient_core::RetrySpec;

#[derive(RetrySpec)]
#[spec]
pub struct PetRetry;

fn main() {}
