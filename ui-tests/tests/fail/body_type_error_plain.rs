//! The same fns without attributes: the annotated cases' errors must read exactly as these.
// (no attribute, no import)
use ui_tests::UiError;

// (no attribute)
pub async fn tail(id: u64) -> Result<u64, UiError> {
    let name = id.to_string();
    Ok(name)
}

// (no attribute)
pub async fn early_return(id: u64) -> Result<u64, UiError> {
    let name = id.to_string();
    if id == 0 {
        return Ok(name);
    }
    Ok(id)
}

// (no attribute)
pub async fn question_mark(id: u64) -> Result<u64, UiError> {
    let parsed: Result<String, UiError> = Ok(id.to_string());
    let name = parsed?;
    Ok(name)
}

fn main() {}
