//! The attempt a retry is on, as the code it runs sees it
//! (`retry::current_attempt`), and retries nested in retries: a retried fn
//! whose body calls another retried fn makes up to the product of their
//! calls, which the inner retry detects, warns of once per pair of specs
//! and counts. Every test counts the body's calls.

#![allow(clippy::expect_used, clippy::unwrap_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::capture::{Capture, Meters};
use support::*;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use resilient_core::retry::current_attempt;
use resilient_core::settings::Value;
use resilient_core::{retryable, Error, Registry, RetrySpec, Spec};
use tracing::Level;

#[derive(Debug, thiserror::Error)]
enum TestError {
    #[error("down")]
    Down,
    #[error(transparent)]
    Resilience(#[from] Error),
}

#[derive(RetrySpec)]
#[spec("nested.outer")]
struct Outer;

#[derive(RetrySpec)]
#[spec("nested.other_outer")]
struct OtherOuter;

#[derive(RetrySpec)]
#[spec("nested.inner")]
struct Inner;

fn section(attempts: i128) -> Value {
    metered(table([("delay", s("10ms")), ("attempts", int(attempts))]))
}

/// A dependency that always fails, counting the calls it receives.
static CALLS: AtomicU64 = AtomicU64::new(0);

/// The tests that count `CALLS` run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

#[retryable(Inner)]
async fn inner() -> Result<u64, TestError> {
    CALLS.fetch_add(1, Ordering::Relaxed);
    Err(TestError::Down)
}

#[retryable(Outer)]
async fn outer() -> Result<u64, TestError> {
    inner().await
}

#[retryable(OtherOuter)]
async fn other_outer() -> Result<u64, TestError> {
    inner().await
}

fn paused() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap()
}

/// Three calls to `attempts = 2` inside three to `attempts = 2`: 9 calls
/// of the dependency per outer call. The inner retry sees the outer one
/// from the outer's first retry on (the first call of a call marks
/// nothing): one WARN per pair of specs, with the product, and one count
/// per inner call that retried inside an outer retry.
#[test]
fn a_retry_inside_a_retry_is_warned_of_once_per_pair_and_counted() {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    CALLS.store(0, Ordering::Relaxed);
    let meters = Meters::default();
    let capture = Capture::default();
    let _subscriber = tracing::subscriber::set_default(capture.clone());
    let _recorder = metrics::set_default_local_recorder(&meters);
    let r = build(
        Registry::builder()
            .spec::<Outer>()
            .spec::<OtherOuter>()
            .spec::<Inner>(),
        vec![
            (Outer::PATH, section(2)),
            (OtherOuter::PATH, section(1)),
            (Inner::PATH, section(2)),
        ],
    );
    let rt = paused();
    rt.block_on(r.scope(async {
        for _ in 0..3 {
            assert!(matches!(outer().await, Err(TestError::Resilience(_))));
        }
    }));
    let after_outer = CALLS.load(Ordering::Relaxed);
    rt.block_on(r.scope(async {
        assert!(matches!(other_outer().await, Err(TestError::Resilience(_))));
    }));
    let after_other = CALLS.load(Ordering::Relaxed) - after_outer;
    let warned: Vec<_> = capture
        .at("resilient::retry", Level::WARN)
        .into_iter()
        .filter(|l| l.fields.contains_key("outer_path"))
        .collect();
    for line in &warned {
        println!("{}", line.message);
    }
    let nested = |outer: &str| {
        meters.counter(
            "resilient_retry_nested_total",
            &[
                ("spec", "Inner"),
                ("path", "nested.inner"),
                ("outer", outer),
            ],
        )
    };
    println!(
        "calls: {after_outer} for 3 outer calls, {after_other} for 1 other; nested counts {:?}, {:?}",
        nested("nested.outer"),
        nested("nested.other_outer")
    );
    assert_eq!(after_outer, 3 * 9, "3 × 3 calls per outer call");
    assert_eq!(after_other, 2 * 3);
    assert_eq!(warned.len(), 2, "one WARN per pair of specs");
    assert_eq!(warned[0].fields["outer_path"], "nested.outer");
    assert_eq!(warned[0].fields["calls"], "9");
    assert_eq!(
        warned[0].message,
        "retry `nested.inner` runs inside retry `nested.outer`: up to 3 × 3 = 9 calls of the inner fn per outer call; retry at one level only, or bound both with a retry budget"
    );
    assert_eq!(warned[1].fields["outer_path"], "nested.other_outer");
    assert_eq!(warned[1].fields["calls"], "6");
    // Each outer call: its 2 retries each run an inner call that retries.
    assert_eq!(nested("nested.outer"), Some(3 * 2));
    assert_eq!(nested("nested.other_outer"), Some(1));
}

