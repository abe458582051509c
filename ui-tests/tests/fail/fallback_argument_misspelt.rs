//! `metod = ..`: a typo of an argument is answered with the argument meant.
use resilient_core::fallback;
use ui_tests::UiError;

#[fallback(metod = "cached(id)")]
pub async fn find(id: u64) -> Result<String, UiError> {
    Ok(id.to_string())
}

fn cached(id: u64) -> Result<String, UiError> {
    Ok(id.to_string())
}

fn main() {}
