//! The success path allocates nothing: a counting global allocator watches
//! calls through a breaker and a retry, imperative and annotated, a hedged
//! call whose first attempt wins (at once, or after waiting, which arms the
//! hedge's delay), and calls on keyed instances whose keys exist.

#![allow(clippy::expect_used)] // a test that panics on an unexpected outcome is the point

use resilient_core::settings::Value;
use resilient_core::{
    circuit_breakable, concurrency_limit, hedged, rate_limited, retryable, timeout,
    CircuitBreakerSpec, ConcurrencyLimitSpec, HedgingSpec, RateLimiterSpec, Registry, RetrySpec,
    TimeoutSpec,
};

mod counting;
use counting::{allocations, Counting};

#[global_allocator]
static GLOBAL: Counting = Counting;

#[derive(CircuitBreakerSpec)]
#[spec("alloc.breaker")]
struct Breaker;

#[derive(RetrySpec)]
#[spec("alloc.retry")]
struct Retry;

#[derive(TimeoutSpec)]
#[spec("alloc.timeout")]
struct Timeout;

#[derive(ConcurrencyLimitSpec)]
#[spec("alloc.concurrency")]
struct Concurrency;

#[derive(RateLimiterSpec)]
#[spec("alloc.rate")]
struct Rate;

#[derive(HedgingSpec)]
#[spec("alloc.hedging")]
struct Hedge;

/// A retry with adaptive throttling: a success counts into its window.
#[derive(RetrySpec)]
#[spec("alloc.throttled")]
struct Throttled;

#[retryable(Throttled)]
async fn throttled(x: u64) -> Result<u64, Failed> {
    Ok(x + 5)
}

