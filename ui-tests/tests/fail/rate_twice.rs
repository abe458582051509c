//! `#[rate_limited]` given twice on one fn.
use resilient_core::{rate_limited, RateLimiterSpec};
use ui_tests::UiError;

#[derive(RateLimiterSpec)]
#[spec("ui.ratelimiter.a")]
pub struct ARate;

#[derive(RateLimiterSpec)]
#[spec("ui.ratelimiter.b")]
pub struct BRate;

#[rate_limited(ARate)]
#[rate_limited(BRate)]
pub async fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
