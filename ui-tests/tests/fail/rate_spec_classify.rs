//! `#[spec("..", classify = custom)]` on a rate limiter spec: a rate limiter
//! does not classify outcomes, so the option applies to retry and breaker
//! specs only.
use resilient_core::RateLimiterSpec;

#[derive(RateLimiterSpec)]
#[spec("ui.ratelimiter.pet", classify = custom)]
pub struct PetRate;

fn main() {}
