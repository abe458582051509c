//! `#[spec("..", classify = custom)]` on a concurrency limit spec: a limit does
//! not classify outcomes, so the option applies to retry and breaker specs only.
use resilient_core::ConcurrencyLimitSpec;

#[derive(ConcurrencyLimitSpec)]
#[spec("ui.concurrency.reviews", classify = custom)]
pub struct Reviews;

fn main() {}
