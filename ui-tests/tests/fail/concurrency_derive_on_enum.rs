//! `#[derive(ConcurrencyLimitSpec)]` on an enum: a spec must be a unit struct.
use resilient_core::ConcurrencyLimitSpec;

#[derive(ConcurrencyLimitSpec)]
#[spec("ui.concurrency.reviews")]
pub enum Reviews {
    Few,
    Many,
}

fn main() {}
