//! Foreign attributes keep their place around `#[retryable]`, and the
//! annotated fn still runs: docs, lint levels and `#[tracing::instrument]`
//! above and below it.
#![deny(warnings)]

use resilient_core::retryable;
use ui_tests::{UiError, UiRetry};

/// Documented.
#[tracing::instrument]
#[retryable(UiRetry)]
#[allow(clippy::needless_pass_by_value)]
pub async fn instrumented_outside(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

/// Documented.
#[retryable(UiRetry)]
#[tracing::instrument(skip(name))]
#[must_use = "the lookup does nothing unless awaited"]
pub async fn instrumented_inside(id: u64, name: String) -> Result<u64, UiError> {
    Ok(id + name.len() as u64)
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    // No registry: both report `NotConfigured` through the fn's error type.
    for out in [
        rt.block_on(instrumented_outside(1)),
        rt.block_on(instrumented_inside(1, "x".into())),
    ] {
        match out {
            Err(UiError::Resilience(resilient_core::Error::NotConfigured { spec: "UiRetry", .. })) => {}
            other => panic!("expected NotConfigured, got {other:?}"),
        }
    }
}
