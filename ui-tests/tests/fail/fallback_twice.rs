//! `#[fallback]` given twice on one fn.
use resilient_core::fallback;
use ui_tests::UiError;

#[fallback(method = "cached(id)")]
#[fallback(method = "cached(id)")]
pub async fn find(id: u64) -> Result<String, UiError> {
    Ok(id.to_string())
}

fn cached(id: u64) -> Result<String, UiError> {
    Ok(id.to_string())
}

fn main() {}
