//! `key = weight` where `weight: f64`: a `Display` type that is no
//! `PartitionKey`; one error, at the key, saying to wrap it in `DisplayKey`.
use resilient_core::{rate_limited, RateLimiterSpec};
use ui_tests::UiError;

#[derive(RateLimiterSpec)]
#[spec("ui.ratelimiter.weight")]
pub struct WeightRate;

#[rate_limited(WeightRate, key = weight)]
pub async fn find(weight: f64, id: u64) -> Result<u64, UiError> {
    Ok(id + weight as u64)
}

fn main() {}
