//! `#[rate_limited(ARate, BRate)]`: two specs in one keyed attribute.
use resilient_core::{rate_limited, RateLimiterSpec};
use ui_tests::UiError;

#[derive(RateLimiterSpec)]
#[spec("ui.ratelimiter.a")]
pub struct ARate;

#[derive(RateLimiterSpec)]
#[spec("ui.ratelimiter.b")]
pub struct BRate;

#[rate_limited(ARate, BRate)]
pub async fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
