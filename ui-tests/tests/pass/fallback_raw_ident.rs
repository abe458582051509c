//! A raw-identifier parameter named in `method`.
use resilient_core::fallback;
use ui_tests::UiError;

#[fallback(method = "backup(r#type)")]
pub async fn lookup(r#type: u8) -> Result<u8, UiError> {
    Ok(r#type)
}

fn backup(t: u8) -> Result<u8, UiError> {
    Ok(t)
}

fn main() {
    let _ = lookup(1);
}
