//! A type error in the body of a `#[timeout]` fn is reported in the body.
use resilient_core::{timeout, TimeoutSpec};
use ui_tests::UiError;

#[timeout(PetTimeout)]
pub async fn tail(id: u64) -> Result<u64, UiError> {
    let name = id.to_string();
    Ok(name)
}

#[timeout(PetTimeout)]
pub async fn early_return(id: u64) -> Result<u64, UiError> {
    let name = id.to_string();
    if id == 0 {
        return Ok(name);
    }
    Ok(id)
}

#[timeout(PetTimeout)]
pub async fn question_mark(id: u64) -> Result<u64, UiError> {
    let parsed: Result<String, UiError> = Ok(id.to_string());
    let name = parsed?;
    Ok(name)
}

#[derive(TimeoutSpec)]
#[spec("ui.timeout.pet")]
pub struct PetTimeout;

fn main() {}
