//! `#[spec("..", attempts = 3)]`: a setting given as a spec option; settings
//! belong in the config section.
use resilient_core::RetrySpec;

#[derive(RetrySpec)]
#[spec("ui.retry.pet", attempts = 3)]
pub struct PetRetry;

fn main() {}
