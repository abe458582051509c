//! `method: ".."`: a slip in the syntax, answered with what the key takes
//! rather than syn's "expected `,`".
use resilient_core::fallback;
use ui_tests::UiError;

#[fallback(method: "cached(id)")]
pub async fn find(id: u64) -> Result<String, UiError> {
    Ok(id.to_string())
}

fn cached(id: u64) -> Result<String, UiError> {
    Ok(id.to_string())
}

fn main() {}
