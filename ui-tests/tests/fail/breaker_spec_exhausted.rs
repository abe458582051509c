//! `#[spec("..", exhausted = last_failure)]` on a circuit breaker spec: the
//! exhaustion mode is a retry option; a breaker never gives up on attempts.
use resilient_core::CircuitBreakerSpec;

#[derive(CircuitBreakerSpec)]
#[spec("ui.breaker.pet", exhausted = last_failure)]
pub struct PetBreaker;

fn main() {}
