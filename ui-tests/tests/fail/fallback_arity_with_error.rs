//! `method = "cached(id)"` passes `id` and the error; the fallback takes
//! `(u64, String, UiError)`: the message says what `method` passes.
use resilient_core::fallback;
use ui_tests::UiError;

#[fallback(method = "cached(id)")]
pub async fn find(id: u64, q: String) -> Result<String, UiError> {
    Ok(format!("{q}/{id}"))
}

fn cached(id: u64, q: String, e: UiError) -> Result<String, UiError> {
    Ok(format!("{q}/{id} {e}"))
}

fn main() {}
