//! The fallback takes the error by reference; it gets it by value.
use resilient_core::fallback;
use ui_tests::UiError;

pub struct Client;

impl Client {
    #[fallback(method = "cached(id)")]
    pub async fn find(&self, id: u64) -> Result<String, UiError> {
        Ok(id.to_string())
    }

    fn cached(&self, id: u64, e: &UiError) -> Result<String, UiError> {
        Ok(format!("{id} {e}"))
    }
}

fn main() {}
