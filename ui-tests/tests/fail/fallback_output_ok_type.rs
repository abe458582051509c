//! The fallback returns `Result<u32, UiError>`; the annotated fn returns
//! `Result<String, UiError>`.
use resilient_core::fallback;
use ui_tests::UiError;

#[fallback(method = "cached(id)")]
pub async fn find(id: u64) -> Result<String, UiError> {
    Ok(id.to_string())
}

fn cached(id: u64) -> Result<u32, UiError> {
    Ok(id as u32)
}

fn main() {}
