//! `#[chaos]` given twice on one fn.
use resilient_core::{chaos, ChaosSpec};
use ui_tests::UiError;

#[derive(ChaosSpec)]
#[spec("ui.chaos.a")]
pub struct AChaos;

#[derive(ChaosSpec)]
#[spec("ui.chaos.b")]
pub struct BChaos;

#[chaos(AChaos)]
#[chaos(BChaos)]
pub async fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

fn main() {}
