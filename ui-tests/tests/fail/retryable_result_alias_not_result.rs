//! A return type named like a result (`CountResult`) that is not a `Result`.
use resilient_core::retryable;
use ui_tests::UiRetry;

pub type CountResult = u32;

#[retryable(UiRetry)]
pub async fn count() -> CountResult {
    1
}

fn main() {}
