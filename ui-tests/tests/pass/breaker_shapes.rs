//! `#[circuit_breakable]` alone and combined with `#[retryable]`: the breaker
//! calls the body once, so alone it takes non-`Clone` arguments and `&mut self`;
//! the returned futures are `Send` when the body's are; with no registry a call
//! returns `NotConfigured` without running the body.
#![deny(warnings)]

use std::fmt::Display;
use std::sync::atomic::{AtomicU32, Ordering};

use resilient_core::{circuit_breakable, retryable, CircuitBreakerSpec};
use ui_tests::{UiError, UiRetry};

#[derive(CircuitBreakerSpec)]
#[spec("ui.breaker.shapes")]
pub struct ShapesBreaker;

static BODY_RUNS: AtomicU32 = AtomicU32::new(0);

/// Not `Clone`: the breaker alone never needs a second copy.
pub struct Query {
    pub id: u64,
}

/// A free fn with a non-`Clone` owned argument.
#[circuit_breakable(ShapesBreaker)]
pub async fn find(query: Query) -> Result<u64, UiError> {
    BODY_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(query.id)
}

/// A generic fn; `T` need not be `Clone` under the breaker alone.
#[circuit_breakable(ShapesBreaker)]
pub async fn describe<T>(value: T) -> Result<String, UiError>
where
    T: Display + Send,
{
    BODY_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(value.to_string())
}

#[derive(Clone)]
pub struct Client {
    base: String,
    count: u32,
}

impl Client {
    #[circuit_breakable(ShapesBreaker)]
    pub async fn by_ref(&self, id: u64) -> Result<String, UiError> {
        BODY_RUNS.fetch_add(1, Ordering::SeqCst);
        Ok(format!("{}/{id}", self.base))
    }

    /// `&mut self` is fine: nothing calls the body again.
    #[circuit_breakable(ShapesBreaker)]
    pub async fn bump(&mut self) -> Result<u32, UiError> {
        BODY_RUNS.fetch_add(1, Ordering::SeqCst);
        self.count += 1;
        Ok(self.count)
    }

    /// Breaker outermost: one retried call counts once in the breaker.
    #[circuit_breakable(ShapesBreaker)]
    #[retryable(UiRetry)]
    pub async fn breaker_over_retry(&self, id: u64) -> Result<String, UiError> {
        BODY_RUNS.fetch_add(1, Ordering::SeqCst);
        Ok(format!("{}/{id}", self.base))
    }

    /// Retry outermost: each attempt goes through the breaker.
    #[retryable(UiRetry)]
    #[circuit_breakable(ShapesBreaker)]
    pub async fn retry_over_breaker(&self, id: u64) -> Result<String, UiError> {
        BODY_RUNS.fetch_add(1, Ordering::SeqCst);
        Ok(format!("{}/{id}", self.base))
    }
}

trait Store {
    fn load(&self, id: u64) -> impl std::future::Future<Output = Result<u64, UiError>> + Send;
}

impl Store for Client {
    #[circuit_breakable(ShapesBreaker)]
    async fn load(&self, id: u64) -> Result<u64, UiError> {
        BODY_RUNS.fetch_add(1, Ordering::SeqCst);
        Ok(id + self.base.len() as u64)
    }
}

fn assert_send<T: Send>(_: T) {}

fn main() {
    let mut client = Client {
        base: "http://pets".into(),
        count: 0,
    };
    assert_send(find(Query { id: 1 }));
    assert_send(describe(5u8));
    assert_send(client.by_ref(1));
    assert_send(client.bump());
    assert_send(client.breaker_over_retry(1));
    assert_send(client.retry_over_breaker(1));
    assert_send(client.load(1));

    // No registry: the call is refused before the body runs.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    match rt.block_on(find(Query { id: 1 })) {
        Err(UiError::Resilience(resilient_core::Error::NotConfigured {
            spec: "ShapesBreaker",
            ..
        })) => {}
        other => panic!("expected NotConfigured, got {other:?}"),
    }
    assert_eq!(BODY_RUNS.load(Ordering::SeqCst), 0);
}
