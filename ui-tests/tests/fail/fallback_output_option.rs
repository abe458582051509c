//! The fallback returns `Option<String>`; the annotated fn returns
//! `Result<String, UiError>`.
use resilient_core::fallback;
use ui_tests::UiError;

#[fallback(method = "cached(id)")]
pub async fn find(id: u64) -> Result<String, UiError> {
    Ok(id.to_string())
}

fn cached(id: u64) -> Option<String> {
    Some(id.to_string())
}

fn main() {}
