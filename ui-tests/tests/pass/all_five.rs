//! All five resilience attributes on one fn, in two orders, each imported by
//! name (an unused import would be an error here); without `#[retryable]` the
//! body runs once, so `&mut self` and non-`Clone` arguments are fine; an
//! `async fn` of a trait impl takes `#[timeout]`; every future is `Send`; with
//! no registry a call returns `NotConfigured` without running the body.
#![deny(warnings)]

use std::sync::atomic::{AtomicU32, Ordering};

use resilient_core::{
    circuit_breakable, concurrency_limit, rate_limited, retryable, timeout, CircuitBreakerSpec,
    ConcurrencyLimitSpec, RateLimiterSpec, TimeoutSpec,
};
use ui_tests::{UiError, UiRetry};

#[derive(CircuitBreakerSpec)]
#[spec("ui.all.breaker")]
pub struct AllBreaker;

#[derive(TimeoutSpec)]
#[spec("ui.all.timeout")]
pub struct AllTimeout;

#[derive(ConcurrencyLimitSpec)]
#[spec("ui.all.concurrency")]
pub struct AllLimit;

#[derive(RateLimiterSpec)]
#[spec("ui.all.rate")]
pub struct AllRate;

static BODY_RUNS: AtomicU32 = AtomicU32::new(0);

/// Not `Clone`: without `#[retryable]` nothing needs a second copy.
pub struct Query {
    pub id: u64,
}

/// The five in another order than the method's: rate limit outermost, then
/// timeout over the retried, breaker-guarded, concurrency-limited body.
#[rate_limited(AllRate)]
#[timeout(AllTimeout)]
#[retryable(UiRetry)]
#[circuit_breakable(AllBreaker)]
#[concurrency_limit(AllLimit)]
pub async fn find(id: u64, tag: String) -> Result<String, UiError> {
    BODY_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(format!("{tag}/{id}"))
}

/// Four layers that each run the body once: an owned non-`Clone` argument.
#[concurrency_limit(AllLimit)]
#[circuit_breakable(AllBreaker)]
#[timeout(AllTimeout)]
#[rate_limited(AllRate)]
pub async fn take(query: Query) -> Result<u64, UiError> {
    BODY_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(query.id)
}

pub struct Client {
    base: String,
    count: u32,
}

impl Client {
    /// All five: retry outermost, then breaker, timeout, concurrency, rate.
    #[retryable(UiRetry)]
    #[circuit_breakable(AllBreaker)]
    #[timeout(AllTimeout)]
    #[concurrency_limit(AllLimit)]
    #[rate_limited(AllRate)]
    pub async fn get(&self, id: u64) -> Result<String, UiError> {
        BODY_RUNS.fetch_add(1, Ordering::SeqCst);
        Ok(format!("{}/{id}", self.base))
    }

    /// `&mut self` is fine: no layer here calls the body again.
    #[timeout(AllTimeout)]
    #[concurrency_limit(AllLimit)]
    #[rate_limited(AllRate)]
    pub async fn bump(&mut self) -> Result<u32, UiError> {
        BODY_RUNS.fetch_add(1, Ordering::SeqCst);
        self.count += 1;
        Ok(self.count)
    }
}

trait Store {
    fn load(&self, id: u64) -> impl std::future::Future<Output = Result<u64, UiError>> + Send;
}

impl Store for Client {
    #[timeout(AllTimeout)]
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
    assert_send(find(1, "pets".into()));
    assert_send(take(Query { id: 1 }));
    assert_send(client.get(1));
    assert_send(client.bump());
    assert_send(client.load(1));

    // No registry: the outermost layer (the rate limiter) refuses the call
    // before the body runs.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    match rt.block_on(find(1, "pets".into())) {
        Err(UiError::Resilience(resilient_core::Error::NotConfigured {
            spec: "AllRate",
            ..
        })) => {}
        other => panic!("expected NotConfigured, got {other:?}"),
    }
    assert_eq!(BODY_RUNS.load(Ordering::SeqCst), 0);
}
