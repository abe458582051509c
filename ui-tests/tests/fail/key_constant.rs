//! `key = 7`: a constant key is the same for every call, which is what no
//! `key` does; the error, at the constant, says to key by an argument or to
//! remove `key`.
use resilient_core::{circuit_breakable, CircuitBreakerSpec};
use ui_tests::UiError;

#[derive(CircuitBreakerSpec)]
#[spec("ui.breaker.shard")]
pub struct ShardBreaker;

#[circuit_breakable(ShardBreaker, key = 7)]
pub async fn query(shard: u32) -> Result<u32, UiError> {
    Ok(shard)
}

fn main() {}
