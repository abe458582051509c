//! `method = "cachd(id)"`: the type has no method `cachd`.
use resilient_core::fallback;
use ui_tests::UiError;

pub struct Client;

impl Client {
    #[fallback(method = "cachd(id)")]
    pub async fn find(&self, id: u64) -> Result<String, UiError> {
        Ok(id.to_string())
    }

    pub fn cached(&self, id: u64) -> Result<String, UiError> {
        Ok(id.to_string())
    }
}

fn main() {}
