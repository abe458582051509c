//! A type error in the body of a `#[concurrency_limit]` fn is reported in the body.
use resilient_core::{concurrency_limit, ConcurrencyLimitSpec};
use ui_tests::UiError;

#[concurrency_limit(PetLimit)]
pub async fn tail(id: u64) -> Result<u64, UiError> {
    let name = id.to_string();
    Ok(name)
}

#[concurrency_limit(PetLimit)]
pub async fn early_return(id: u64) -> Result<u64, UiError> {
    let name = id.to_string();
    if id == 0 {
        return Ok(name);
    }
    Ok(id)
}

#[concurrency_limit(PetLimit)]
pub async fn question_mark(id: u64) -> Result<u64, UiError> {
    let parsed: Result<String, UiError> = Ok(id.to_string());
    let name = parsed?;
    Ok(name)
}

#[derive(ConcurrencyLimitSpec)]
#[spec("ui.limit.pet")]
pub struct PetLimit;

fn main() {}