#[derive(Debug, thiserror::Error)]
#[error(transparent)]
struct Failed(#[from] resilient_core::Error);

#[rate_limited(Rate)]
#[concurrency_limit(Concurrency)]
#[timeout(Timeout)]
async fn limited(x: u64) -> Result<u64, Failed> {
    Ok(x + 2)
}

#[circuit_breakable(Breaker)]
#[retryable(Retry)]
async fn annotated(x: u64) -> Result<u64, Failed> {
    Ok(x + 1)
}

/// One instance per host and per tenant: a call on keys that have their
/// instances allocates nothing either.
#[rate_limited(Rate, key = tenant)]
#[concurrency_limit(Concurrency, key = tenant)]
#[circuit_breakable(Breaker, key = host)]
async fn keyed(host: &str, tenant: u64) -> Result<u64, Failed> {
    let _ = host;
    Ok(tenant + 4)
}

const HOSTS: [&str; 4] = ["a.example", "b.example", "c.example", "d.example"];

#[hedged(Hedge)]
async fn hedged(x: u64, wait: bool) -> Result<u64, Failed> {
    if wait {
        // Pending once: the hedge's delay is armed, then the attempt wins.
        tokio::task::yield_now().await;
    }
    Ok(x + 3)
}

fn table<const N: usize>(pairs: [(&str, Value); N]) -> Value {
    Value::Table(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

fn registry(kind: &str) -> Registry {
    let breaker = table([
        ("type", Value::Str(kind.into())),
        ("failure_rate_threshold", Value::Int(50)),
        ("minimum_required_calls", Value::Int(10)),
        ("wait_duration_in_open_state", Value::Str("1s".into())),
        ("permitted_calls_in_half_open_state", Value::Int(1)),
        ("count_based", table([("window_size", Value::Int(100))])),
    ]);
    let retry = table([
        ("delay", Value::Str("1ms".into())),
        ("attempts", Value::Int(3)),
    ]);
    let root = table([(
        "alloc",
        table([
            ("breaker", breaker),
            ("retry", retry),
            (
                "timeout",
                table([
                    ("duration", Value::Str("1s".into())),
                    // For streams only: an async fn's call ignores it.
                    ("idle", Value::Str("1s".into())),
                ]),
            ),
            ("concurrency", table([("limit", Value::Int(4))])),
            ("hedging", table([("delay", Value::Str("1s".into()))])),
            (
                "rate",
                table([
                    ("type", Value::Str("token_bucket".into())),
                    ("limit_for_period", Value::Int(1_000_000)),
                    ("limit_refresh_period", Value::Str("1ms".into())),
                ]),
            ),
        ]),
    )]);
    Registry::builder()
        .spec::<Breaker>()
        .spec::<Retry>()
        .spec::<Timeout>()
        .spec::<Concurrency>()
        .spec::<Rate>()
        .spec::<Hedge>()
        .build(&root)
        .expect("valid")
}

#[test]
fn successful_calls_allocate_nothing() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    for kind in ["striped_approx", "ring_buffer", "fixed_window"] {
        let r = registry(kind);
        let allocated = rt.block_on(r.scope(async {
            let breaker = Breaker::get().expect("configured");
            let retry = Retry::get().expect("configured");
            // Warm up: thread-locals and the like may allocate once.
            let _ = annotated(0).await;
            let _ = limited(0).await;
            let _ = hedged(0, true).await;
            for host in HOSTS {
                for tenant in 0..4 {
                    let _ = keyed(host, tenant).await;
                }
            }
            breaker.try_acquire().expect("closed").success();

            let before = allocations();
            for i in 0..1_000 {
                breaker.try_acquire().expect("closed").success();
                let n = retry
                    .call(|| async move { Ok::<u64, Failed>(i) })
                    .await
                    .expect("ok");
                assert_eq!(n, i);
                assert_eq!(annotated(i).await.expect("ok"), i + 1);
                assert_eq!(limited(i).await.expect("ok"), i + 2);
                assert_eq!(hedged(i, i % 2 == 0).await.expect("ok"), i + 3);
                let host = HOSTS[(i % 4) as usize];
                assert_eq!(keyed(host, i % 4).await.expect("ok"), i % 4 + 4);
            }
            allocations() - before
        }));
        assert_eq!(
            allocated, 0,
            "{kind}: {allocated} allocations in 6000 successful calls"
        );
    }
}

/// With and without `first_calls = true`: a first attempt the throttle
/// asks about allocates nothing either.
#[test]
fn a_throttled_retry_s_successes_allocate_nothing() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    for first_calls in [false, true] {
        let root = table([(
            "alloc",
            table([(
                "throttled",
                table([
                    ("delay", Value::Str("1ms".into())),
                    ("attempts", Value::Int(3)),
                    (
                        "throttle",
                        table([
                            ("k", Value::Float(2.0)),
                            ("window", Value::Str("2m".into())),
                            ("first_calls", Value::Bool(first_calls)),
                        ]),
                    ),
                ]),
            )]),
        )]);
        let r = Registry::builder()
            .spec::<Throttled>()
            .build(&root)
            .expect("valid");
        let allocated = rt.block_on(r.scope(async {
            let handle = Throttled::get().expect("configured");
            let _ = throttled(0).await;
            let before = allocations();
            for i in 0..1_000 {
                assert_eq!(throttled(i).await.expect("ok"), i + 5);
                let n = handle
                    .call(|| async move { Ok::<u64, Failed>(i) })
                    .await
                    .expect("ok");
                assert_eq!(n, i);
            }
            allocations() - before
        }));
        assert_eq!(
            allocated, 0,
            "first_calls = {first_calls}: {allocated} allocations in 2000 successful calls"
        );
        let counts = r
            .sync_scope(Throttled::get)
            .expect("configured")
            .throttle_counts()
            .expect("throttled");
        assert_eq!((counts.requests, counts.accepts), (2001, 2001));
    }
}

/// The stack the stream figures measure: retry, breaker and timeout with
/// an idle limit around a stream of numbers.
#[retryable(Retry)]
#[circuit_breakable(Breaker)]
#[timeout(Timeout)]
fn numbers(n: u64) -> impl resilient_core::stream::Stream<Item = Result<u64, Failed>> {
    futures_util::stream::iter((0..n).map(Ok))
}

#[test]
fn a_stream_s_items_allocate_nothing() {
    use futures_util::StreamExt;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let r = registry("striped_approx");
    let allocated = rt.block_on(r.scope(async {
        // Warm up: thread-locals and the like may allocate once.
        assert_eq!(numbers(10).count().await, 10);
        let before = allocations();
        let mut s = std::pin::pin!(numbers(1_000));
        let mut sum = 0;
        while let Some(item) = s.next().await {
            sum += item.expect("ok");
        }
        assert_eq!(sum, 499_500);
        allocations() - before
    }));
    assert_eq!(
        allocated, 0,
        "{allocated} allocations for a 1000-item stream"
    );
}
