//! `on = "any"`: a string where `on` takes a word; the message lists the
//! accepted words.
use resilient_core::fallback;
use ui_tests::UiError;

#[fallback(on = "any", method = "cached(id)")]
pub async fn find(id: u64) -> Result<String, UiError> {
    Ok(id.to_string())
}

fn cached(id: u64) -> Result<String, UiError> {
    Ok(id.to_string())
}

fn main() {}
