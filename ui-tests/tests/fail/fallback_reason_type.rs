//! The fallback's last parameter takes `std::io::Error`, but the annotated
//! fn's error is `UiError`.
use resilient_core::fallback;
use ui_tests::UiError;

#[fallback(method = "cached(id)")]
pub async fn find(id: u64) -> Result<String, UiError> {
    Ok(id.to_string())
}

fn cached(id: u64, error: std::io::Error) -> Result<String, UiError> {
    Ok(format!("{id}: {error}"))
}

fn main() {}
