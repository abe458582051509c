//! `method = "Self::cached(id)"` for a method that takes `&self`: a path is
//! called as written, without the receiver.
use resilient_core::fallback;
use ui_tests::UiError;

pub struct Client;

impl Client {
    #[fallback(method = "Self::cached(id)")]
    pub async fn find(&self, id: u64) -> Result<String, UiError> {
        Ok(id.to_string())
    }

    fn cached(&self, id: u64) -> Result<String, UiError> {
        Ok(format!("{id} (cached)"))
    }
}

fn main() {}
