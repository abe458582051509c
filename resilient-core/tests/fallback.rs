//! `#[fallback]` and whole chains, on tokio's paused clock: every test counts
//! body runs, fallback runs and what each layer recorded.

#![allow(clippy::expect_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::*;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use resilient_core::circuit_breaker::{Counts, State};
use resilient_core::settings::Value;
use resilient_core::{
    circuit_breakable, concurrency_limit, fallback, rate_limited, retryable, timeout,
    CircuitBreakerSpec, ConcurrencyLimitSpec, Error, RateLimiterSpec, Registry, RegistryBuilder,
    RetrySpec, TimeoutSpec,
};
use tokio::time::Instant;

// ---------------------------------------------------------------- fixtures

#[derive(Debug, thiserror::Error)]
enum PetError {
    #[error("unavailable")]
    Unavailable,
    #[error("not found")]
    NotFound,
    #[error(transparent)]
    Resilience(#[from] Error),
}

#[derive(RetrySpec)]
#[spec("chain.retry")]
struct Retry;

#[derive(CircuitBreakerSpec)]
#[spec("chain.breaker")]
struct Breaker;

#[derive(TimeoutSpec)]
#[spec("chain.timeout")]
struct Timeout;

#[derive(ConcurrencyLimitSpec)]
#[spec("chain.concurrency")]
struct Concurrency;

#[derive(RateLimiterSpec)]
#[spec("chain.rate")]
struct Rate;

/// Settings of every spec of this file; `overrides` replace whole sections.
fn registry(overrides: Vec<(&str, Value)>) -> Registry {
    let mut sections = std::collections::BTreeMap::from([
        (
            "retry".to_owned(),
            table([("delay", s("100ms")), ("attempts", int(2))]),
        ),
        (
            "breaker".to_owned(),
            table([
                ("type", s("ring_buffer")),
                ("failure_rate_threshold", int(100)),
                ("minimum_required_calls", int(3)),
                ("wait_duration_in_open_state", s("1m")),
                ("permitted_calls_in_half_open_state", int(1)),
                ("count_based", table([("window_size", int(3))])),
            ]),
        ),
        ("timeout".to_owned(), table([("duration", s("50ms"))])),
        ("concurrency".to_owned(), table([("limit", int(1))])),
        (
            "rate".to_owned(),
            table([
                ("limit_for_period", int(2)),
                ("limit_refresh_period", s("1h")),
            ]),
        ),
    ]);
    for (k, v) in overrides {
        sections.insert(k.to_owned(), v);
    }
    let root = table([("chain", Value::Table(sections))]);
    let builder: RegistryBuilder = Registry::builder()
        .spec::<Retry>()
        .spec::<Breaker>()
        .spec::<Timeout>()
        .spec::<Concurrency>()
        .spec::<Rate>();
    builder.build(&root).expect("valid settings")
}

#[derive(Default)]
struct Counter(AtomicU32);

impl Counter {
    fn hit(&self) -> u32 {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }
    fn get(&self) -> u32 {
        self.0.load(Ordering::SeqCst)
    }
}

// ---------------------------------------------------------------- the fallback itself

#[derive(Default)]
struct Store {
    body: Counter,
    fallback: Counter,
}

impl Store {
    #[fallback(method = "cached(id)")]
    async fn find(&self, id: u64) -> Result<String, PetError> {
        self.body.hit();
        if id == 0 {
            Err(PetError::NotFound)
        } else {
            Err(PetError::Unavailable)
        }
    }

    /// Sync, without the error.
    fn cached(&self, id: u64) -> Result<String, PetError> {
        self.fallback.hit();
        Ok(format!("cached {id}"))
    }

    #[fallback(method = "explain(id)")]
    async fn find_explained(&self, id: u64) -> Result<String, PetError> {
        self.body.hit();
        Err(PetError::Unavailable)
    }

    /// Async, with the error as its last parameter.
    async fn explain(&self, id: u64, error: PetError) -> Result<String, PetError> {
        self.fallback.hit();
        Ok(format!("{id} because {error}"))
    }

    #[fallback(method = "cached(id)", when = is_unavailable)]
    async fn find_when(&self, id: u64) -> Result<String, PetError> {
        self.body.hit();
        Err(if id == 0 {
            PetError::NotFound
        } else {
            PetError::Unavailable
        })
    }

