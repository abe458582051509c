//! `#[fallback(on = timeout)]`: no `method` naming the fallback.
use resilient_core::fallback;
use ui_tests::UiError;

#[fallback(on = timeout)]
pub async fn find(id: u64) -> Result<String, UiError> {
    Ok(id.to_string())
}

fn main() {}
