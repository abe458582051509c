//! A stream of 1000 items under `#[retryable] #[circuit_breakable]
//! #[timeout]` (the timeout with an idle limit) beside the bare stream,
//! each consumed to its end with `StreamExt::next` on a current-thread
//! runtime, installed registry, nothing failing; and each layer alone, to
//! tell where the stack's time per item goes. A figure is the time of one
//! whole stream: its setup (a permit, a timer, the idle limit's one clock
//! read) spread over 1000 items, and each item's way through the layers.

use std::hint::black_box;
use std::pin::pin;

use criterion::{Criterion, Throughput};
use futures_util::StreamExt;
use resilient_core::stream::Stream;
use resilient_core::{circuit_breakable, retryable, timeout, TimeoutSpec};

use super::{current_thread, install, Breaker, Failed, Retry, Timeout};

/// Items per stream.
pub const ITEMS: u64 = 1_000;

/// The stream's timeout: `duration` 1s to the first item and `idle` 1s
/// between items (the bench's [`Timeout`] has no idle limit).
#[derive(TimeoutSpec)]
#[spec("bench.stream_timeout")]
pub struct StreamTimeout;

/// The stream every row wraps: `n` numbers, ready at once.
fn bare(n: u64) -> impl Stream<Item = Result<u64, Failed>> {
    futures_util::stream::iter((0..n).map(Ok))
}

#[retryable(Retry)]
#[circuit_breakable(Breaker)]
#[timeout(StreamTimeout)]
fn three(n: u64) -> impl Stream<Item = Result<u64, Failed>> {
    futures_util::stream::iter((0..n).map(Ok))
}

#[retryable(Retry)]
fn retry_only(n: u64) -> impl Stream<Item = Result<u64, Failed>> {
    futures_util::stream::iter((0..n).map(Ok))
}

#[circuit_breakable(Breaker)]
fn breaker_only(n: u64) -> impl Stream<Item = Result<u64, Failed>> {
    futures_util::stream::iter((0..n).map(Ok))
}

#[timeout(StreamTimeout)]
fn timeout_idle_only(n: u64) -> impl Stream<Item = Result<u64, Failed>> {
    futures_util::stream::iter((0..n).map(Ok))
}

/// Without an idle limit: the timer is done at the first item.
#[timeout(Timeout)]
fn timeout_only(n: u64) -> impl Stream<Item = Result<u64, Failed>> {
    futures_util::stream::iter((0..n).map(Ok))
}

/// Consumes `stream` to its end, each item through `black_box` (so the
/// bare stream's sum is not folded away); the sum of its items, or `None`
/// at the first error.
async fn drain(stream: impl Stream<Item = Result<u64, Failed>>) -> Option<u64> {
    let mut stream = pin!(stream);
    let mut sum = 0u64;
    while let Some(item) = stream.next().await {
        sum = sum.wrapping_add(black_box(item).ok()?);
    }
    Some(sum)
}

pub fn streams(c: &mut Criterion) {
    install();
    let rt = current_thread();
    // Every stream must give all its items, or its figure means nothing.
    let sum = Some(ITEMS * (ITEMS - 1) / 2);
    let checks = [
        ("bare", rt.block_on(drain(bare(ITEMS)))),
        ("3 attributes", rt.block_on(drain(three(ITEMS)))),
        ("#[retryable]", rt.block_on(drain(retry_only(ITEMS)))),
        (
            "#[circuit_breakable]",
            rt.block_on(drain(breaker_only(ITEMS))),
        ),
        (
            "#[timeout] idle",
            rt.block_on(drain(timeout_idle_only(ITEMS))),
        ),
        ("#[timeout]", rt.block_on(drain(timeout_only(ITEMS)))),
    ];
    for (name, got) in checks {
        assert_eq!(got, sum, "{name}: the stream did not give its items");
    }
    let mut g = c.benchmark_group("streams");
    // Criterion prints items/s beside the time of one 1000-item stream.
    g.throughput(Throughput::Elements(ITEMS));
    g.bench_function("bare stream (baseline)", |bench| {
        bench
            .to_async(&rt)
            .iter(|| async { black_box(drain(bare(black_box(ITEMS))).await) });
    });
    g.bench_function(
        "resilient retry + breaker + timeout (idle), installed registry",
        |bench| {
            bench
                .to_async(&rt)
                .iter(|| async { black_box(drain(three(black_box(ITEMS))).await) });
        },
    );
    g.bench_function("resilient #[retryable] alone", |bench| {
        bench
            .to_async(&rt)
            .iter(|| async { black_box(drain(retry_only(black_box(ITEMS))).await) });
    });
    g.bench_function("resilient #[circuit_breakable] alone", |bench| {
        bench
            .to_async(&rt)
            .iter(|| async { black_box(drain(breaker_only(black_box(ITEMS))).await) });
    });
    g.bench_function("resilient #[timeout] (idle) alone", |bench| {
        bench
            .to_async(&rt)
            .iter(|| async { black_box(drain(timeout_idle_only(black_box(ITEMS))).await) });
    });
    g.bench_function("resilient #[timeout] (no idle) alone", |bench| {
        bench
            .to_async(&rt)
            .iter(|| async { black_box(drain(timeout_only(black_box(ITEMS))).await) });
    });
    g.finish();
}