    #[fallback(method = "cached(id)", on = resilience)]
    #[circuit_breakable(Breaker)]
    async fn find_on_resilience(&self, id: u64) -> Result<String, PetError> {
        self.body.hit();
        Err(PetError::Unavailable)
    }

    #[fallback(method = "cached(id)", on = timeout)]
    #[timeout(Timeout)]
    async fn find_on_timeout(&self, id: u64, ms: u64) -> Result<String, PetError> {
        self.body.hit();
        tokio::time::sleep(Duration::from_millis(ms)).await;
        Err(PetError::Unavailable)
    }
}

fn is_unavailable(e: &PetError) -> bool {
    matches!(e, PetError::Unavailable)
}

#[tokio::test]
async fn a_failed_call_answers_with_the_fallback() {
    let store = Store::default();
    assert_eq!(store.find(7).await.ok().as_deref(), Some("cached 7"));
    assert_eq!((store.body.get(), store.fallback.get()), (1, 1));
}

#[tokio::test]
async fn an_async_fallback_gets_the_error_as_its_last_parameter() {
    let store = Store::default();
    assert_eq!(
        store.find_explained(3).await.ok().as_deref(),
        Some("3 because unavailable")
    );
    assert_eq!((store.body.get(), store.fallback.get()), (1, 1));
}

#[tokio::test]
async fn a_predicate_narrows_the_errors_the_fallback_handles() {
    let store = Store::default();
    assert_eq!(store.find_when(1).await.ok().as_deref(), Some("cached 1"));
    let out = store.find_when(0).await;
    assert!(
        matches!(out, Err(PetError::NotFound)),
        "passes through: {out:?}"
    );
    assert_eq!(store.fallback.get(), 1);
}

#[tokio::test(start_paused = true)]
async fn on_resilience_leaves_body_errors_alone_and_answers_rejections() {
    let r = registry(vec![]);
    let store = Store::default();
    for _ in 0..3 {
        let out = r.scope(store.find_on_resilience(1)).await;
        assert!(
            matches!(out, Err(PetError::Unavailable)),
            "body errors pass: {out:?}"
        );
    }
    // The breaker opened on the third failure: its rejection is answered.
    let out = r.scope(store.find_on_resilience(1)).await;
    assert_eq!(out.ok().as_deref(), Some("cached 1"));
    assert_eq!((store.body.get(), store.fallback.get()), (3, 1));
}

#[tokio::test(start_paused = true)]
async fn on_timeout_answers_timeouts_only() {
    let r = registry(vec![]);
    let store = Store::default();
    let out = r.scope(store.find_on_timeout(1, 10)).await;
    assert!(matches!(out, Err(PetError::Unavailable)), "{out:?}");
    let out = r.scope(store.find_on_timeout(2, 500)).await;
    assert_eq!(out.ok().as_deref(), Some("cached 2"));
    assert_eq!((store.body.get(), store.fallback.get()), (2, 1));
}

static MERGED: AtomicU32 = AtomicU32::new(0);

/// A free fn: the arguments in any order, any subset, repeated.
#[fallback(method = "merge(b, a, a)")]
async fn combine(a: String, b: u32, _c: Vec<u8>) -> Result<String, PetError> {
    drop(a);
    Err(PetError::Unavailable)
}

fn merge(b: u32, a: String, again: String) -> Result<String, PetError> {
    MERGED.fetch_add(1, Ordering::SeqCst);
    Ok(format!("{b}:{a}:{again}"))
}

#[tokio::test]
async fn a_free_fn_fallback_takes_the_arguments_it_names_in_its_order() {
    let out = combine("x".to_owned(), 5, vec![1]).await;
    assert_eq!(out.ok().as_deref(), Some("5:x:x"));
    assert_eq!(MERGED.load(Ordering::SeqCst), 1);
}

struct Shared {
    fallback: Counter,
}

impl Shared {
    #[fallback(method = "backup(name)")]
    async fn owned(self: Arc<Self>, name: String) -> Result<String, PetError> {
        Err(PetError::Unavailable).map(|()| name)
    }

