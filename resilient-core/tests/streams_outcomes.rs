//! What a stream's layers count and when: a failure after an item under a
//! retry, an ignored item before a failure under a breaker, a timeout with
//! and without an idle limit, when a keyed layer finds its instance, a
//! half-open probe judged by its first item, and a fallback's edges.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;
use support::*;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use resilient_core::circuit_breaker::State;
use resilient_core::stream::Stream;
use resilient_core::{
    circuit_breakable, concurrency_limit, retryable, CircuitBreakerSpec, Classify,
    ConcurrencyLimitSpec, Error, Registry, RetrySpec, Spec, Verdict,
};

#[derive(Debug, thiserror::Error)]
enum FeedError {
    #[error("not found")]
    NotFound,
    #[error("the feed failed")]
    Failed,
    #[error(transparent)]
    Resilience(#[from] Error),
}

async fn collect<S: Stream<Item = Result<usize, FeedError>>>(s: S) -> Vec<Result<usize, String>> {
    s.map(|r| r.map_err(|e| e.to_string())).collect().await
}

// ---------------------------------------------------------------------------
// 1. Under a retry, once an item has passed, a failure ends the stream.

#[derive(RetrySpec)]
#[spec("outcomes.retry")]
struct R4Retry;

#[retryable(R4Retry)]
fn ok_err_ok() -> impl Stream<Item = Result<usize, FeedError>> {
    futures_util::stream::iter(vec![Ok(0), Err(FeedError::Failed), Ok(1), Ok(2)])
}

#[tokio::test(start_paused = true)]
async fn under_a_retry_a_failure_after_an_item_ends_the_stream() {
    let r = registry::<R4Retry>(table([("attempts", int(3)), ("delay", s("10ms"))]));
    let _registry = r.set_default();
    let items = collect(ok_err_ok()).await;
    assert_eq!(
        items,
        vec![Ok(0), Err("the feed failed".into())],
        "docs: once an item has passed, a failure ends the stream with it"
    );
}

// ---------------------------------------------------------------------------
// 2. A breaker's outcome is the stream's first failure, or its end: an
//    ignored item first does not end the permit.

#[derive(CircuitBreakerSpec)]
#[spec("outcomes.breaker", classify = custom)]
struct R4Breaker;

impl Classify<usize, FeedError> for R4Breaker {
    fn classify(outcome: &Result<usize, FeedError>) -> Verdict {
        match outcome {
            Ok(_) => Verdict::Success,
            Err(FeedError::NotFound) => Verdict::Ignore,
            Err(_) => Verdict::Failure,
        }
    }
}

#[circuit_breakable(R4Breaker)]
fn ignored_then_failed() -> impl Stream<Item = Result<usize, FeedError>> {
    futures_util::stream::iter(vec![Err(FeedError::NotFound), Err(FeedError::Failed)])
}

#[tokio::test(start_paused = true)]
async fn breaker_counts_a_failure_after_an_ignored_item() {
    let r = registry::<R4Breaker>(breaker_section(50, 2, "1h", 10));
    let _registry = r.set_default();
    let breaker = r.sync_scope(R4Breaker::get).expect("breaker");
    for _ in 0..2 {
        let items = collect(ignored_then_failed()).await;
        assert_eq!(
            items,
            vec![Err("not found".into()), Err("the feed failed".into())]
        );
    }
    // Two failures of two: open (the window starts afresh as it opens).
    assert_eq!(
        breaker.metrics().state,
        State::Open,
        "two streams each failed after an ignored item"
    );
    let items = collect(ignored_then_failed()).await;
    assert!(
        items[0].as_ref().is_err_and(|e| e.contains("is open")),
        "{items:?}"
    );
}

// ---------------------------------------------------------------------------
// 3. Keyed layers find their instance when they are made: the outermost at
//    the call, one inside another at the first poll.

#[derive(CircuitBreakerSpec)]
#[spec("outcomes.keyed")]
struct R4Keyed;

#[derive(ConcurrencyLimitSpec)]
#[spec("outcomes.limit")]
struct R4Limit;

#[circuit_breakable(R4Keyed, key = host)]
fn keyed_outer(host: String) -> impl Stream<Item = Result<usize, FeedError>> {
    let _ = host;
    futures_util::stream::iter(vec![Ok(0)])
}

#[concurrency_limit(R4Limit)]
#[circuit_breakable(R4Keyed, key = host)]
fn keyed_inner(host: String) -> impl Stream<Item = Result<usize, FeedError>> {
    let _ = host;
    futures_util::stream::iter(vec![Ok(0)])
}

fn keyed_registry() -> Registry {
    build(
        Registry::builder().spec::<R4Keyed>().spec::<R4Limit>(),
        vec![
            (
                R4Keyed::PATH,
                table([
                    ("failure_rate_threshold", int(50)),
                    ("minimum_required_calls", int(4)),
                    ("wait_duration_in_open_state", s("1h")),
                    ("permitted_calls_in_half_open_state", int(1)),
                    ("count_based", table([("window_size", int(10))])),
                    ("keys", table([])),
                ]),
            ),
            (R4Limit::PATH, table([("limit", int(4))])),
        ],
    )
}

#[tokio::test(start_paused = true)]
async fn a_keyed_layer_finds_its_instance_when_it_is_made() {
    let r = keyed_registry();
    // Made outside any scope, polled inside it.
    let outer = keyed_outer("a".into());
    let inner = keyed_inner("a".into());
    let outer_items = r.scope(collect(outer)).await;
    let inner_items = r.scope(collect(inner)).await;
    // As documented: a keyed layer finds its instance when it is made, so
    // the outermost one at the call (outside the scope: not configured),
    // one under another layer at the first poll (inside it).
    assert!(
        outer_items.len() == 1
            && outer_items[0]
                .as_ref()
                .is_err_and(|e| e.contains("no settings")),
        "{outer_items:?}"
    );
    assert_eq!(inner_items, vec![Ok(0)]);
}

// ---------------------------------------------------------------------------
// 4. A half-open probe is judged by its first item; a failure right after
//    it is not counted (documented).

#[derive(CircuitBreakerSpec)]
#[spec("outcomes.probe")]
struct R4Probe;

#[circuit_breakable(R4Probe)]
fn probe_feed(fail_first: bool) -> impl Stream<Item = Result<usize, FeedError>> {
    let items = if fail_first {
        vec![Err(FeedError::Failed)]
    } else {
        vec![Ok(0), Err(FeedError::Failed)]
    };
    futures_util::stream::iter(items)
}

#[tokio::test(start_paused = true)]
async fn a_half_open_probe_stream_is_judged_by_its_first_item() {
    let r = registry::<R4Probe>(breaker_section(50, 2, "10s", 2));
    let _registry = r.set_default();
    let breaker = r.sync_scope(R4Probe::get).expect("breaker");
    for _ in 0..2 {
        let _ = collect(probe_feed(true)).await;
    }
    assert_eq!(breaker.metrics().state, State::Open);
    tokio::time::sleep(Duration::from_secs(11)).await;
    let items = collect(probe_feed(false)).await;
    assert_eq!(items, vec![Ok(0), Err("the feed failed".into())]);
    // Judged by its first item: closed; the failure after it is not
    // counted (documented).
    let m = breaker.metrics();
    assert_eq!(m.state, State::Closed);
    assert_eq!((m.window.total, m.window.failures), (0, 0));
}

// ---------------------------------------------------------------------------
// 5. Fallback: an error its `on` does not take passes; a replacement that
//    fails; an argument named twice.

#[derive(Default)]
struct Cache {
    made: AtomicUsize,
}

// Over a limit that admits every stream: `on = resilience` under no
// resilience attribute is a compile error, since it could never be taken.
#[resilient_core::fallback(method = "cached(cache, n, n)", on = resilience)]
#[concurrency_limit(R4Limit)]
fn feed_on(cache: Arc<Cache>, n: usize) -> impl Stream<Item = Result<usize, FeedError>> {
    let _ = (cache, n);
    futures_util::stream::iter(vec![Err(FeedError::Failed), Ok(1)])
}

#[resilient_core::fallback(method = "cached(cache, n, n)")]
fn feed_any(cache: Arc<Cache>, n: usize) -> impl Stream<Item = Result<usize, FeedError>> {
    let _ = (cache, n);
    futures_util::stream::iter(vec![Err(FeedError::Failed), Ok(1)])
}

fn cached(cache: Arc<Cache>, a: usize, b: usize) -> impl Stream<Item = Result<usize, FeedError>> {
    cache.made.fetch_add(1, Ordering::SeqCst);
    futures_util::stream::iter(vec![Ok(a + b), Err(FeedError::Failed), Ok(7)])
}

#[tokio::test(start_paused = true)]
async fn fallback_edges() {
    let cache = Arc::new(Cache::default());
    let r = registry::<R4Limit>(table([("limit", int(4))]));
    let a = r.scope(collect(feed_on(Arc::clone(&cache), 10))).await;
    let b = collect(feed_any(Arc::clone(&cache), 10)).await;
    // `on = resilience` leaves the body's error alone: it passes, and the
    // stream goes on.
    assert_eq!(a, vec![Err("the feed failed".into()), Ok(1)]);
    // `on = any` replaces it; the replacement's own failure passes on, and
    // the fallback runs once, its argument named twice cloned twice.
    assert_eq!(b, vec![Ok(20), Err("the feed failed".into()), Ok(7)]);
    assert_eq!(cache.made.load(Ordering::SeqCst), 1);
}

// ---------------------------------------------------------------------------
// 6. The timeout counts a stream's outcome at its end, with or without an
//    idle limit.

use resilient_core::{timeout, TimeoutSpec};
use support::capture::Meters;

#[derive(TimeoutSpec)]
#[spec("outcomes.timeout")]
struct R4Timeout;

#[timeout(R4Timeout)]
fn ok_then_err() -> impl Stream<Item = Result<usize, FeedError>> {
    futures_util::stream::iter(vec![Ok(0), Err(FeedError::Failed)])
}

fn timeout_outcomes(idle: bool) -> [u64; 3] {
    let meters = Meters::default();
    let mut section = vec![("duration", s("1s"))];
    if idle {
        section.push(("idle", s("1s")));
    }
    let mut t = table([]);
    for (k, v) in section {
        t = with(t, k, v);
    }
    let t = with(
        t,
        "telemetry",
        table([("metrics", table([("enabled", Value::Bool(true))]))]),
    );
    let r = metrics::with_local_recorder(&meters, || registry::<R4Timeout>(t));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(r.scope(async {
        let items = collect(ok_then_err()).await;
        assert_eq!(items, vec![Ok(0), Err("the feed failed".into())]);
    }));
    ["success", "failure", "cancelled"].map(|o| {
        meters
            .counter(
                "resilient_calls_total",
                &[
                    ("spec", "R4Timeout"),
                    ("path", "outcomes.timeout"),
                    ("kind", "timeout"),
                    ("outcome", o),
                ],
            )
            .unwrap_or(0)
    })
}

use resilient_core::settings::Value;

#[test]
fn timeout_counts_a_stream_with_an_error_alike_with_or_without_idle() {
    let with_idle = timeout_outcomes(true);
    let without = timeout_outcomes(false);
    assert_eq!(with_idle, without);
}
