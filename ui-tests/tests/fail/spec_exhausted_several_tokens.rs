//! `exhausted = last-failure`: a value of several tokens is underlined
//! whole, not at its first token.
use resilient_core::RetrySpec;

#[derive(RetrySpec)]
#[spec("ui.retry.pet", exhausted = last-failure)]
pub struct PetRetry;

fn main() {}
