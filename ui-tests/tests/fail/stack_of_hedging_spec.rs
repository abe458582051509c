// A hedging spec cannot be part of a stack: the error says so and what to
// use, at the spec.
use resilient_core::layer::StackLayer;
use resilient_core::{CircuitBreakerSpec, HedgingSpec};

#[derive(CircuitBreakerSpec)]
#[spec("ui.circuitbreaker.stack")]
pub struct PetBreaker;

#[derive(HedgingSpec)]
#[spec("ui.hedging.stack")]
pub struct PetHedging;

fn main() {
    let _stack = StackLayer::<_, u64>::new()
        .spec::<PetBreaker>()
        .spec::<PetHedging>();
}