    async fn backup(self: Arc<Self>, name: String) -> Result<String, PetError> {
        self.fallback.hit();
        Ok(format!("backup {name}"))
    }
}

#[tokio::test]
async fn an_arc_self_method_gets_its_fallback_on_a_clone_of_the_receiver() {
    let shared = Arc::new(Shared {
        fallback: Counter::default(),
    });
    let out = Arc::clone(&shared).owned("rex".to_owned()).await;
    assert_eq!(out.ok().as_deref(), Some("backup rex"));
    assert_eq!(shared.fallback.get(), 1);
    assert_eq!(Arc::strong_count(&shared), 1, "no clone kept");
}

// ---------------------------------------------------------------- whole chains

struct Pets {
    body: Counter,
    fallback: Counter,
}

impl Pets {
    fn new() -> Self {
        Self {
            body: Counter::default(),
            fallback: Counter::default(),
        }
    }

    fn cached(&self, id: u64) -> Result<String, PetError> {
        self.fallback.hit();
        Ok(format!("cached {id}"))
    }

    /// Kora's canonical order.
    #[fallback(method = "cached(id)")]
    #[circuit_breakable(Breaker)]
    #[retryable(Retry)]
    #[timeout(Timeout)]
    async fn canonical(&self, id: u64) -> Result<String, PetError> {
        self.body.hit();
        tokio::time::sleep(Duration::from_millis(200)).await;
        Ok(format!("fresh {id}"))
    }

    #[concurrency_limit(Concurrency)]
    #[retryable(Retry)]
    async fn limit_outside_retry(&self) -> Result<(), PetError> {
        self.body.hit();
        Err(PetError::Unavailable)
    }

    #[retryable(Retry)]
    #[concurrency_limit(Concurrency)]
    async fn limit_inside_retry(&self) -> Result<(), PetError> {
        self.body.hit();
        Err(PetError::Unavailable)
    }

    #[rate_limited(Rate)]
    #[circuit_breakable(Breaker)]
    async fn rate_outside_breaker(&self) -> Result<(), PetError> {
        self.body.hit();
        Err(PetError::Unavailable)
    }

    /// A fallback inside the chain: each attempt has its own fallback, so
    /// retry sees successes.
    #[retryable(Retry)]
    #[fallback(method = "cached(id)")]
    async fn fallback_inside_retry(&self, id: u64) -> Result<String, PetError> {
        self.body.hit();
        Err(PetError::Unavailable)
    }

