//! `method = "cached("`: the fallback reference's parentheses are not closed.
use resilient_core::fallback;
use ui_tests::UiError;

#[fallback(method = "cached(")]
pub async fn find(id: u64) -> Result<String, UiError> {
    Ok(id.to_string())
}

fn main() {}
