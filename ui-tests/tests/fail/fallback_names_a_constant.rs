//! `method` names a constant, not a fn.
use resilient_core::fallback;
use ui_tests::UiError;

#[allow(non_upper_case_globals)]
const cached: u64 = 7;

#[fallback(method = "cached()")]
pub async fn find(id: u64) -> Result<u64, UiError> {
    Ok(id + cached)
}

fn main() {}
