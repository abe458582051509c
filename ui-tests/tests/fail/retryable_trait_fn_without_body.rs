//! `#[retryable]` on a trait fn without a body: there is no body to retry;
//! annotate the fn in the trait's impls instead.
use resilient_core::retryable;
use ui_tests::UiError;

pub trait Store {
    #[retryable(ui_tests::UiRetry)]
    async fn load(&self, id: u64) -> Result<u64, UiError>;
}

fn main() {}
