//! `on = timeout` and `when = ..` both given; a fallback takes one filter.
use resilient_core::fallback;
use ui_tests::UiError;

#[fallback(method = "cached(id)", on = timeout, when = is_failed)]
pub async fn find(id: u64) -> Result<String, UiError> {
    Ok(id.to_string())
}

fn cached(id: u64) -> Result<String, UiError> {
    Ok(id.to_string())
}

fn is_failed(error: &UiError) -> bool {
    matches!(error, UiError::Failed)
}

fn main() {}
