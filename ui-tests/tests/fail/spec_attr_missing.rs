//! `#[derive(RetrySpec)]` without `#[spec("..")]`: the spec has no config path.
use resilient_core::RetrySpec;

#[derive(RetrySpec)]
pub struct PetRetry;

fn main() {}
