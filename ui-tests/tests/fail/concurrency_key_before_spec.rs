//! `#[concurrency_limit(key = shard, ShardLimit)]`: the key written before
//! the spec.
use resilient_core::{concurrency_limit, ConcurrencyLimitSpec};
use ui_tests::UiError;

#[derive(ConcurrencyLimitSpec)]
#[spec("ui.concurrency.shard")]
pub struct ShardLimit;

#[concurrency_limit(key = shard, ShardLimit)]
pub async fn write(shard: u16, id: u64) -> Result<u64, UiError> {
    Ok(id + u64::from(shard))
}

fn main() {}
