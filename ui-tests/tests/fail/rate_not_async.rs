//! `#[rate_limited]` on a fn that is not `async`.
use resilient_core::{rate_limited, RateLimiterSpec};
use ui_tests::UiError;

#[derive(RateLimiterSpec)]
#[spec("ui.ratelimiter.pet")]
pub struct PetRate;

#[rate_limited(PetRate)]
pub fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
