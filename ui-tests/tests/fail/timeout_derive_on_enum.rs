//! `#[derive(TimeoutSpec)]` on an enum: a spec must be a unit struct.
use resilient_core::TimeoutSpec;

#[derive(TimeoutSpec)]
#[spec("ui.timeout.pet")]
pub enum PetTimeout {
    Short,
    Long,
}

fn main() {}
