//! Fns that return streams under every attribute a stream can carry (all
//! six on one; a fallback never answers `NotConfigured`): an
//! `impl Stream` (with a lifetime, borrowing `&self`), a boxed stream, a
//! `BoxStream` alias, both boxed forms borrowing `&self`, a keyed breaker,
//! a retry over an owned argument that is cloned per attempt, a method
//! taking `self` by value, a body with an early `return`; every stream is
//! `Send`; no warning in the user's code; with no registry a stream yields
//! one `NotConfigured` error and its body makes nothing.
#![deny(warnings)]

use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};

use futures_util::stream::{self, BoxStream, StreamExt};
use resilient_core::stream::Stream;
use resilient_core::{
    circuit_breakable, concurrency_limit, fallback, rate_limited, retryable, timeout,
    CircuitBreakerSpec, ConcurrencyLimitSpec, RateLimiterSpec, TimeoutSpec,
};
use ui_tests::{UiError, UiRetry};

#[derive(CircuitBreakerSpec)]
#[spec("ui.streams.breaker")]
pub struct FeedBreaker;

#[derive(ConcurrencyLimitSpec)]
#[spec("ui.streams.limit")]
pub struct FeedLimit;

#[derive(RateLimiterSpec)]
#[spec("ui.streams.rate")]
pub struct FeedRate;

#[derive(TimeoutSpec)]
#[spec("ui.streams.timeout")]
pub struct FeedTimeout;

static MADE: AtomicU32 = AtomicU32::new(0);

#[fallback(method = "replay(topic, from)")]
#[retryable(UiRetry)]
#[timeout(FeedTimeout)]
#[circuit_breakable(FeedBreaker, key = topic.as_str())]
#[concurrency_limit(FeedLimit)]
#[rate_limited(FeedRate)]
pub fn all_four(topic: String, from: u64) -> impl Stream<Item = Result<u64, UiError>> + Send {
    MADE.fetch_add(1, Ordering::SeqCst);
    if topic.is_empty() {
        return stream::iter(vec![Err(UiError::Failed)]).boxed();
    }
    stream::iter((from..from + 3).map(Ok)).boxed()
}

pub fn replay(topic: String, from: u64) -> impl Stream<Item = Result<u64, UiError>> + Send {
    let n = topic.len() as u64;
    stream::iter((from..from + n).map(Ok))
}

#[retryable(UiRetry)]
pub fn boxed(from: u64) -> Pin<Box<dyn Stream<Item = Result<u64, UiError>> + Send>> {
    MADE.fetch_add(1, Ordering::SeqCst);
    Box::pin(stream::iter((from..from + 3).map(Ok)))
}

#[circuit_breakable(FeedBreaker)]
pub fn aliased(from: u64) -> BoxStream<'static, Result<u64, UiError>> {
    MADE.fetch_add(1, Ordering::SeqCst);
    stream::iter((from..from + 3).map(Ok)).boxed()
}

#[derive(Clone)]
pub struct Feed {
    items: Vec<u64>,
}

impl Feed {
    #[fallback(method = "empty()")]
    #[retryable(UiRetry)]
    #[concurrency_limit(FeedLimit)]
    pub fn borrowed(&self) -> impl Stream<Item = Result<u64, UiError>> + Send + '_ {
        MADE.fetch_add(1, Ordering::SeqCst);
        stream::iter(self.items.iter().map(|&i| Ok(i)))
    }

    fn empty(&self) -> impl Stream<Item = Result<u64, UiError>> + Send + '_ {
        stream::iter(self.items.iter().take(0).map(|&i| Ok(i)))
    }

    /// Boxed streams that borrow `&self`: the body's closure is typed as
    /// the fn's return type, lifetimes and all.
    #[retryable(UiRetry)]
    pub fn boxed_borrowed(&self) -> BoxStream<'_, Result<u64, UiError>> {
        MADE.fetch_add(1, Ordering::SeqCst);
        stream::iter(self.items.iter().map(|&i| Ok(i))).boxed()
    }

    #[circuit_breakable(FeedBreaker)]
    pub fn pinned_borrowed(&self) -> Pin<Box<dyn Stream<Item = Result<u64, UiError>> + Send + '_>> {
        MADE.fetch_add(1, Ordering::SeqCst);
        Box::pin(stream::iter(self.items.iter().map(|&i| Ok(i))))
    }

    #[retryable(UiRetry)]
    pub fn owned(self) -> impl Stream<Item = Result<u64, UiError>> + Send {
        MADE.fetch_add(1, Ordering::SeqCst);
        stream::iter(self.items.into_iter().map(Ok))
    }
}

fn assert_send<T: Send>(t: T) -> T {
    t
}

async fn not_configured<S: Stream<Item = Result<u64, UiError>>>(s: S) {
    let items: Vec<_> = s.collect().await;
    assert_eq!(items.len(), 1, "one error");
    assert!(matches!(
        items[0],
        Err(UiError::Resilience(resilient_core::Error::NotConfigured { .. }))
    ));
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    let feed = Feed { items: vec![1, 2] };
    rt.block_on(async {
        not_configured(assert_send(all_four("a".into(), 1))).await;
        not_configured(boxed(1)).await;
        not_configured(aliased(1)).await;
        not_configured(assert_send(feed.borrowed())).await;
        not_configured(feed.boxed_borrowed()).await;
        not_configured(feed.pinned_borrowed()).await;
        not_configured(feed.clone().owned()).await;
    });
    assert_eq!(MADE.load(Ordering::SeqCst), 0, "no body made a stream");
}
