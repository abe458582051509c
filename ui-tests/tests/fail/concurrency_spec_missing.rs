//! `#[concurrency_limit]` without a spec.
use resilient_core::concurrency_limit;
use ui_tests::UiError;

#[concurrency_limit]
pub async fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
