//! `#[spec()]`: empty parentheses, no config path.
use resilient_core::RetrySpec;

#[derive(RetrySpec)]
#[spec()]
pub struct PetRetry;

fn main() {}
