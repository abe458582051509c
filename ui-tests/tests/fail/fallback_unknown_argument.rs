//! `retries = 3`: not an argument of `#[fallback]`.
use resilient_core::fallback;
use ui_tests::UiError;

#[fallback(method = "cached(id)", retries = 3)]
pub async fn find(id: u64) -> Result<String, UiError> {
    Ok(id.to_string())
}

fn cached(id: u64) -> Result<String, UiError> {
    Ok(id.to_string())
}

fn main() {}
