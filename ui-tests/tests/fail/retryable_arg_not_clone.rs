//! An owned argument that is not `Clone`: retry cannot pass it to a second
//! attempt.
use resilient_core::retryable;
use ui_tests::{UiError, UiRetry};

pub struct Query {
    pub id: u64,
}

#[retryable(UiRetry)]
pub async fn find(query: Query) -> Result<u64, UiError> {
    Ok(query.id)
}

fn main() {}
