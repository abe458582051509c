//! A `ref` binding cannot be named in `method = ".."`: only plain parameter
//! names can (the message lists them).
use resilient_core::{fallback, retryable};
use ui_tests::{UiError, UiRetry};

#[fallback(method = "backup(name)")]
#[retryable(UiRetry)]
pub async fn lookup(ref name: String) -> Result<usize, UiError> {
    Ok(name.len())
}

fn backup(name: &String) -> Result<usize, UiError> {
    Ok(name.len())
}

fn main() {
    let _ = lookup(String::new());
}
