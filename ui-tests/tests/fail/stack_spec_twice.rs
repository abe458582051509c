// A stack holds each spec once: the same limit twice would take two places
// of one limit per request, the same retry twice would multiply attempts.
use resilient_core::layer::StackLayer;
use resilient_core::{ConcurrencyLimitSpec, RetrySpec};

#[derive(RetrySpec)]
#[spec("ui.retry.twice")]
pub struct PetRetry;

#[derive(ConcurrencyLimitSpec)]
#[spec("ui.concurrency.twice")]
pub struct PetLimit;

fn main() {
    let _stack = StackLayer::<_, u64>::new()
        .spec::<PetLimit>()
        .spec::<PetRetry>()
        .spec::<PetLimit>();
}
