//! `#[fallback]` in every shape it takes: a sync or async fallback, with or
//! without the error; on `&self`, on `self: Arc<Self>` with an owned argument,
//! on a free fn with a path and a subset of the arguments, reordered and
//! repeated; each `on` filter and `when`; inside and outside a retry. Every
//! future is `Send`, and with no registry a fallback alone still runs: the
//! failing body's call answers with the fallback's value.
#![deny(warnings)]

use std::sync::Arc;

use resilient_core::{
    circuit_breakable, fallback, retryable, timeout, CircuitBreakerSpec, TimeoutSpec,
};
use ui_tests::{UiError, UiRetry};

#[derive(CircuitBreakerSpec)]
#[spec("ui.fallback.breaker")]
pub struct FbBreaker;

#[derive(TimeoutSpec)]
#[spec("ui.fallback.timeout")]
pub struct FbTimeout;

pub struct Client {
    base: String,
}

impl Client {
    /// `&self`, a sync fallback without the error.
    #[fallback(method = "cached(id)")]
    pub async fn find(&self, id: u64) -> Result<String, UiError> {
        Err(UiError::Failed)
    }

    fn cached(&self, id: u64) -> Result<String, UiError> {
        Ok(format!("{}/{id} (cached)", self.base))
    }

    /// An async fallback that takes the error.
    #[fallback(method = "explain(id)")]
    pub async fn explained(&self, id: u64) -> Result<String, UiError> {
        Ok(format!("{}/{id}", self.base))
    }

    async fn explain(&self, id: u64, error: UiError) -> Result<String, UiError> {
        Ok(format!("{}/{id}: {error}", self.base))
    }

    /// `self: Arc<Self>` and an owned, non-`Copy` argument.
    #[fallback(method = "shared_backup(tag)")]
    pub async fn shared(self: Arc<Self>, tag: String) -> Result<String, UiError> {
        Ok(format!("{}/{tag}", self.base))
    }

    fn shared_backup(self: Arc<Self>, tag: String) -> Result<String, UiError> {
        Ok(format!("{}/{tag} (backup)", self.base))
    }

    /// Only for failures a resilience attribute inside raises: here, the
    /// retry giving up.
    #[fallback(method = "cached(id)", on = resilience)]
    #[retryable(UiRetry)]
    pub async fn exhausted(&self, id: u64) -> Result<String, UiError> {
        Ok(format!("{}/{id}", self.base))
    }

    /// Only for an open breaker's rejection.
    #[fallback(method = "cached(id)", on = rejection)]
    #[circuit_breakable(FbBreaker)]
    pub async fn guarded(&self, id: u64) -> Result<String, UiError> {
        Ok(format!("{}/{id}", self.base))
    }

    /// Only for a timeout.
    #[fallback(method = "cached(id)", on = timeout)]
    #[timeout(FbTimeout)]
    pub async fn timed(&self, id: u64) -> Result<String, UiError> {
        Ok(format!("{}/{id}", self.base))
    }

    /// Only for errors the predicate accepts.
    #[fallback(method = "cached(id)", when = is_failed)]
    pub async fn filtered(&self, id: u64) -> Result<String, UiError> {
        Ok(format!("{}/{id}", self.base))
    }

    /// A fallback inside a retry: each attempt falls back on its own.
    #[retryable(UiRetry)]
    #[fallback(method = "explain(id)")]
    pub async fn retried_inside(&self, id: u64) -> Result<String, UiError> {
        Ok(format!("{}/{id}", self.base))
    }

    /// A fallback outside a retry: it answers once the retry gives up.
    #[fallback(method = "explain(id)")]
    #[retryable(UiRetry)]
    pub async fn retried_outside(&self, id: u64) -> Result<String, UiError> {
        Ok(format!("{}/{id}", self.base))
    }
}

fn is_failed(error: &UiError) -> bool {
    matches!(error, UiError::Failed)
}

mod backups {
    use ui_tests::UiError;

    /// Gets `b`, then `a` twice; never `c`.
    pub fn backup(b: String, a: u64, again: u64) -> Result<String, UiError> {
        Ok(format!("{b}/{}", a + again))
    }
}

/// A free fn: a fallback path, a subset of the arguments, reordered and
/// repeated.
#[fallback(method = "backups::backup(b, a, a)")]
pub async fn combine(a: u64, b: String, c: bool) -> Result<String, UiError> {
    Ok(format!("{a}/{b}/{c}"))
}

/// A free fn in a retry, with a free async fallback that takes the error.
#[fallback(method = "free_backup(id)")]
#[retryable(UiRetry)]
pub async fn free_retried(id: u64, tag: String) -> Result<String, UiError> {
    Ok(format!("{tag}/{id}"))
}

async fn free_backup(id: u64, error: UiError) -> Result<String, UiError> {
    Ok(format!("{id}: {error}"))
}

fn assert_send<T: Send>(_: T) {}

fn main() {
    let client = Client {
        base: "http://pets".into(),
    };
    assert_send(client.find(1));
    assert_send(client.explained(1));
    assert_send(
        Arc::new(Client {
            base: "http://pets".into(),
        })
        .shared("cats".into()),
    );
    assert_send(client.exhausted(1));
    assert_send(client.guarded(1));
    assert_send(client.timed(1));
    assert_send(client.filtered(1));
    assert_send(client.retried_inside(1));
    assert_send(client.retried_outside(1));
    assert_send(combine(1, "pets".into(), true));
    assert_send(free_retried(1, "pets".into()));

    // A fallback alone needs no registry: the body fails, the fallback answers.
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    match rt.block_on(client.find(7)) {
        Ok(value) => assert_eq!(value, "http://pets/7 (cached)"),
        Err(e) => panic!("expected the fallback's value, got {e:?}"),
    }
}
