//! Boxed errors under retry: `Box<dyn Error + Send + Sync>` with the default
//! `exhausted = error`, and any `Box<dyn Error>` with `exhausted = last_failure`.
use resilient_core::{retryable, RetrySpec};

#[derive(RetrySpec)]
#[spec("ui.retry.boxed", exhausted = last_failure)]
pub struct Boxed;

#[retryable(ui_tests::UiRetry)]
pub async fn send_sync(id: u64) -> Result<u64, Box<dyn std::error::Error + Send + Sync>> {
    Ok(id)
}

#[retryable(Boxed)]
pub async fn any_box(id: u64) -> Result<u64, Box<dyn std::error::Error>> {
    Ok(id)
}

fn main() {
    let _ = (send_sync(1), any_box(2));
}
