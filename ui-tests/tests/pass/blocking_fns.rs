//! Plain fns (no `async`) under every attribute a blocking fn can carry:
//! free fns, methods (`&self`, `self`, `Arc<Self>`), a generic fn, a trait
//! impl, the five stacked with a keyed breaker, a body with `?` and an early
//! `return`, a plain-fn fallback (which never answers `NotConfigured`); no warning in the user's code; with no
//! registry a call returns `NotConfigured` without running the body.
#![deny(warnings)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use resilient_core::{
    circuit_breakable, concurrency_limit, fallback, rate_limited, retryable, CircuitBreakerSpec,
    ConcurrencyLimitSpec, RateLimiterSpec,
};
use ui_tests::{UiError, UiRetry};

#[derive(CircuitBreakerSpec)]
#[spec("ui.blocking.breaker")]
pub struct DbBreaker;

#[derive(ConcurrencyLimitSpec)]
#[spec("ui.blocking.pool")]
pub struct DbPool;

#[derive(RateLimiterSpec)]
#[spec("ui.blocking.rate")]
pub struct DbRate;

static BODY_RUNS: AtomicU32 = AtomicU32::new(0);

#[retryable(UiRetry)]
pub fn free(id: u64) -> Result<u64, UiError> {
    BODY_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(id)
}

#[circuit_breakable(DbBreaker)]
pub fn early_return(id: u64) -> Result<u64, UiError> {
    BODY_RUNS.fetch_add(1, Ordering::SeqCst);
    if id == 0 {
        return Err(UiError::Failed);
    }
    let parsed: u64 = "7".parse().map_err(|_| UiError::Failed)?;
    Ok(id + parsed)
}

#[rate_limited(DbRate)]
pub fn generic<T: Clone + Send>(value: T) -> Result<T, UiError> {
    BODY_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(value)
}

#[fallback(method = "cached(id)")]
#[circuit_breakable(DbBreaker, key = host)]
#[concurrency_limit(DbPool)]
#[rate_limited(DbRate)]
#[retryable(UiRetry)]
pub fn all_five(host: &str, id: u64) -> Result<String, UiError> {
    BODY_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(format!("{host}/{id}"))
}

pub fn cached(id: u64) -> Result<String, UiError> {
    Ok(format!("cached {id}"))
}

#[derive(Clone)]
pub struct Client {
    name: String,
}

impl Client {
    #[fallback(method = "spare(id)")]
    #[retryable(UiRetry)]
    pub fn by_ref(&self, id: u64) -> Result<String, UiError> {
        BODY_RUNS.fetch_add(1, Ordering::SeqCst);
        Ok(format!("{}: {id}", self.name))
    }

    fn spare(&self, id: u64, _error: UiError) -> Result<String, UiError> {
        Ok(format!("{} spare: {id}", self.name))
    }

    #[retryable(UiRetry)]
    pub fn owned(self, id: u64) -> Result<String, UiError> {
        BODY_RUNS.fetch_add(1, Ordering::SeqCst);
        Ok(format!("{}: {id}", self.name))
    }

    #[concurrency_limit(DbPool)]
    pub fn shared(self: Arc<Self>) -> Result<usize, UiError> {
        BODY_RUNS.fetch_add(1, Ordering::SeqCst);
        Ok(self.name.len())
    }
}

/// A connection pool whose methods hand out borrows, as blocking database
/// APIs do: the body returns a borrow of what it captured.
pub struct Pool {
    conns: Vec<u8>,
}

impl Pool {
    #[circuit_breakable(DbBreaker)]
    pub fn conn(&mut self) -> Result<&mut u8, UiError> {
        self.conns.first_mut().ok_or(UiError::Failed)
    }

    #[circuit_breakable(DbBreaker)]
    pub fn peek(&mut self) -> Result<&u8, UiError> {
        self.conns.push(1);
        self.conns.first().ok_or(UiError::Failed)
    }
}

#[concurrency_limit(DbPool)]
pub fn first_mut<'a>(v: &'a mut Vec<u8>) -> Result<&'a mut u8, UiError> {
    v.first_mut().ok_or(UiError::Failed)
}

pub trait Ledger {
    fn balance(&self, account: u64) -> Result<i64, UiError>;
}

impl Ledger for Client {
    #[circuit_breakable(DbBreaker)]
    #[retryable(UiRetry)]
    fn balance(&self, account: u64) -> Result<i64, UiError> {
        BODY_RUNS.fetch_add(1, Ordering::SeqCst);
        i64::try_from(account).map_err(|_| UiError::Failed)
    }
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
    let client = Client { name: "db".into() };
    not_configured(free(1));
    not_configured(early_return(1));
    not_configured(generic(1u8));
    not_configured(client.clone().owned(1));
    not_configured(Arc::new(client.clone()).shared());
    not_configured(client.balance(1));
    let mut pool = Pool { conns: vec![7] };
    assert!(pool.conn().is_err() && pool.peek().is_err());
    assert!(first_mut(&mut vec![1]).is_err());
    // A fallback never hides a missing configuration.
    not_configured(all_five("a", 3));
    not_configured(client.by_ref(4));
    assert_eq!(BODY_RUNS.load(Ordering::SeqCst), 0, "no body ran");
}