    /// All six, in another order.
    #[rate_limited(Rate)]
    #[timeout(Timeout)]
    #[fallback(method = "cached(id)")]
    #[concurrency_limit(Concurrency)]
    #[retryable(Retry)]
    #[circuit_breakable(Breaker)]
    async fn all_six(&self, id: u64) -> Result<String, PetError> {
        self.body.hit();
        Err(PetError::Unavailable)
    }
}

fn breaker_window(r: &Registry) -> Counts {
    r.sync_scope(Breaker::get)
        .expect("configured")
        .metrics()
        .window
}

#[tokio::test(start_paused = true)]
async fn canonical_order_times_out_every_attempt_counts_one_failure_and_falls_back() {
    let r = registry(vec![(
        "breaker",
        table([
            ("type", s("ring_buffer")),
            ("failure_rate_threshold", int(100)),
            ("minimum_required_calls", int(10)),
            ("wait_duration_in_open_state", s("1m")),
            ("permitted_calls_in_half_open_state", int(1)),
            ("count_based", table([("window_size", int(10))])),
        ]),
    )]);
    let pets = Pets::new();
    let start = Instant::now();
    let out = r.scope(pets.canonical(4)).await;
    assert_eq!(out.ok().as_deref(), Some("cached 4"));
    assert_eq!(pets.body.get(), 1 + 2, "each attempt ran and timed out");
    // Three 50 ms attempts and two 100 ms waits.
    assert_eq!(start.elapsed(), Duration::from_millis(3 * 50 + 2 * 100));
    assert_eq!(
        breaker_window(&r),
        Counts {
            total: 1,
            failures: 1,
            slow: 0
        }
    );
    assert_eq!(pets.fallback.get(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_limit_outside_retry_holds_its_place_through_the_waits() {
    let r = registry(vec![]);
    let pets = Arc::new(Pets::new());
    let first = {
        let (r, pets) = (r.clone(), Arc::clone(&pets));
        tokio::spawn(async move { r.scope(pets.limit_outside_retry()).await })
    };
    // During the first call's first back-off (100 ms), a second caller finds
    // the place taken.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let second = r.scope(pets.limit_outside_retry()).await;
    assert!(
        matches!(
            second,
            Err(PetError::Resilience(Error::ConcurrencyLimitReached { .. }))
        ),
        "{second:?}"
    );
    let first = first.await.expect("task");
    assert!(matches!(
        first,
        Err(PetError::Resilience(Error::RetryExhausted(e))) if e.calls == 3
    ));
    assert_eq!(pets.body.get(), 3, "the rejected caller never ran the body");
}

#[tokio::test(start_paused = true)]
async fn retry_outside_a_limit_frees_the_place_between_attempts() {
    let r = registry(vec![]);
    let pets = Arc::new(Pets::new());
    let first = {
        let (r, pets) = (r.clone(), Arc::clone(&pets));
        tokio::spawn(async move { r.scope(pets.limit_inside_retry()).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let handle = r.sync_scope(Concurrency::get).expect("configured");
    assert_eq!(
        handle.in_use(),
        0,
        "the first call waits without holding a place"
    );
    let permit = handle.try_acquire();
    assert!(
        permit.is_some(),
        "a second caller gets in during the back-off"
    );
    drop(permit);
    let _ = first.await.expect("task");
    assert_eq!(pets.body.get(), 3);
}

#[tokio::test(start_paused = true)]
async fn rate_limited_calls_never_reach_the_breaker_inside() {
    let r = registry(vec![]);
    let pets = Pets::new();
    for _ in 0..5 {
        let _ = r.scope(pets.rate_outside_breaker()).await;
    }
    // Two permits for the hour: two calls ran, three were rate limited.
    assert_eq!(pets.body.get(), 2);
    assert_eq!(
        breaker_window(&r),
        Counts {
            total: 2,
            failures: 2,
            slow: 0
        }
    );
    let b = r.sync_scope(Breaker::get).expect("configured");
    assert_eq!(b.state(), State::Closed);
    assert_eq!(b.metrics().rejected, 0);
}

#[tokio::test(start_paused = true)]
async fn a_fallback_inside_retry_answers_each_attempt() {
    let r = registry(vec![]);
    let pets = Pets::new();
    let out = r.scope(pets.fallback_inside_retry(9)).await;
    assert_eq!(out.ok().as_deref(), Some("cached 9"));
    // The first attempt's fallback succeeded: retry had nothing to retry.
    assert_eq!((pets.body.get(), pets.fallback.get()), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn all_six_attributes_nest_as_written() {
    let r = registry(vec![("timeout", table([("duration", s("1s"))]))]);
    let pets = Pets::new();
    // rate ⊃ timeout ⊃ fallback ⊃ concurrency ⊃ retry ⊃ breaker ⊃ body.
    // Call 1: three attempts fail; the breaker (3 calls, 100 %) opens on the
    // third; retry gives up; the fallback answers.
    let out = r.scope(pets.all_six(0)).await;
    assert_eq!(out.ok().as_deref(), Some("cached 0"));
    assert_eq!(pets.body.get(), 3);
    // Call 2: the open breaker rejects the first attempt; retry does not retry
    // a rejection; the fallback answers; the body does not run.
    let out = r.scope(pets.all_six(1)).await;
    assert_eq!(out.ok().as_deref(), Some("cached 1"));
    assert_eq!(pets.body.get(), 3);
    assert_eq!(
        r.sync_scope(Breaker::get)
            .expect("configured")
            .metrics()
            .rejected,
        1
    );
    // Call 3: the outermost rate limiter (2 per hour) rejects it before the
    // fallback inside could see anything.
    let out = r.scope(pets.all_six(2)).await;
    assert!(
        matches!(
            out,
            Err(PetError::Resilience(Error::RateLimitExceeded { .. }))
        ),
        "{out:?}"
    );
    assert_eq!(pets.fallback.get(), 2);
}
