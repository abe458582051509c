//! `#[fallback("cached(id)")]`: the reference must be given as `method = ..`.
use resilient_core::fallback;
use ui_tests::UiError;

#[fallback("cached(id)")]
pub async fn find(id: u64) -> Result<String, UiError> {
    Ok(id.to_string())
}

fn cached(id: u64) -> Result<String, UiError> {
    Ok(id.to_string())
}

fn main() {}
