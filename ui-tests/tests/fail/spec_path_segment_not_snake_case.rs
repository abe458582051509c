//! A segment with a character no environment variable can spell.
use resilient_core::RetrySpec;

#[derive(RetrySpec)]
#[spec("resilient.retry.pet store")]
pub struct PetRetry;

fn main() {}
