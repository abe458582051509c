//! `method = "cachd(id)"` on a free fn: no fn `cachd` is in scope.
use resilient_core::fallback;
use ui_tests::UiError;

#[fallback(method = "cachd(id)")]
pub async fn find(id: u64) -> Result<String, UiError> {
    Ok(id.to_string())
}

pub fn cached(id: u64) -> Result<String, UiError> {
    Ok(id.to_string())
}

fn main() {}
