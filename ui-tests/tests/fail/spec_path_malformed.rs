//! `#[spec("resilient..pet")]`: the config path has an empty segment.
use resilient_core::RetrySpec;

#[derive(RetrySpec)]
#[spec("resilient..pet")]
pub struct PetRetry;

fn main() {}
