//! `#[spec("..", classify = custom)]` on a timeout spec: a timeout does not
//! classify outcomes, so the option applies to retry and breaker specs only.
use resilient_core::TimeoutSpec;

#[derive(TimeoutSpec)]
#[spec("ui.timeout.pet", classify = custom)]
pub struct PetTimeout;

fn main() {}
