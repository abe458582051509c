//! `method = "cached(self, id)"`: `self` listed, though the fallback is
//! called on the same receiver already.
use resilient_core::fallback;
use ui_tests::UiError;

pub struct Client;

impl Client {
    #[fallback(method = "cached(self, id)")]
    pub async fn find(&self, id: u64) -> Result<String, UiError> {
        Ok(id.to_string())
    }

    fn cached(&self, id: u64) -> Result<String, UiError> {
        Ok(id.to_string())
    }
}

fn main() {}
