//! `key = "host"`: a string where the key expression goes is the same for
//! every call, so every call would share one instance; the error, at the
//! string, names the unquoted form, for each attribute that takes `key`.
use resilient_core::{circuit_breakable, concurrency_limit, rate_limited, CircuitBreakerSpec, ConcurrencyLimitSpec, RateLimiterSpec};
use ui_tests::UiError;

#[derive(CircuitBreakerSpec)]
#[spec("ui.breaker.host")]
pub struct HostBreaker;

#[derive(RateLimiterSpec)]
#[spec("ui.rate.tenant")]
pub struct TenantRate;

#[derive(ConcurrencyLimitSpec)]
#[spec("ui.limit.shard")]
pub struct ShardLimit;

pub struct Request {
    pub tenant: u64,
}

#[circuit_breakable(HostBreaker, key = "host")]
pub async fn fetch(host: &str, path: &str) -> Result<String, UiError> {
    Ok(format!("https://{host}{path}"))
}

#[rate_limited(TenantRate, key = "req.tenant")]
pub fn charge(req: &Request) -> Result<u64, UiError> {
    Ok(req.tenant)
}

#[concurrency_limit(ShardLimit, key = "host:port")]
pub async fn query(shard: u32) -> Result<u32, UiError> {
    Ok(shard)
}

fn main() {}
