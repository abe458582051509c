//! `method = "cached(id)"` names one argument, but the fallback takes two.
use resilient_core::fallback;
use ui_tests::UiError;

#[fallback(method = "cached(id)")]
pub async fn find(id: u64, tag: String) -> Result<String, UiError> {
    Ok(format!("{tag}/{id}"))
}

fn cached(id: u64, tag: String) -> Result<String, UiError> {
    Ok(format!("{tag}/{id} (cached)"))
}

fn main() {}
