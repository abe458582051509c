//! `#[timeout(PetTimeout, key = host)]`: a timeout has one instance; `key`
//! is for breakers and limits.
use resilient_core::{timeout, TimeoutSpec};
use ui_tests::UiError;

#[derive(TimeoutSpec)]
#[spec("ui.timeout.pet")]
pub struct PetTimeout;

#[timeout(PetTimeout, key = host)]
pub async fn fetch(host: &str, path: &str) -> Result<String, UiError> {
    Ok(format!("https://{host}{path}"))
}

fn main() {}
