//! `clasify = custom`: a typo of an option is answered with the option meant.
use resilient_core::RetrySpec;

#[derive(RetrySpec)]
#[spec("ui.retry.pet", clasify = custom)]
pub struct PetRetry;

fn main() {}
