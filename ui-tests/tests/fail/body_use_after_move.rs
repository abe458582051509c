//! A value used after a move in the body: rustc names the variable, as
//! without the attribute.
use resilient_core::{timeout, TimeoutSpec};
use ui_tests::UiError;

#[derive(TimeoutSpec)]
#[spec("ui.timeout.pet")]
pub struct PetTimeout;

#[timeout(PetTimeout)]
pub async fn moved(id: u64, name: String) -> Result<u64, UiError> {
    let a = name;
    let b = name;
    Ok(id + (a.len() + b.len()) as u64)
}

fn main() {}
