//! Fns that return streams, under the attributes: what each mechanism does
//! with a stream, counted (streams made, items passed, permits and places
//! held), on tokio's paused clock.

#![allow(clippy::expect_used, clippy::unwrap_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::*;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use resilient_core::circuit_breaker::State;
use resilient_core::stream::Stream;
use resilient_core::{
    circuit_breakable, concurrency_limit, rate_limited, retryable, CircuitBreakerSpec,
    ConcurrencyLimitSpec, Error, RateLimiterSpec, Registry, RetrySpec, Spec,
};
use tokio::time::Instant;

#[derive(Debug, thiserror::Error)]
enum FeedError {
    #[error("the feed failed")]
    Failed,
    #[error(transparent)]
    Resilience(#[from] Error),
}

/// A scripted feed: each stream it makes fails before its first item
/// while `fail_first` is above 0 (counting down), then yields `items`
/// values, then fails if `fail_after` is set.
#[derive(Default)]
struct Feed {
    made: AtomicUsize,
    fail_first: AtomicUsize,
    items: usize,
    fail_after: bool,
}

impl Feed {
    fn new(items: usize) -> Arc<Self> {
        Arc::new(Feed {
            items,
            ..Feed::default()
        })
    }

    fn made(&self) -> usize {
        self.made.load(Ordering::SeqCst)
    }

    fn stream(self: &Arc<Self>) -> impl Stream<Item = Result<usize, FeedError>> + Send + 'static {
        self.made.fetch_add(1, Ordering::SeqCst);
        let fail_now = self
            .fail_first
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        let items: Vec<Result<usize, FeedError>> = if fail_now {
            vec![Err(FeedError::Failed)]
        } else {
            let mut v: Vec<_> = (0..self.items).map(Ok).collect();
            if self.fail_after {
                v.push(Err(FeedError::Failed));
            }
            v
        };
        futures_util::stream::iter(items)
    }
}

#[derive(RetrySpec)]
#[spec("streams.retry")]
struct FeedRetry;

#[retryable(FeedRetry)]
fn retried(feed: Arc<Feed>) -> impl Stream<Item = Result<usize, FeedError>> {
    feed.stream()
}

fn retry_registry(attempts: i128) -> Registry {
    registry::<FeedRetry>(table([("attempts", int(attempts)), ("delay", s("100ms"))]))
}

/// Every item of `s`, and whether each was a success.
async fn collect<S: Stream<Item = Result<usize, FeedError>>>(s: S) -> Vec<Result<usize, String>> {
    s.map(|r| r.map_err(|e| e.to_string())).collect().await
}

#[tokio::test(start_paused = true)]
async fn a_failure_before_the_first_item_makes_the_stream_again_after_the_delay() {
    let r = retry_registry(3);
    let _registry = r.set_default();
    let feed = Feed::new(3);
    feed.fail_first.store(2, Ordering::SeqCst);
    let start = Instant::now();
    let items = collect(retried(Arc::clone(&feed))).await;
    assert_eq!(items, vec![Ok(0), Ok(1), Ok(2)], "each item once");
    assert_eq!(feed.made(), 3, "made three times");
    assert_eq!(start.elapsed(), Duration::from_millis(200), "two waits");
}

#[tokio::test(start_paused = true)]
async fn a_failure_after_an_item_ends_the_stream_with_it() {
    let r = retry_registry(3);
    let _registry = r.set_default();
    let feed = Arc::new(Feed {
        items: 2,
        fail_after: true,
        ..Feed::default()
    });
    let items = collect(retried(Arc::clone(&feed))).await;
    assert_eq!(
        items,
        vec![Ok(0), Ok(1), Err("the feed failed".into())],
        "no item twice, the failure passed on"
    );
    assert_eq!(feed.made(), 1, "not made again");
}

