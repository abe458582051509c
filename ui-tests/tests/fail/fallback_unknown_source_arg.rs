//! `method = "cached(idd)"`: `idd` is not a parameter of the annotated fn.
use resilient_core::fallback;
use ui_tests::UiError;

pub struct Client;

impl Client {
    #[fallback(method = "cached(idd)")]
    pub async fn find(&self, id: u64, tag: String) -> Result<String, UiError> {
        Ok(format!("{tag}/{id}"))
    }

    fn cached(&self, id: u64) -> Result<String, UiError> {
        Ok(id.to_string())
    }
}

fn main() {}
