//! Edge cases of the stream layers, each a promise of the docs: a slow
//! consumer and the idle limit, healthy streams dropped after items, the
//! slow-call threshold, a stream never polled, failed attempts inside a
//! retry, the order a place and the body's stream go in, one registry per
//! stream, a half-open probe that is a long stream.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;
use support::capture::Meters;
use support::*;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use resilient_core::settings::Value;
use resilient_core::stream::Stream;
use resilient_core::{
    circuit_breakable, concurrency_limit, rate_limited, retryable, timeout, CircuitBreakerSpec,
    ConcurrencyLimitSpec, Error, RateLimiterSpec, Registry, RetrySpec, TimeoutSpec,
};
use tokio::time::Instant;

#[derive(Debug, thiserror::Error)]
enum FeedError {
    #[error("the feed failed")]
    Failed,
    #[error(transparent)]
    Resilience(#[from] Error),
}

// ---------------------------------------------------------------------------
// 1. The idle limit is never early, even when the consumer is slower than
//    the stream (its timer then is not polled for a while).

#[derive(TimeoutSpec)]
#[spec("edges.timeout")]
struct RTimeout;

/// `ready` items at once, then one more after `late` ms.
fn burst_then_late(ready: usize, late: u64) -> impl Stream<Item = Result<usize, FeedError>> + Send {
    futures_util::stream::iter((0..ready).map(Ok)).chain(futures_util::stream::once(async move {
        tokio::time::sleep(Duration::from_millis(late)).await;
        Ok(ready)
    }))
}

#[timeout(RTimeout)]
fn idle_timed(ready: usize, late: u64) -> impl Stream<Item = Result<usize, FeedError>> {
    burst_then_late(ready, late)
}

#[tokio::test(start_paused = true)]
async fn idle_limit_is_never_early_with_a_slow_consumer() {
    let r = registry::<RTimeout>(table([("duration", s("1s")), ("idle", s("400ms"))]));
    let _registry = r.set_default();
    // Items 0..4 are ready at once; the consumer takes one every 300 ms
    // (every gap < 400 ms); item 4 comes 50 ms after it is asked for.
    let mut s = Box::pin(idle_timed(4, 50));
    let mut last = Instant::now();
    let mut got = Vec::new();
    while let Some(item) = s.next().await {
        let gap = last.elapsed();
        last = Instant::now();
        got.push((item.map_err(|e| e.to_string()), gap));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let items: Vec<_> = got.iter().map(|(i, _)| i.clone()).collect();
    assert_eq!(
        items,
        vec![Ok(0), Ok(1), Ok(2), Ok(3), Ok(4)],
        "no gap reached 400 ms, yet: {got:?}"
    );
}

// ---------------------------------------------------------------------------
// 2. Telemetry of the layers inside a retry: a failed attempt is counted as
//    a failure, not as cancelled.

#[derive(RetrySpec)]
#[spec("edges.retry")]
struct RRetry;

#[derive(ConcurrencyLimitSpec)]
#[spec("edges.limit")]
struct RLimit;

#[derive(RateLimiterSpec)]
#[spec("edges.rate")]
struct RRate;

/// Fails before its first item while `fail_first` > 0, then yields 0, 1.
#[derive(Default)]
struct Feed {
    made: AtomicUsize,
    fail_first: AtomicUsize,
}

impl Feed {
    fn stream(self: &Arc<Self>) -> impl Stream<Item = Result<usize, FeedError>> + Send + 'static {
        self.made.fetch_add(1, Ordering::SeqCst);
        let fail = self
            .fail_first
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        let items = if fail {
            vec![Err(FeedError::Failed)]
        } else {
            vec![Ok(0), Ok(1)]
        };
        futures_util::stream::iter(items)
    }
}

#[retryable(RRetry)]
#[timeout(RTimeout)]
#[concurrency_limit(RLimit)]
#[rate_limited(RRate)]
fn stacked(feed: Arc<Feed>) -> impl Stream<Item = Result<usize, FeedError>> {
    feed.stream()
}

fn stack_registry(meters: &Meters, retry: Value) -> Registry {
    metrics::with_local_recorder(meters, || {
        build(
            Registry::builder()
                .spec::<RRetry>()
                .spec::<RTimeout>()
                .spec::<RLimit>()
                .spec::<RRate>(),
            vec![
                (RRetry::PATH, metered(retry)),
                (
                    RTimeout::PATH,
                    metered(table([("duration", s("1s")), ("idle", s("1s"))])),
                ),
                (RLimit::PATH, metered(table([("limit", int(4))]))),
                (
                    RRate::PATH,
                    metered(table([
                        ("limit_for_period", int(100)),
                        ("limit_refresh_period", s("1s")),
                    ])),
                ),
            ],
        )
    })
}

use resilient_core::Spec;

#[tokio::test(start_paused = true)]
async fn a_failed_attempt_is_counted_as_a_failure_by_the_layers_inside_the_retry() {
    let meters = Meters::default();
    let r = stack_registry(&meters, table([("attempts", int(2)), ("delay", s("10ms"))]));
    let _registry = r.set_default();
    let feed = Arc::new(Feed::default());
    feed.fail_first.store(1, Ordering::SeqCst);
    let items: Vec<_> = stacked(Arc::clone(&feed))
        .map(|r| r.map_err(|e| e.to_string()))
        .collect()
        .await;
    assert_eq!(items, vec![Ok(0), Ok(1)]);
    assert_eq!(feed.made.load(Ordering::SeqCst), 2);
    let mut report = Vec::new();
    for (name, path, kind) in [
        ("RTimeout", "edges.timeout", "timeout"),
        ("RLimit", "edges.limit", "concurrency_limit"),
        ("RRate", "edges.rate", "rate_limiter"),
    ] {
        report.push((
            kind,
            ["success", "failure", "cancelled"].map(|o| meters.calls((name, path, kind), o)),
        ));
    }
    // Each layer saw two attempts: one failed, one succeeded.
    assert_eq!(
        report,
        vec![
            ("timeout", [1, 1, 0]),
            ("concurrency_limit", [1, 1, 0]),
            ("rate_limiter", [1, 1, 0]),
        ],
        "[success, failure, cancelled] per layer"
    );
}

// ---------------------------------------------------------------------------
// 3. A retry's call starts at the first poll: a stream never polled counts
//    nothing, and the overall timeout runs from the first poll.

#[retryable(RRetry)]
fn retried(feed: Arc<Feed>) -> impl Stream<Item = Result<usize, FeedError>> {
    feed.stream()
}

#[tokio::test(start_paused = true)]
async fn a_retried_stream_never_polled_counts_nothing() {
    let meters = Meters::default();
    let r = stack_registry(&meters, table([("attempts", int(2)), ("delay", s("10ms"))]));
    let _registry = r.set_default();
    let feed = Arc::new(Feed::default());
    drop(retried(Arc::clone(&feed)));
    assert_eq!(feed.made.load(Ordering::SeqCst), 0);
    let all: u64 = [
        "success",
        "failure",
        "ignored",
        "rejected",
        "timed_out",
        "cancelled",
    ]
    .iter()
    .map(|o| meters.calls(("RRetry", "edges.retry", "retry"), o))
    .sum();
    assert_eq!(all, 0, "a stream never polled is no call");
}

#[tokio::test(start_paused = true)]
async fn a_retry_timeout_runs_from_the_first_poll() {
    let meters = Meters::default();
    let r = stack_registry(
        &meters,
        table([
            ("attempts", int(2)),
            ("delay", s("10ms")),
            ("timeout", s("1s")),
        ]),
    );
    let _registry = r.set_default();
    let feed = Arc::new(Feed::default());
    feed.fail_first.store(1, Ordering::SeqCst);
    // Made now, consumed two seconds later (a stream handed to a task).
    let s = retried(Arc::clone(&feed));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let items: Vec<_> = s.map(|r| r.map_err(|e| e.to_string())).collect().await;
    assert_eq!(
        items,
        vec![Ok(0), Ok(1)],
        "retried within 1s of its first poll"
    );
}

// ---------------------------------------------------------------------------
// 4. A breaker's slow-call threshold times a stream's first item, not its
//    whole life.

#[derive(CircuitBreakerSpec)]
#[spec("edges.breaker")]
struct RBreaker;

fn paced(n: usize, gap: u64) -> impl Stream<Item = Result<usize, FeedError>> + Send {
    futures_util::stream::unfold(0usize, move |i| async move {
        if i == n {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(gap)).await;
        Some((Ok(i), i + 1))
    })
}

#[circuit_breakable(RBreaker)]
fn guarded(n: usize, gap: u64) -> impl Stream<Item = Result<usize, FeedError>> {
    paced(n, gap)
}

#[tokio::test(start_paused = true)]
async fn healthy_long_streams_are_no_slow_calls() {
    let r = registry::<RBreaker>(table([
        ("failure_rate_threshold", int(50)),
        ("minimum_required_calls", int(2)),
        ("wait_duration_in_open_state", s("1h")),
        ("permitted_calls_in_half_open_state", int(1)),
        ("count_based", table([("window_size", int(2))])),
        (
            "slow_call",
            table([("duration_threshold", s("1s")), ("rate_threshold", int(50))]),
        ),
    ]));
    let _registry = r.set_default();
    // Two healthy feeds: ten items 200 ms apart, every item in time.
    for _ in 0..2 {
        let items: Vec<_> = guarded(10, 200).collect().await;
        assert!(items.iter().all(Result::is_ok));
    }
    let third: Vec<_> = guarded(1, 1).collect().await;
    assert!(
        third.iter().all(Result::is_ok),
        "two healthy streams opened the breaker: {:?}",
        third
            .iter()
            .map(|r| r.as_ref().map_err(ToString::to_string))
            .collect::<Vec<_>>()
    );
}

// ---------------------------------------------------------------------------
// 5. A stream dropped after healthy items is a success: consumers that stop
//    early (take(n), an unsubscribe) do not leave only failures in the
//    window.

#[derive(CircuitBreakerSpec)]
#[spec("edges.breaker2")]
struct RBreaker2;

#[circuit_breakable(RBreaker2)]
fn listing(fail: bool) -> impl Stream<Item = Result<usize, FeedError>> {
    let items = if fail {
        vec![Err(FeedError::Failed)]
    } else {
        vec![Ok(0), Ok(1), Ok(2)]
    };
    futures_util::stream::iter(items)
}

#[tokio::test(start_paused = true)]
async fn healthy_streams_dropped_after_items_still_count_as_successes() {
    let r = registry::<RBreaker2>(breaker_section(50, 4, "1h", 100));
    let _registry = r.set_default();
    let breaker = r.sync_scope(RBreaker2::get).expect("breaker");
    // 20 healthy listings, each read for its first two items (take(2)).
    for _ in 0..20 {
        let items: Vec<_> = listing(false).take(2).collect().await;
        assert!(items.iter().all(Result::is_ok));
    }
    // 4 that fail: 4 failures in 24 calls, 17 %.
    for _ in 0..4 {
        let _: Vec<_> = listing(true).collect().await;
    }
    let m = breaker.metrics();
    assert_eq!(
        (m.window.total, m.window.failures, m.state),
        (24, 4, resilient_core::circuit_breaker::State::Closed),
        "20 healthy streams read and dropped counted as nothing"
    );
}

// ---------------------------------------------------------------------------
// 6. Drop order: the body's stream goes before its place, as an async fn's
//    body future does.

struct Conn {
    in_use_at_drop: Arc<AtomicUsize>,
    limit: resilient_core::ConcurrencyLimitHandle<RLimit>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.in_use_at_drop
            .store(self.limit.in_use() as usize + 1000, Ordering::SeqCst);
    }
}

