//! `classify = sometimes`: not a classification the derive knows.
use resilient_core::RetrySpec;

#[derive(RetrySpec)]
#[spec("ui.retry.pet", classify = sometimes)]
pub struct PetRetry;

fn main() {}
