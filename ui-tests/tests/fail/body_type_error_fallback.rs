//! A type error in the body of a `#[fallback]` fn is reported in the body.
use resilient_core::fallback;
use ui_tests::UiError;

#[fallback(method = "cached(id)")]
pub async fn tail(id: u64) -> Result<u64, UiError> {
    let name = id.to_string();
    Ok(name)
}

#[fallback(method = "cached(id)")]
pub async fn early_return(id: u64) -> Result<u64, UiError> {
    let name = id.to_string();
    if id == 0 {
        return Ok(name);
    }
    Ok(id)
}

#[fallback(method = "cached(id)")]
pub async fn question_mark(id: u64) -> Result<u64, UiError> {
    let parsed: Result<String, UiError> = Ok(id.to_string());
    let name = parsed?;
    Ok(name)
}

fn cached(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
