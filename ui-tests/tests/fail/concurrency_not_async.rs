//! `#[concurrency_limit]` on a fn that is not `async`.
use resilient_core::{concurrency_limit, ConcurrencyLimitSpec};
use ui_tests::UiError;

#[derive(ConcurrencyLimitSpec)]
#[spec("ui.concurrency.pet")]
pub struct Reviews;

#[concurrency_limit(Reviews)]
pub fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
