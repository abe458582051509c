//! `exhausted = never`: not an exhaustion mode the derive knows.
use resilient_core::RetrySpec;

#[derive(RetrySpec)]
#[spec("ui.retry.pet", exhausted = never)]
pub struct PetRetry;

fn main() {}
