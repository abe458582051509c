//! The same `#[spec]` option given twice.
use resilient_core::RetrySpec;

#[derive(RetrySpec)]
#[spec("ui.retry.pet", classify = custom, classify = all_errors)]
pub struct PetRetry;

fn main() {}
