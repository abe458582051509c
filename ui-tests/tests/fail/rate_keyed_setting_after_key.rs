//! `#[rate_limited(TenantRate, key = tenant, max_keys = 10)]`: a setting of
//! the keyed instances given after the key; it belongs in the spec's config
//! section (`keys.max`).
use resilient_core::{rate_limited, RateLimiterSpec};
use ui_tests::UiError;

#[derive(RateLimiterSpec)]
#[spec("ui.ratelimiter.tenant")]
pub struct TenantRate;

#[rate_limited(TenantRate, key = tenant, max_keys = 10)]
pub async fn find(tenant: u32, id: u64) -> Result<u64, UiError> {
    Ok(id + u64::from(tenant))
}

fn main() {}
