//! `classify = "custom"`: an option value written as a string, not a bare word.
use resilient_core::RetrySpec;

#[derive(RetrySpec)]
#[spec("ui.retry.pet", classify = "custom")]
pub struct PetRetry;

fn main() {}
