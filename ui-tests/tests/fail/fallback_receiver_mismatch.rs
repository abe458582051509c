//! A fallback method that takes its receiver otherwise than the annotated
//! method does.
use std::sync::Arc;

use resilient_core::fallback;
use ui_tests::UiError;

pub struct Client;

impl Client {
    #[fallback(method = "cached(id)")]
    pub async fn find(self: Arc<Self>, id: u64) -> Result<String, UiError> {
        Ok(id.to_string())
    }

    fn cached(&self, id: u64) -> Result<String, UiError> {
        Ok(format!("{id} (cached)"))
    }
}

fn main() {}
