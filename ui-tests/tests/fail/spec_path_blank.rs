//! `#[spec("")]`: the config path is blank.
use resilient_core::RetrySpec;

#[derive(RetrySpec)]
#[spec("")]
pub struct PetRetry;

fn main() {}
