//! `#[concurrency_limit]` given twice on one fn.
use resilient_core::{concurrency_limit, ConcurrencyLimitSpec};
use ui_tests::UiError;

#[derive(ConcurrencyLimitSpec)]
#[spec("ui.concurrency.a")]
pub struct ALimit;

#[derive(ConcurrencyLimitSpec)]
#[spec("ui.concurrency.b")]
pub struct BLimit;

#[concurrency_limit(ALimit)]
#[concurrency_limit(BLimit)]
pub async fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