/// A retry that is not inside another one, and a retried fn called by a
/// body that succeeds at once, say nothing and register no series.
#[test]
fn a_retry_alone_or_inside_a_first_call_is_not_nested() {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    CALLS.store(0, Ordering::Relaxed);
    let meters = Meters::default();
    let capture = Capture::default();
    let _subscriber = tracing::subscriber::set_default(capture.clone());
    let _recorder = metrics::set_default_local_recorder(&meters);
    let r = build(
        Registry::builder().spec::<Outer>().spec::<Inner>(),
        vec![(Outer::PATH, section(0)), (Inner::PATH, section(2))],
    );
    let rt = paused();
    rt.block_on(r.scope(async {
        assert!(matches!(inner().await, Err(TestError::Resilience(_))));
        // `attempts = 0` outside: the inner fn runs in a first call only.
        assert!(matches!(outer().await, Err(TestError::Resilience(_))));
    }));
    assert_eq!(CALLS.load(Ordering::Relaxed), 6);
    let warned = capture
        .at("resilient::retry", Level::WARN)
        .into_iter()
        .filter(|l| l.fields.contains_key("outer_path"))
        .count();
    assert_eq!(warned, 0);
    assert!(
        !meters
            .series()
            .iter()
            .any(|s| s.starts_with("resilient_retry_nested_total")),
        "{:?}",
        meters.series()
    );
}

#[derive(RetrySpec)]
#[spec("nested.seen")]
struct Seen;

static SEEN: Mutex<Vec<Option<(u64, &'static str)>>> = Mutex::new(Vec::new());

fn record() -> Result<u64, TestError> {
    let a = current_attempt();
    let mut seen = SEEN.lock().unwrap();
    seen.push(a.map(|a| (a.previous(), a.path())));
    if seen.len() < 3 {
        Err(TestError::Down)
    } else {
        Ok(seen.len() as u64)
    }
}

#[retryable(Seen)]
async fn seen_async() -> Result<u64, TestError> {
    tokio::task::yield_now().await;
    record()
}

#[retryable(Seen)]
fn seen_blocking() -> Result<u64, TestError> {
    record()
}

fn seen() -> Vec<Option<(u64, &'static str)>> {
    std::mem::take(&mut *SEEN.lock().unwrap())
}

/// The body sees no attempt on its first call, then the attempts made
/// before each retry: through the attribute on an async fn and on a
/// blocking fn, and through the handle; and nothing outside.
#[test]
fn the_body_sees_the_attempts_made_before_each_retry() {
    let r = registry::<Seen>(table([("delay", s("0s")), ("attempts", int(3))]));
    let _default = r.set_default();
    let expected = vec![None, Some((1, "nested.seen")), Some((2, "nested.seen"))];
    seen();
    let rt = paused();
    assert_eq!(rt.block_on(seen_async()).unwrap(), 3);
    assert_eq!(seen(), expected, "async fn");
    assert_eq!(seen_blocking().unwrap(), 3);
    assert_eq!(seen(), expected, "blocking fn");
    let handle = Seen::get().unwrap();
    let out: Result<u64, TestError> = rt.block_on(handle.call(|| async {
        tokio::task::yield_now().await;
        record()
    }));
    assert_eq!(out.unwrap(), 3);
    assert_eq!(seen(), expected, "handle");
    assert!(current_attempt().is_none(), "nothing left marked");
}

#[derive(RetrySpec)]
#[spec("nested.threads")]
struct Threads;

static LEAKED: AtomicU64 = AtomicU64::new(0);
static MARKED: AtomicU64 = AtomicU64::new(0);

#[retryable(Threads)]
async fn flaky(fail: u64) -> Result<u64, TestError> {
    let mut n = 0;
    for _ in 0..4 {
        tokio::task::yield_now().await;
        if current_attempt().is_some() {
            n += 1;
        }
    }
    MARKED.fetch_add(n, Ordering::Relaxed);
    if current_attempt().map_or(0, |a| a.previous()) < fail {
        Err(TestError::Down)
    } else {
        Ok(n)
    }
}

/// On two worker threads, retried calls that yield inside their body and
/// plain tasks that yield between checks: the mark is the body's, never
/// seen by a task polled on the same thread in between.
#[test]
fn the_mark_stays_with_the_attempt_on_worker_threads() {
    let r = registry::<Threads>(table([("delay", s("0s")), ("attempts", int(2))]));
    let rt = two_workers();
    rt.block_on(async {
        let mut tasks = Vec::new();
        for _ in 0..50 {
            let r = r.clone();
            tasks.push(tokio::spawn(async move { r.scope(flaky(2)).await }));
            tasks.push(tokio::spawn(async {
                for _ in 0..20 {
                    tokio::task::yield_now().await;
                    if current_attempt().is_some() {
                        LEAKED.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Ok(0)
            }));
        }
        for t in tasks {
            assert!(t.await.unwrap().is_ok());
        }
    });
    // Each retried call: 4 checks on each of its 2 retries.
    assert_eq!(MARKED.load(Ordering::Relaxed), 50 * 2 * 4);
    assert_eq!(LEAKED.load(Ordering::Relaxed), 0);
}

#[derive(RetrySpec)]
#[spec("nested.panics")]
struct Panics;

static PANIC_CALLS: AtomicU64 = AtomicU64::new(0);

#[retryable(Panics)]
fn panics_on_retry() -> Result<u64, TestError> {
    if PANIC_CALLS.fetch_add(1, Ordering::Relaxed) == 0 {
        return Err(TestError::Down);
    }
    panic!("the body panics on its retry");
}

/// A body that panics on a retry leaves the thread unmarked.
#[test]
fn a_panicking_retry_leaves_nothing_marked() {
    let r = registry::<Panics>(table([("delay", s("0s")), ("attempts", int(2))]));
    let _default = r.set_default();
    let out = std::panic::catch_unwind(panics_on_retry);
    assert!(out.is_err());
    assert_eq!(PANIC_CALLS.load(Ordering::Relaxed), 2);
    assert!(current_attempt().is_none());
}
