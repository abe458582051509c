//! `#[concurrency_limit(PetTimeout)]`: a timeout spec given to the concurrency
//! limit attribute, which needs a `#[derive(ConcurrencyLimitSpec)]` type.
use resilient_core::{concurrency_limit, TimeoutSpec};
use ui_tests::UiError;

#[derive(TimeoutSpec)]
#[spec("ui.timeout.pet")]
pub struct PetTimeout;

#[concurrency_limit(PetTimeout)]
pub async fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
