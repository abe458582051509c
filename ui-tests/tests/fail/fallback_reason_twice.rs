//! The fallback takes the error twice: `(id, UiError, UiError)`; only one
//! last parameter may take it.
use resilient_core::fallback;
use ui_tests::UiError;

#[fallback(method = "cached(id)")]
pub async fn find(id: u64) -> Result<String, UiError> {
    Ok(id.to_string())
}

fn cached(id: u64, first: UiError, second: UiError) -> Result<String, UiError> {
    Ok(format!("{id}: {first} {second}"))
}

fn main() {}
