//! `method = "cached(id)"` passes `id: u64`, but the fallback takes a `String`.
use resilient_core::fallback;
use ui_tests::UiError;

#[fallback(method = "cached(id)")]
pub async fn find(id: u64) -> Result<String, UiError> {
    Ok(id.to_string())
}

fn cached(id: String) -> Result<String, UiError> {
    Ok(id)
}

fn main() {}
