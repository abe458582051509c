//! A `&mut` argument cannot be named in `method = ".."`: the call and the
//! fallback cannot both use it.
use resilient_core::fallback;
use ui_tests::UiError;

#[fallback(method = "empty(buf)")]
pub async fn fill(buf: &mut Vec<u8>) -> Result<usize, UiError> {
    buf.push(1);
    Ok(buf.len())
}

fn empty(buf: &mut Vec<u8>) -> Result<usize, UiError> {
    Ok(buf.len())
}

fn main() {}
