//! An inner attribute first in the body, on a fn whose attributes are
//! wrong: the one error is theirs, not one about the inner attribute.
use resilient_core::retryable;
use ui_tests::{UiError, UiRetry};

#[retryable(UiRetry)]
#[retryable(UiRetry)]
pub async fn find(id: u64) -> Result<u64, UiError> {
    #![allow(unused_variables)]
    let unused = 1;
    Ok(id)
}

fn main() {}