/// A connection that notes, when dropped, the limit's places in use
/// (plus 1000, so that 0 means "not dropped yet").
fn conn_of(r: &Registry) -> (Arc<std::sync::Mutex<Option<Conn>>>, Arc<AtomicUsize>) {
    let limit = r.sync_scope(RLimit::get).expect("limit");
    let seen = Arc::new(AtomicUsize::new(0));
    let conn = Conn {
        in_use_at_drop: Arc::clone(&seen),
        limit,
    };
    (Arc::new(std::sync::Mutex::new(Some(conn))), seen)
}

#[concurrency_limit(RLimit)]
fn holding(
    conn: Arc<std::sync::Mutex<Option<Conn>>>,
) -> impl Stream<Item = Result<usize, FeedError>> {
    let conn = conn.lock().unwrap().take();
    futures_util::stream::iter(vec![Ok(0), Ok(1)]).map(move |i| {
        let _keep = &conn;
        i
    })
}

#[tokio::test(start_paused = true)]
async fn the_place_outlives_the_body_stream() {
    let r = registry::<RLimit>(table([("limit", int(1))]));
    let _registry = r.set_default();
    let (conn, seen) = conn_of(&r);
    let mut s = Box::pin(holding(conn));
    assert!(matches!(s.next().await, Some(Ok(0))));
    drop(s);
    assert_eq!(
        seen.load(Ordering::SeqCst),
        1001,
        "the body's stream was dropped while its place was still held"
    );
}

