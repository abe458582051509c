//! `#[retryable(key = host)]`: a key, where the spec goes, on an attribute
//! that takes none; the error says which attributes take `key`.
use resilient_core::retryable;
use ui_tests::UiError;

#[retryable(key = host)]
pub async fn fetch(host: String, path: String) -> Result<String, UiError> {
    Ok(format!("https://{host}{path}"))
}

fn main() {}
