//! `#[retryable]` on a `const fn`: a resilience mechanism runs at run time,
//! which a `const fn` cannot; one error, at `const`, not one for each call
//! the chain makes.
use resilient_core::{fallback, retryable};
use ui_tests::{UiError, UiRetry};

#[retryable(UiRetry)]
pub const fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

pub struct Client;

impl Client {
    // A method, and the first of two attributes, which the message names.
    #[fallback(method = "cached(id)")]
    #[retryable(UiRetry)]
    pub const fn lookup(&self, id: u64) -> Result<u64, UiError> {
        Ok(id)
    }

    fn cached(&self, id: u64) -> Result<u64, UiError> {
        Ok(id)
    }
}

fn main() {}
