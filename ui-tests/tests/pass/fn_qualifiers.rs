//! Fns with qualifiers and argument shapes the attributes take as they are:
//! an `unsafe fn` (blocking and `async`), whose body keeps its unsafe
//! operations; an `extern "C" fn`; `impl Trait` arguments, cloned per
//! attempt under a retry (async, blocking, a stream) or named by a
//! fallback. No warning in the user's code; with no registry a call returns
//! `NotConfigured` without running the body.
#![deny(warnings)]

use std::sync::atomic::{AtomicU32, Ordering};

use futures_util::stream::{self, StreamExt};
use resilient_core::stream::Stream;
use resilient_core::{circuit_breakable, fallback, retryable, CircuitBreakerSpec};
use ui_tests::{UiError, UiRetry};

#[derive(CircuitBreakerSpec)]
#[spec("ui.qualifiers.breaker")]
pub struct NameBreaker;

static BODY_RUNS: AtomicU32 = AtomicU32::new(0);

/// # Safety
///
/// `at` points to a `u64`.
#[retryable(UiRetry)]
pub unsafe fn read(at: *const u64) -> Result<u64, UiError> {
    BODY_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(*at)
}

/// # Safety
///
/// `at` points to a `u64` that lives through the call.
#[circuit_breakable(NameBreaker)]
#[retryable(UiRetry)]
pub async unsafe fn read_async(at: *const u64) -> Result<u64, UiError> {
    BODY_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(*at)
}

#[allow(improper_ctypes_definitions)]
#[retryable(UiRetry)]
pub extern "C" fn exported(id: u64) -> Result<u64, UiError> {
    BODY_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(id)
}

#[retryable(UiRetry)]
pub async fn length(name: impl AsRef<str> + Clone) -> Result<usize, UiError> {
    BODY_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(name.as_ref().len())
}

#[retryable(UiRetry)]
pub fn length_blocking(name: impl AsRef<str> + Clone) -> Result<usize, UiError> {
    BODY_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(name.as_ref().len())
}

#[fallback(method = "no_length(name)")]
#[circuit_breakable(NameBreaker)]
pub async fn length_once(name: impl AsRef<str> + Clone) -> Result<usize, UiError> {
    BODY_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(name.as_ref().len())
}

fn no_length(name: impl AsRef<str>) -> Result<usize, UiError> {
    let _ = name.as_ref();
    Ok(0)
}

#[retryable(UiRetry)]
pub fn lengths(
    name: impl AsRef<str> + Clone + Send + 'static,
) -> impl Stream<Item = Result<usize, UiError>> {
    BODY_RUNS.fetch_add(1, Ordering::SeqCst);
    stream::iter(vec![Ok(name.as_ref().len())])
}

fn not_configured<T: std::fmt::Debug>(out: Result<T, UiError>) {
    assert!(
        matches!(
            out,
            Err(UiError::Resilience(resilient_core::Error::NotConfigured { .. }))
        ),
        "{out:?}"
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    let value = 7_u64;
    // SAFETY: `value` is a `u64` that lives through both calls.
    not_configured(unsafe { read(&value) });
    not_configured(exported(1));
    not_configured(length_blocking("a"));
    rt.block_on(async {
        // SAFETY: as above.
        not_configured(unsafe { read_async(&value) }.await);
        not_configured(length(String::from("a")).await);
        let items: Vec<_> = Box::pin(lengths("a")).collect().await;
        assert_eq!(items.len(), 1, "one error");
        items.into_iter().for_each(not_configured);
    });
    // The fallback answers every failure but `NotConfigured`.
    not_configured(rt.block_on(length_once("a")));
    assert_eq!(BODY_RUNS.load(Ordering::SeqCst), 0, "no body ran");
}
