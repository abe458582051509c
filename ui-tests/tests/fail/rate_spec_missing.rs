//! `#[rate_limited]` without a spec.
use resilient_core::rate_limited;
use ui_tests::UiError;

#[rate_limited]
pub async fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