#[tokio::test(start_paused = true)]
async fn retries_exhausted_before_any_item_end_the_stream_with_one_error() {
    let r = retry_registry(2);
    let _registry = r.set_default();
    let feed = Feed::new(3);
    feed.fail_first.store(10, Ordering::SeqCst);
    let items = collect(retried(Arc::clone(&feed))).await;
    assert_eq!(items.len(), 1, "{items:?}");
    assert!(
        items[0]
            .as_ref()
            .is_err_and(|e| e.contains("gave up after 3 calls")),
        "{items:?}"
    );
    assert_eq!(feed.made(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_stream_dropped_while_it_waits_for_a_retry_gives_its_token_back() {
    let r = registry::<FeedRetry>(table([
        ("attempts", int(3)),
        ("delay", s("100ms")),
        (
            "retry_budget",
            table([
                ("tokens_initial", int(1)),
                ("tokens_max", int(1)),
                ("ratio", int(0)),
            ]),
        ),
    ]));
    let _registry = r.set_default();
    let feed = Feed::new(1);
    feed.fail_first.store(1, Ordering::SeqCst);
    {
        let mut s = Box::pin(retried(Arc::clone(&feed)));
        let first = tokio::time::timeout(Duration::from_millis(10), s.next()).await;
        assert!(first.is_err(), "still waiting for the retry");
    }
    // The token came back: a second stream can retry once.
    feed.fail_first.store(1, Ordering::SeqCst);
    let items = collect(retried(Arc::clone(&feed))).await;
    assert_eq!(items, vec![Ok(0)]);
    assert_eq!(feed.made(), 3);
}

#[derive(CircuitBreakerSpec)]
#[spec("streams.breaker")]
struct FeedBreaker;

#[circuit_breakable(FeedBreaker)]
fn guarded(feed: Arc<Feed>) -> impl Stream<Item = Result<usize, FeedError>> {
    feed.stream()
}

fn breaker_registry() -> Registry {
    registry::<FeedBreaker>(breaker_section(50, 4, "1h", 4))
}

#[tokio::test(start_paused = true)]
async fn one_permit_per_stream_and_a_rejected_stream_is_one_error() {
    let r = breaker_registry();
    let _registry = r.set_default();
    let breaker = r.sync_scope(FeedBreaker::get).expect("breaker");
    // Two streams that end well: two successes, whatever their length.
    let feed = Feed::new(50);
    for _ in 0..2 {
        assert_eq!(collect(guarded(Arc::clone(&feed))).await.len(), 50);
    }
    assert_eq!(
        (
            breaker.metrics().window.total,
            breaker.metrics().window.failures
        ),
        (2, 0)
    );
    // Two that fail after ten items: two failures, the window is at 50 %.
    let failing = Arc::new(Feed {
        items: 10,
        fail_after: true,
        ..Feed::default()
    });
    for _ in 0..2 {
        assert_eq!(collect(guarded(Arc::clone(&failing))).await.len(), 11);
    }
    assert_eq!(breaker.metrics().state, State::Open);
    let made = failing.made();
    let items = collect(guarded(Arc::clone(&failing))).await;
    assert_eq!(items.len(), 1, "one error: {items:?}");
    assert!(
        items[0].as_ref().is_err_and(|e| e.contains("FeedBreaker")),
        "{items:?}"
    );
    assert_eq!(failing.made(), made, "the body made no stream");
}

#[tokio::test(start_paused = true)]
async fn a_stream_dropped_after_healthy_items_is_a_success_and_before_any_is_nothing() {
    let r = breaker_registry();
    let _registry = r.set_default();
    let breaker = r.sync_scope(FeedBreaker::get).expect("breaker");
    // A consumer that takes what it needs (`take(n)`) ended a healthy
    // stream: a success, whatever it left unread.
    let feed = Feed::new(10);
    let mut s = Box::pin(guarded(Arc::clone(&feed)));
    assert_eq!(s.next().await.map(|r| r.is_ok()), Some(true));
    drop(s);
    let m = breaker.metrics();
    assert_eq!((m.window.total, m.window.failures), (1, 0));
    // An unpolled stream takes no permit and makes nothing; one dropped
    // while it waits for its first item counts neither way.
    drop(guarded(Arc::clone(&feed)));
    let slow = Box::pin(timed_guarded(vec![10_000]));
    let mut slow = slow;
    let first = tokio::time::timeout(Duration::from_millis(10), slow.next()).await;
    assert!(first.is_err(), "no item yet");
    drop(slow);
    assert_eq!(breaker.metrics().window.total, 1);
    assert_eq!(feed.made(), 1);
}

#[circuit_breakable(FeedBreaker)]
fn timed_guarded(gaps: Vec<u64>) -> impl Stream<Item = Result<usize, FeedError>> {
    paced_items(gaps)
}

#[derive(ConcurrencyLimitSpec)]
#[spec("streams.limit")]
struct FeedLimit;

#[concurrency_limit(FeedLimit)]
fn limited(feed: Arc<Feed>) -> impl Stream<Item = Result<usize, FeedError>> {
    feed.stream()
}

#[tokio::test(start_paused = true)]
async fn a_place_is_held_until_the_stream_ends_or_is_dropped() {
    let r = registry::<FeedLimit>(table([("limit", int(1))]));
    let _registry = r.set_default();
    let limit = r.sync_scope(FeedLimit::get).expect("limit");
    let feed = Feed::new(3);
    let mut first = Box::pin(limited(Arc::clone(&feed)));
    assert_eq!(limit.in_use(), 0, "not polled: no place");
    assert!(matches!(first.next().await, Some(Ok(0))));
    assert_eq!(limit.in_use(), 1);
    let second = collect(limited(Arc::clone(&feed))).await;
    assert_eq!(second.len(), 1);
    assert!(
        second[0].as_ref().is_err_and(|e| e.contains("FeedLimit")),
        "{second:?}"
    );
    // Ends: the place comes back.
    while first.next().await.is_some() {}
    assert_eq!(limit.in_use(), 0);
    let mut third = Box::pin(limited(Arc::clone(&feed)));
    assert!(matches!(third.next().await, Some(Ok(0))));
    assert_eq!(limit.in_use(), 1);
    drop(third);
    assert_eq!(limit.in_use(), 0, "dropped: the place comes back");
    assert_eq!(feed.made(), 2, "the rejected stream was not made");
}

#[tokio::test(start_paused = true)]
async fn a_block_limit_waits_for_the_stream_ahead_to_end() {
    let r = registry::<FeedLimit>(table([
        ("limit", int(1)),
        ("policy", s("block")),
        ("max_wait", s("1s")),
    ]));
    let _registry = r.set_default();
    let limit = r.sync_scope(FeedLimit::get).expect("limit");
    let feed = Feed::new(2);
    let mut first = Box::pin(limited(Arc::clone(&feed)));
    assert!(matches!(first.next().await, Some(Ok(0))));
    let waiter = tokio::spawn(collect(limited(Arc::clone(&feed))));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(feed.made(), 1, "the second waits for a place");
    drop(first);
    let second = waiter.await.expect("task");
    assert_eq!(second, vec![Ok(0), Ok(1)]);
    assert_eq!(limit.in_use(), 0);
}

#[derive(RateLimiterSpec)]
#[spec("streams.rate")]
struct FeedRate;

#[rate_limited(FeedRate)]
fn paced(feed: Arc<Feed>) -> impl Stream<Item = Result<usize, FeedError>> {
    feed.stream()
}

#[tokio::test(start_paused = true)]
async fn one_rate_permit_per_stream_however_many_items() {
    let r = registry::<FeedRate>(table([
        ("limit_for_period", int(2)),
        ("limit_refresh_period", s("1s")),
    ]));
    let _registry = r.set_default();
    let feed = Feed::new(100);
    for _ in 0..2 {
        assert_eq!(collect(paced(Arc::clone(&feed))).await.len(), 100);
    }
    let third = collect(paced(Arc::clone(&feed))).await;
    assert_eq!(third.len(), 1);
    assert!(
        third[0].as_ref().is_err_and(|e| e.contains("FeedRate")),
        "{third:?}"
    );
    assert_eq!(feed.made(), 2);
}

/// The stack the figures measure: a retry outside a breaker outside a
/// limit, a boxed stream.
#[retryable(FeedRetry)]
#[circuit_breakable(FeedBreaker)]
#[concurrency_limit(FeedLimit)]
fn stacked(
    feed: Arc<Feed>,
) -> std::pin::Pin<Box<dyn Stream<Item = Result<usize, FeedError>> + Send>> {
    Box::pin(feed.stream())
}

fn stack_registry(limit: i128) -> Registry {
    build(
        Registry::builder()
            .spec::<FeedRetry>()
            .spec::<FeedBreaker>()
            .spec::<FeedLimit>(),
        vec![
            (
                FeedRetry::PATH,
                table([("attempts", int(2)), ("delay", s("10ms"))]),
            ),
            (FeedBreaker::PATH, breaker_section(100, 1000, "1h", 1000)),
            (FeedLimit::PATH, table([("limit", int(limit))])),
        ],
    )
}

#[tokio::test(start_paused = true)]
async fn each_attempt_of_a_stacked_stream_takes_its_own_permit_and_place() {
    let r = stack_registry(1);
    let _registry = r.set_default();
    let breaker = r.sync_scope(FeedBreaker::get).expect("breaker");
    let limit = r.sync_scope(FeedLimit::get).expect("limit");
    let feed = Feed::new(4);
    feed.fail_first.store(2, Ordering::SeqCst);
    let items = collect(stacked(Arc::clone(&feed))).await;
    assert_eq!(items, vec![Ok(0), Ok(1), Ok(2), Ok(3)]);
    assert_eq!(feed.made(), 3);
    let m = breaker.metrics();
    assert_eq!(
        (m.window.total, m.window.failures),
        (3, 2),
        "a permit per attempt"
    );
    assert_eq!(limit.in_use(), 0, "each attempt's place came back");
}

#[test]
fn streams_on_two_workers_give_back_every_place() {
    let r = stack_registry(4);
    let rt = r
        .set_default_on(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_time(),
        )
        .build()
        .expect("runtime");
    let limit = r.sync_scope(FeedLimit::get).expect("limit");
    let feed = Feed::new(20);
    let (ended, rejected) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    rt.block_on(async {
        let tasks: Vec<_> = (0..64)
            .map(|t| {
                let (feed, ended, rejected) =
                    (Arc::clone(&feed), Arc::clone(&ended), Arc::clone(&rejected));
                tokio::spawn(async move {
                    for i in 0..20 {
                        let mut s = stacked(Arc::clone(&feed));
                        // Every third stream is dropped after its first item.
                        let take = if (t + i) % 3 == 0 { 1 } else { usize::MAX };
                        let mut n = 0;
                        while let Some(item) = s.next().await {
                            match item {
                                Ok(_) => n += 1,
                                // The limit's rejection, or the retry giving
                                // up on it.
                                Err(FeedError::Resilience(
                                    Error::ConcurrencyLimitReached { .. }
                                    | Error::RetryExhausted(_),
                                )) => {
                                    rejected.fetch_add(1, Ordering::SeqCst);
                                    break;
                                }
                                Err(e) => panic!("unexpected {e}"),
                            }
                            if n == take {
                                break;
                            }
                            tokio::task::yield_now().await;
                        }
                        ended.fetch_add(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("task");
        }
    });
    assert_eq!(ended.load(Ordering::SeqCst), 64 * 20);
    assert!(
        rejected.load(Ordering::SeqCst) < 64 * 20,
        "some streams ran"
    );
    assert_eq!(limit.in_use(), 0, "every place came back");
}

#[derive(resilient_core::TimeoutSpec)]
#[spec("streams.timeout")]
struct FeedTimeout;

/// Items at the given gaps (each after sleeping it), then the end.
fn paced_items(gaps: Vec<u64>) -> impl Stream<Item = Result<usize, FeedError>> + Send {
    futures_util::stream::unfold((0usize, gaps), |(i, gaps)| async move {
        let gap = *gaps.get(i)?;
        tokio::time::sleep(Duration::from_millis(gap)).await;
        Some((Ok(i), (i + 1, gaps)))
    })
}

#[resilient_core::timeout(FeedTimeout)]
fn timed(gaps: Vec<u64>) -> impl Stream<Item = Result<usize, FeedError>> {
    paced_items(gaps)
}

fn timeout_registry(idle: Option<&str>) -> Registry {
    let mut section = table([("duration", s("1s"))]);
    if let Some(idle) = idle {
        section = with(section, "idle", s(idle));
    }
    registry::<FeedTimeout>(section)
}

#[tokio::test(start_paused = true)]
async fn a_first_item_later_than_duration_ends_the_stream_at_duration() {
    let r = timeout_registry(None);
    let _registry = r.set_default();
    let start = Instant::now();
    let items = collect(timed(vec![2_000, 10])).await;
    assert_eq!(items.len(), 1, "{items:?}");
    assert!(
        items[0]
            .as_ref()
            .is_err_and(|e| e.contains("timed out after 1s")),
        "{items:?}"
    );
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    // In time: every item, however long the whole stream takes.
    let items = collect(timed(vec![900, 900, 900])).await;
    assert_eq!(items, vec![Ok(0), Ok(1), Ok(2)]);
}

#[tokio::test(start_paused = true)]
async fn a_gap_longer_than_idle_ends_the_stream_never_early() {
    let r = timeout_registry(Some("400ms"));
    let _registry = r.set_default();
    // Ten items 300 ms apart pass: no gap reaches 400 ms.
    let items = collect(timed(vec![300; 10])).await;
    assert_eq!(items.len(), 10, "{items:?}");
    assert!(items.iter().all(Result::is_ok));
    // Then a gap of 5 s: the stream ends between 400 and 500 ms after its
    // last item (looked at every 100 ms).
    let mut s = Box::pin(timed(vec![100, 100, 5_000]));
    assert!(matches!(s.next().await, Some(Ok(0))));
    assert!(matches!(s.next().await, Some(Ok(1))));
    let last = Instant::now();
    let end = s.next().await;
    let gap = last.elapsed();
    assert!(
        matches!(&end, Some(Err(FeedError::Resilience(Error::Timeout { after, .. }))) if *after == Duration::from_millis(400)),
        "{end:?}"
    );
    assert!(
        gap >= Duration::from_millis(400) && gap <= Duration::from_millis(500),
        "ended {gap:?} after the last item"
    );
    assert!(s.next().await.is_none(), "ended");
}

#[tokio::test(start_paused = true)]
async fn a_disabled_timeout_passes_a_stream_through() {
    let r = registry::<FeedTimeout>(table([("duration", s("1s")), ("enabled", boolean(false))]));
    let _registry = r.set_default();
    let items = collect(timed(vec![5_000])).await;
    assert_eq!(items, vec![Ok(0)]);
}

#[test]
fn an_idle_limit_of_zero_is_a_startup_problem() {
    let section = table([("duration", s("1s")), ("idle", s("0s"))]);
    let problems = Registry::builder()
        .spec::<FeedTimeout>()
        .build(&root(vec![(FeedTimeout::PATH, section)]))
        .expect_err("invalid");
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].key, "idle");
    assert!(problems[0].rule.contains("must be > 0"), "{problems:?}");
}

/// A feed with a cache: the cache's stream replaces the feed's when it
/// fails before its first item.
struct Cached {
    feed: Arc<Feed>,
    cache_made: AtomicUsize,
}

impl Cached {
    #[resilient_core::fallback(method = "cached(from)")]
    #[retryable(FeedRetry)]
    fn events(&self, from: usize) -> impl Stream<Item = Result<usize, FeedError>> + '_ {
        let _ = from;
        self.feed.stream()
    }

    fn cached(
        &self,
        from: usize,
        error: FeedError,
    ) -> impl Stream<Item = Result<usize, FeedError>> + '_ {
        assert!(error.to_string().contains("gave up"), "{error}");
        self.cache_made.fetch_add(1, Ordering::SeqCst);
        futures_util::stream::iter((from..from + 2).map(Ok))
    }
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_fails_before_its_first_item_is_replaced_by_the_fallback_s() {
    let r = retry_registry(1);
    let _registry = r.set_default();
    let cached = Cached {
        feed: Feed::new(3),
        cache_made: AtomicUsize::new(0),
    };
    cached.feed.fail_first.store(5, Ordering::SeqCst);
    let items = collect(cached.events(100)).await;
    assert_eq!(items, vec![Ok(100), Ok(101)], "the cache's items");
    assert_eq!(
        (cached.feed.made(), cached.cache_made.load(Ordering::SeqCst)),
        (2, 1),
        "two attempts, then the fallback once"
    );
    // A feed that answers: the fallback is not called.
    cached.feed.fail_first.store(0, Ordering::SeqCst);
    let items = collect(cached.events(100)).await;
    assert_eq!(items, vec![Ok(0), Ok(1), Ok(2)]);
    assert_eq!(cached.cache_made.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_failure_after_the_first_item_is_not_answered_by_the_fallback() {
    let r = retry_registry(1);
    let _registry = r.set_default();
    let cached = Cached {
        feed: Arc::new(Feed {
            items: 1,
            fail_after: true,
            ..Feed::default()
        }),
        cache_made: AtomicUsize::new(0),
    };
    let items = collect(cached.events(100)).await;
    assert_eq!(items, vec![Ok(0), Err("the feed failed".into())]);
    assert_eq!(cached.cache_made.load(Ordering::SeqCst), 0);
}
