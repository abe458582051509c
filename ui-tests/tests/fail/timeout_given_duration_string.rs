//! A duration string where `#[timeout]` takes its spec.
use resilient_core::timeout;
use ui_tests::UiError;

#[timeout("500ms")]
pub async fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
