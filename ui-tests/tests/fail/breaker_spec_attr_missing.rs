//! `#[derive(CircuitBreakerSpec)]` without `#[spec("..")]`: the spec has no
//! config path.
use resilient_core::CircuitBreakerSpec;

#[derive(CircuitBreakerSpec)]
pub struct PetBreaker;

fn main() {}
