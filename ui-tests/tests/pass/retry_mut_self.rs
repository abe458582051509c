//! README lists `self` receivers; a `mut self` body under retry that mutates
//! its (per-attempt) copy of `self`.
use resilient_core::{fallback, retryable};
use ui_tests::{UiError, UiRetry};

#[derive(Clone)]
pub struct Builder {
    n: u32,
}

impl Builder {
    #[fallback(method = "cached()")]
    #[retryable(UiRetry)]
    pub async fn build(mut self) -> Result<u32, UiError> {
        self.n += 1;
        Ok(self.n)
    }

    fn cached(self) -> Result<u32, UiError> {
        Ok(self.n)
    }
}

fn main() {
    let _ = Builder { n: 0 }.build();
}
