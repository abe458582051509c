//! `on = timeouts`: not a kind of failure `on` knows.
use resilient_core::fallback;
use ui_tests::UiError;

#[fallback(method = "cached(id)", on = timeouts)]
pub async fn find(id: u64) -> Result<String, UiError> {
    Ok(id.to_string())
}

fn cached(id: u64) -> Result<String, UiError> {
    Ok(id.to_string())
}

fn main() {}
