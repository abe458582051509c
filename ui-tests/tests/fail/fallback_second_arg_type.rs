//! The fallback's second parameter differs from the argument `method`
//! passes there: the message names parameter 2.
use resilient_core::fallback;
use ui_tests::UiError;

#[fallback(method = "cached(id, tag)")]
pub async fn find(id: u64, tag: String) -> Result<String, UiError> {
    Ok(format!("{tag}/{id}"))
}

fn cached(id: u64, tag: u32) -> Result<String, UiError> {
    Ok(format!("{tag}/{id} (cached)"))
}

fn main() {}
