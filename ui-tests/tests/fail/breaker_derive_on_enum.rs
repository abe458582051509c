//! `#[derive(CircuitBreakerSpec)]` on an enum: a spec must be a unit struct.
use resilient_core::CircuitBreakerSpec;

#[derive(CircuitBreakerSpec)]
#[spec("ui.breaker.pet")]
pub enum PetBreaker {
    Strict,
    Lenient,
}

fn main() {}
