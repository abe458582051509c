//! `#[timeout]` on a fn that is not `async`.
use resilient_core::{timeout, TimeoutSpec};
use ui_tests::UiError;

#[derive(TimeoutSpec)]
#[spec("ui.timeout.pet")]
pub struct PetTimeout;

#[timeout(PetTimeout)]
pub fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
