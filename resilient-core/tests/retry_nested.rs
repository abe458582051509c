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

/// Three calls to `attempts = 2` inside three to `attempts = 2`: 9 calls
/// of the dependency per outer call. The inner retry sees the outer one
/// in each of the outer's calls, the first included: one WARN per pair of
/// specs, with the product, and one count per inner call that retried
/// inside an outer retry's call.
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
        "retry `nested.inner` runs inside retry `nested.outer`: up to 3 × 3 = 9 calls of the inner fn per outer call; retry at one level only, or set `share_outer_budget = true` at `nested.inner` so that the outer retry's budget bounds both"
    );
    assert_eq!(warned[1].fields["outer_path"], "nested.other_outer");
    assert_eq!(warned[1].fields["calls"], "6");
    // Each outer call: each of its 3 calls runs an inner call that
    // retries (the outer's first call is marked too).
    assert_eq!(nested("nested.outer"), Some(3 * 3));
    assert_eq!(nested("nested.other_outer"), Some(2));
}

/// A retry that is not inside another one, and one inside a retry that
/// calls once (`attempts = 0`: nothing multiplied), say nothing and
/// register no series.
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

#[derive(RetrySpec)]
#[spec("nested.budgeted")]
struct Budgeted;

#[derive(RetrySpec)]
#[spec("nested.sharing")]
struct Sharing;

/// The outer spec's budget: 2 tokens to start with, no refill worth a
/// token within a test (a success refunds 0.1).
fn budgeted() -> Value {
    table([
        ("delay", s("10ms")),
        ("attempts", int(2)),
        (
            "retry_budget",
            table([
                ("ratio", Value::Float(0.1)),
                ("tokens_max", int(10)),
                ("tokens_initial", int(2)),
            ]),
        ),
    ])
}

fn sharing(share: bool) -> Value {
    table([
        ("delay", s("10ms")),
        ("attempts", int(2)),
        ("share_outer_budget", Value::Bool(share)),
    ])
}

static SHARED_CALLS: AtomicU64 = AtomicU64::new(0);

#[retryable(Sharing)]
async fn sharing_inner() -> Result<u64, TestError> {
    SHARED_CALLS.fetch_add(1, Ordering::Relaxed);
    Err(TestError::Down)
}

#[retryable(Budgeted)]
async fn budgeted_outer() -> Result<u64, TestError> {
    sharing_inner().await
}

#[retryable(Outer)]
async fn unbudgeted_outer() -> Result<u64, TestError> {
    sharing_inner().await
}

/// The nested-retry WARNs logged.
fn nested_warnings(capture: &Capture) -> Vec<String> {
    capture
        .at("resilient::retry", Level::WARN)
        .into_iter()
        .filter(|l| l.fields.contains_key("outer_path"))
        .map(|l| l.message)
        .collect()
}

/// Calls of the always-failing dependency in one outer call, the outer
/// budget's tokens left after it, and the nested-retry WARNs.
fn one_outer_call(share: bool) -> (u64, Option<f64>, Vec<String>) {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let capture = Capture::default();
    let _subscriber = tracing::subscriber::set_default(capture.clone());
    SHARED_CALLS.store(0, Ordering::Relaxed);
    let r = build(
        Registry::builder().spec::<Budgeted>().spec::<Sharing>(),
        vec![
            (Budgeted::PATH, budgeted()),
            (Sharing::PATH, sharing(share)),
        ],
    );
    let rt = paused();
    rt.block_on(r.scope(async {
        assert!(matches!(
            budgeted_outer().await,
            Err(TestError::Resilience(_))
        ));
    }));
    let tokens = r
        .sync_scope(Budgeted::get)
        .ok()
        .and_then(|h| h.budget_tokens());
    let calls = SHARED_CALLS.load(Ordering::Relaxed);
    (calls, tokens, nested_warnings(&capture))
}

/// `share_outer_budget = true`: the inner spec's retries take the outer
/// spec's tokens, so that one budget of 2 bounds the retries of both
/// levels: the inner call retries twice on them (3 calls), and the outer
/// retry finds its budget empty. Without it, the inner spec (which has no
/// budget) retries freely inside each of the outer's 3 calls: 9.
#[test]
fn an_inner_retry_sharing_the_outer_budget_is_bounded_by_it() {
    let (shared, shared_left, shared_warned) = one_outer_call(true);
    let (own, own_left, own_warned) = one_outer_call(false);
    println!("share_outer_budget: {shared} calls, outer tokens left {shared_left:?}; without: {own} calls, {own_left:?}");
    assert_eq!(shared, 3, "2 inner retries on the outer's 2 tokens");
    assert_eq!(shared_left, Some(0.0));
    assert_eq!(own, 9, "3 × 3 without a shared budget");
    assert_eq!(
        own_left,
        Some(0.0),
        "the outer's own 2 retries took its 2 tokens"
    );
    // Bounded as asked: nothing to warn of; without it, the product.
    assert_eq!(shared_warned, Vec::<String>::new());
    assert_eq!(own_warned.len(), 1, "{own_warned:?}");
    assert!(
        own_warned[0].contains("up to 3 × 3 = 9 calls"),
        "{own_warned:?}"
    );
}

/// `share_outer_budget = true` inside an outer spec that has no budget has
/// no effect: the inner spec retries on its own (3 × 3 calls), and one WARN
/// says so and what to change.
#[test]
fn sharing_the_budget_of_an_outer_spec_without_one_is_warned_of() {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let capture = Capture::default();
    let _subscriber = tracing::subscriber::set_default(capture.clone());
    SHARED_CALLS.store(0, Ordering::Relaxed);
    let r = build(
        Registry::builder().spec::<Outer>().spec::<Sharing>(),
        vec![(Outer::PATH, section(2)), (Sharing::PATH, sharing(true))],
    );
    let rt = paused();
    rt.block_on(r.scope(async {
        for _ in 0..2 {
            assert!(matches!(
                unbudgeted_outer().await,
                Err(TestError::Resilience(_))
            ));
        }
    }));
    let warned = nested_warnings(&capture);
    println!("{} calls; {warned:?}", SHARED_CALLS.load(Ordering::Relaxed));
    assert_eq!(SHARED_CALLS.load(Ordering::Relaxed), 2 * 9);
    assert_eq!(
        warned,
        ["retry `nested.sharing` runs inside retry `nested.outer` with `share_outer_budget = true`, which has no effect: `nested.outer` has no `retry_budget`, so up to 3 × 3 = 9 calls of the inner fn per outer call; give `nested.outer` a `retry_budget`"]
    );
}

/// A misspelt `share_outer_budget` is an unknown key with the right one
/// suggested, never a setting silently left at `false`.
#[test]
fn a_misspelt_share_outer_budget_is_a_problem() {
    let mut section = sharing(true);
    if let Value::Table(t) = &mut section {
        let v = t.remove("share_outer_budget").unwrap();
        t.insert("share_outer_budgets".into(), v);
    }
    let err = Registry::builder()
        .spec::<Sharing>()
        .build(&root(vec![(Sharing::PATH, section)]))
        .map(|_| ())
        .expect_err("a problem");
    let text = format!("{err:?}");
    println!("{text}");
    assert!(text.contains("share_outer_budgets"), "{text}");
    assert!(text.contains("`share_outer_budget`"), "{text}");
}
