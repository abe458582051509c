//! `Result<impl Display, E>`: the layers need the success type by name; the
//! mistake is reported at the `impl Trait`, not as "type annotations needed".
use resilient_core::{timeout, TimeoutSpec};
use ui_tests::UiError;

#[derive(TimeoutSpec)]
#[spec("ui.timeout")]
pub struct UiTimeout;

#[timeout(UiTimeout)]
pub async fn name(id: u64) -> Result<impl std::fmt::Display, UiError> {
    Ok(id)
}

fn main() {}
