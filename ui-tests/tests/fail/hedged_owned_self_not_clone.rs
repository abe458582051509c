//! A method taking `self` by value, whose type is not `Clone`: hedging
//! needs a fresh receiver for each attempt.
use resilient_core::{hedged, HedgingSpec};
use ui_tests::UiError;

#[derive(HedgingSpec)]
#[spec("ui.hedging.pet")]
pub struct PetHedging;

pub struct Conn {
    pub sent: u32,
}

impl Conn {
    #[hedged(PetHedging)]
    pub async fn send(self) -> Result<u32, UiError> {
        Ok(self.sent)
    }
}

fn main() {}
