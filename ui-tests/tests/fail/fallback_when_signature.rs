//! `when = is_failed`, where `is_failed` takes the error by value; `when`
//! needs a `fn(&UiError) -> bool`.
use resilient_core::fallback;
use ui_tests::UiError;

#[fallback(method = "cached(id)", when = is_failed)]
pub async fn find(id: u64) -> Result<String, UiError> {
    Ok(id.to_string())
}

fn cached(id: u64) -> Result<String, UiError> {
    Ok(id.to_string())
}

fn is_failed(error: UiError) -> bool {
    matches!(error, UiError::Failed)
}

fn main() {}
