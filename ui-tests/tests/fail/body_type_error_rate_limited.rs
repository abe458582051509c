//! A type error in the body of a `#[rate_limited]` fn is reported in the body.
use resilient_core::{rate_limited, RateLimiterSpec};
use ui_tests::UiError;

#[rate_limited(PetRate)]
pub async fn tail(id: u64) -> Result<u64, UiError> {
    let name = id.to_string();
    Ok(name)
}

#[rate_limited(PetRate)]
pub async fn early_return(id: u64) -> Result<u64, UiError> {
    let name = id.to_string();
    if id == 0 {
        return Ok(name);
    }
    Ok(id)
}

#[rate_limited(PetRate)]
pub async fn question_mark(id: u64) -> Result<u64, UiError> {
    let parsed: Result<String, UiError> = Ok(id.to_string());
    let name = parsed?;
    Ok(name)
}

#[derive(RateLimiterSpec)]
#[spec("ui.rate.pet")]
pub struct PetRate;

fn main() {}
