//! `#[spec("..", failure_rate_threshold = 50)]`: a breaker setting given as a
//! spec option; settings belong in the config section.
use resilient_core::CircuitBreakerSpec;

#[derive(CircuitBreakerSpec)]
#[spec("ui.breaker.pet", failure_rate_threshold = 50)]
pub struct PetBreaker;

fn main() {}