#[concurrency_limit(RLimit)]
async fn holding_async(conn: Arc<std::sync::Mutex<Option<Conn>>>) -> Result<(), FeedError> {
    let _conn = conn.lock().unwrap().take();
    std::future::pending::<()>().await;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn async_fn_reference_the_place_outlives_the_body_future() {
    let r = registry::<RLimit>(table([("limit", int(1))]));
    let _registry = r.set_default();
    let (conn, seen) = conn_of(&r);
    let mut f = Box::pin(holding_async(conn));
    assert!(tokio::time::timeout(Duration::from_millis(1), f.as_mut())
        .await
        .is_err());
    assert_eq!(r.sync_scope(RLimit::get).expect("limit").in_use(), 1);
    drop(f);
    assert_eq!(seen.load(Ordering::SeqCst), 1001);
}

// ---------------------------------------------------------------------------
// 7. Which registry a stream's layers use: the one in use at the first poll.

#[retryable(RRetry)]
#[concurrency_limit(RLimit)]
fn two_layers(feed: Arc<Feed>) -> impl Stream<Item = Result<usize, FeedError>> {
    feed.stream()
}

#[tokio::test(start_paused = true)]
async fn every_layer_of_a_stream_uses_the_same_registry() {
    let r = build(
        Registry::builder().spec::<RRetry>().spec::<RLimit>(),
        vec![
            (
                RRetry::PATH,
                table([("attempts", int(2)), ("delay", s("10ms"))]),
            ),
            (RLimit::PATH, table([("limit", int(4))])),
        ],
    );
    let feed = Arc::new(Feed::default());
    // Every layer finds its instance in the registry in use at the first
    // poll: made inside a scope and polled outside it, the whole stream is
    // one `NotConfigured` error (no layer half-configured), and the body
    // makes nothing.
    let s = r.scope(async { two_layers(Arc::clone(&feed)) }).await;
    let items: Vec<_> = s.map(|r| r.map_err(|e| e.to_string())).collect().await;
    assert_eq!(items.len(), 1, "{items:?}");
    assert!(
        items[0]
            .as_ref()
            .is_err_and(|e| e.contains("`RRetry` has no settings")),
        "{items:?}"
    );
    // Polled inside the scope (as a server polls a body inside its
    // request's scope, or with `set_default_on`): every layer is there.
    let s = two_layers(Arc::clone(&feed));
    let items: Vec<_> = r
        .scope(s.map(|r| r.map_err(|e| e.to_string())).collect::<Vec<_>>())
        .await;
    assert_eq!(
        items,
        vec![Ok(0), Ok(1)],
        "one registry for the whole stream"
    );
}

// ---------------------------------------------------------------------------
// 8. A healthy long-lived stream taken as the half-open probe closes the
//    breaker at its first item.

#[derive(CircuitBreakerSpec)]
#[spec("edges.breaker3")]
struct RBreaker3;

#[circuit_breakable(RBreaker3)]
fn feed3(fail: bool) -> impl Stream<Item = Result<usize, FeedError>> {
    let first = if fail { Err(FeedError::Failed) } else { Ok(0) };
    // Then an item a minute, for an hour.
    futures_util::stream::iter(vec![first]).chain(paced(60, 60_000))
}

#[tokio::test(start_paused = true)]
async fn a_healthy_probe_stream_closes_the_breaker() {
    let r = registry::<RBreaker3>(breaker_section(50, 2, "10s", 2));
    let _registry = r.set_default();
    let breaker = r.sync_scope(RBreaker3::get).expect("breaker");
    for _ in 0..2 {
        let mut s = Box::pin(feed3(true));
        assert!(matches!(s.next().await, Some(Err(FeedError::Failed))));
    }
    assert_eq!(
        breaker.metrics().state,
        resilient_core::circuit_breaker::State::Open
    );
    tokio::time::sleep(Duration::from_secs(11)).await;
    // The probe: a feed that answers, and keeps answering.
    let mut probe = Box::pin(feed3(false));
    assert!(matches!(probe.next().await, Some(Ok(0))));
    assert!(matches!(probe.next().await, Some(Ok(0))));
    tokio::time::sleep(Duration::from_secs(5 * 60)).await;
    let other: Vec<_> = feed3(false).take(1).collect().await;
    assert!(
        other.iter().all(Result::is_ok),
        "five minutes after a healthy probe answered, state {:?}, other call: {:?}",
        breaker.metrics().state,
        other
            .iter()
            .map(|r| r.as_ref().map_err(ToString::to_string))
            .collect::<Vec<_>>()
    );
}
