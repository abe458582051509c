//! `#[spec(resilient.retry.pet)]`: the config path is written without quotes.
use resilient_core::RetrySpec;

#[derive(RetrySpec)]
#[spec(resilient.retry.pet)]
pub struct PetRetry;

fn main() {}
