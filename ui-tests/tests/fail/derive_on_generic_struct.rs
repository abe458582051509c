//! `#[derive(RetrySpec)]` on a generic struct: a spec has one shared instance,
//! so it cannot take generic parameters.
use resilient_core::RetrySpec;

#[derive(RetrySpec)]
#[spec("ui.retry.pet")]
pub struct PetRetry<const N: usize>;

fn main() {}
