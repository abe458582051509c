//! `#[derive(RateLimiterSpec)]` on an enum: a spec must be a unit struct.
use resilient_core::RateLimiterSpec;

#[derive(RateLimiterSpec)]
#[spec("ui.ratelimiter.pet")]
pub enum PetRate {
    Slow,
    Fast,
}

fn main() {}
