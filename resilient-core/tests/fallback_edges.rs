//! Fallback edge cases: what a declined or narrowed fallback leaves for the
//! layers outside, argument copies, receivers, patterns and lifetimes.

#![allow(clippy::expect_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::*;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use resilient_core::circuit_breaker::Counts;
use resilient_core::{
    circuit_breakable, fallback, rate_limited, retryable, CircuitBreakerSpec, Error,
    RateLimiterSpec, Registry, RetrySpec,
};

#[derive(Debug, thiserror::Error)]
enum PetError {
    #[error("unavailable")]
    Unavailable,
    #[error(transparent)]
    Resilience(#[from] Error),
}

#[derive(RetrySpec)]
#[spec("review.retry")]
struct Retry;

#[derive(RetrySpec)]
#[spec("review.retry_last", exhausted = last_failure)]
struct RetryLast;

#[derive(CircuitBreakerSpec)]
#[spec("review.breaker")]
struct Breaker;

#[derive(CircuitBreakerSpec)]
#[spec("review.breaker2")]
struct Breaker2;

#[derive(RateLimiterSpec)]
#[spec("review.rate")]
struct Rate;

fn breaker_section(min_calls: i128) -> resilient_core::settings::Value {
    table([
        ("type", s("ring_buffer")),
        ("failure_rate_threshold", int(100)),
        ("minimum_required_calls", int(min_calls)),
        ("wait_duration_in_open_state", s("1m")),
        ("permitted_calls_in_half_open_state", int(1)),
        ("count_based", table([("window_size", int(min_calls))])),
    ])
}

fn registry() -> Registry {
    let retry = table([("delay", s("10ms")), ("attempts", int(2))]);
    let tree = root(vec![
        ("review.retry", retry.clone()),
        ("review.retry_last", retry),
        ("review.breaker", breaker_section(1)),
        ("review.breaker2", breaker_section(10)),
        (
            "review.rate",
            table([
                ("limit_for_period", int(1)),
                ("limit_refresh_period", s("1h")),
            ]),
        ),
    ]);
    Registry::builder()
        .spec::<Retry>()
        .spec::<RetryLast>()
        .spec::<Breaker>()
        .spec::<Breaker2>()
        .spec::<Rate>()
        .build(&tree)
        .expect("valid settings")
}

static BODY: AtomicU32 = AtomicU32::new(0);

fn never(_: &PetError) -> bool {
    false
}

fn cached(id: u64) -> Result<u64, PetError> {
    Ok(id)
}

// ------------------------------------------------------------ `when` + outer layers

/// Control: retry ⊃ breaker. Attempt 1 fails and opens the breaker (1 call,
/// 100 %); attempt 2 is rejected, and "a retry outside does not retry
/// CallNotPermitted".
#[retryable(Retry)]
#[circuit_breakable(Breaker)]
async fn control(_id: u64) -> Result<u64, PetError> {
    BODY.fetch_add(1, Ordering::SeqCst);
    Err(PetError::Unavailable)
}

/// Same, with a `when` fallback in between that declines everything: it
/// should be transparent.
#[retryable(Retry)]
#[fallback(method = "cached(id)", when = never)]
#[circuit_breakable(Breaker)]
async fn with_when(id: u64) -> Result<u64, PetError> {
    BODY.fetch_add(1, Ordering::SeqCst);
    Err(PetError::Unavailable)
}

#[tokio::test(start_paused = true)]
async fn control_retry_stops_at_an_open_breaker() {
    let r = registry();
    let out = r.scope(control(1)).await;
    assert!(
        matches!(
            out,
            Err(PetError::Resilience(Error::CallNotPermitted { .. }))
        ),
        "{out:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_when_fallback_leaves_a_rejection_a_rejection_for_an_outer_retry() {
    let r = registry();
    let out = r.scope(with_when(1)).await;
    let rejected = r
        .sync_scope(Breaker::get)
        .expect("configured")
        .metrics()
        .rejected;
    assert!(
        matches!(out, Err(PetError::Resilience(Error::CallNotPermitted { .. }))),
        "README: a retry outside does not retry CallNotPermitted; got {out:?} after {rejected} rejections"
    );
}

/// breaker ⊃ fallback(when = never) ⊃ rate limiter (1 permit per hour).
#[circuit_breakable(Breaker2)]
#[fallback(method = "cached(id)", when = never)]
#[rate_limited(Rate)]
async fn rate_under_when(id: u64) -> Result<u64, PetError> {
    Ok(id)
}

#[tokio::test(start_paused = true)]
async fn a_when_fallback_leaves_rate_limit_rejections_ignored_by_an_outer_breaker() {
    let r = registry();
    for i in 0..3 {
        let _ = r.scope(rate_under_when(i)).await;
    }
    let window = r
        .sync_scope(Breaker2::get)
        .expect("configured")
        .metrics()
        .window;
    // README: RateLimitExceeded raised inside is "ignored" by a breaker outside.
    assert_eq!(
        window,
        Counts {
            total: 1,
            failures: 0,
            slow: 0
        }
    );
}

// ------------------------------------------------------------ `on = resilience`

static RES_FB: AtomicU32 = AtomicU32::new(0);

fn counted(id: u64) -> Result<u64, PetError> {
    RES_FB.fetch_add(1, Ordering::SeqCst);
    Ok(id)
}

/// `on = resilience` over a retry that gives up with the last failure.
#[fallback(method = "counted(id)", on = resilience)]
#[retryable(RetryLast)]
async fn exhausts_last_failure(id: u64) -> Result<u64, PetError> {
    let _ = id;
    Err(PetError::Unavailable)
}

#[tokio::test(start_paused = true)]
async fn on_resilience_leaves_a_last_failure_exhaustion_alone() {
    // Documented: a retry with `exhausted = last_failure` gives up with the
    // body's own error, which `on = resilience` does not handle.
    let r = registry();
    let out = r.scope(exhausts_last_failure(5)).await;
    assert!(matches!(out, Err(PetError::Unavailable)), "{out:?}");
    assert_eq!(RES_FB.load(Ordering::SeqCst), 0);
}

#[fallback(method = "counted(id)", on = resilience)]
#[retryable(Retry)]
async fn unconfigured(id: u64) -> Result<u64, PetError> {
    Ok(id + 1)
}

#[tokio::test]
async fn a_missing_registry_is_never_answered_by_a_fallback() {
    // No registry: README says an annotated fn returns NotConfigured; docs
    // list `on = resilience` as "rejections, timeouts, retry exhaustion".
    let out = unconfigured(5).await;
    assert!(
        matches!(out, Err(PetError::Resilience(Error::NotConfigured { .. }))),
        "the fallback answered a missing registry: {out:?}"
    );
}

// ------------------------------------------------------------ argument copies

/// Clone counter.
struct Tracked(Arc<AtomicU32>);
impl Clone for Tracked {
    fn clone(&self) -> Self {
        self.0.fetch_add(1, Ordering::SeqCst);
        Tracked(Arc::clone(&self.0))
    }
}

fn tracked_fb(_t: Tracked) -> Result<u64, PetError> {
    Ok(0)
}

#[fallback(method = "tracked_fb(t)")]
async fn clones_alone(t: Tracked) -> Result<u64, PetError> {
    drop(t);
    Err(PetError::Unavailable)
}

#[tokio::test]
async fn without_retry_the_fallback_clones_each_named_argument_once() {
    let n = Arc::new(AtomicU32::new(0));
    let out = clones_alone(Tracked(Arc::clone(&n))).await;
    assert_eq!(out.ok(), Some(0));
    assert_eq!(
        n.load(Ordering::SeqCst),
        1,
        "one clone is needed: the saved one can be moved"
    );
}

static SEEN: Mutex<Vec<(&str, usize)>> = Mutex::new(Vec::new());

fn failing_fb(v: Vec<u8>) -> Result<u64, PetError> {
    SEEN.lock().expect("lock").push(("fallback", v.len()));
    Err(PetError::Unavailable)
}

/// retry ⊃ fallback (which itself fails) ⊃ body that mutates its argument.
#[retryable(Retry)]
#[fallback(method = "failing_fb(v)")]
async fn fresh_per_attempt(mut v: Vec<u8>) -> Result<u64, PetError> {
    SEEN.lock().expect("lock").push(("body", v.len()));
    v.push(1);
    Err(PetError::Unavailable)
}

#[tokio::test(start_paused = true)]
async fn a_fallback_inside_retry_gets_fresh_clones_per_attempt() {
    let r = registry();
    let out = r.scope(fresh_per_attempt(vec![])).await;
    assert!(
        matches!(
            out,
            Err(PetError::Resilience(Error::RetryExhausted(ref e))) if e.calls == 3
        ),
        "{out:?}"
    );
    let seen = SEEN.lock().expect("lock").clone();
    assert_eq!(seen.len(), 6);
    assert!(seen.iter().all(|(_, len)| *len == 0), "{seen:?}");
}

// ------------------------------------------------------------ shapes that work

struct Svc {
    n: u32,
}

impl Svc {
    fn fb(self: &Arc<Self>, id: u64) -> Result<u64, PetError> {
        Ok(id + u64::from(self.n))
    }

    #[fallback(method = "fb(id)")]
    #[retryable(Retry)]
    async fn arc_ref(self: &Arc<Self>, id: u64) -> Result<u64, PetError> {
        let _ = id;
        Err(PetError::Unavailable)
    }
}

#[fallback(method = "lt_fb(x)")]
async fn lifetimes<'a>((a, b): (u8, u8), x: &'a str, _: u8) -> Result<&'a str, PetError> {
    if a == b {
        return Ok("same");
    }
    let _n: u32 = x.parse().map_err(|_| PetError::Unavailable)?;
    Ok(x)
}

fn lt_fb(x: &str) -> Result<&str, PetError> {
    Ok(x)
}

#[tokio::test(start_paused = true)]
async fn receivers_patterns_lifetimes_return_and_question_mark() {
    let r = registry();
    let svc = Arc::new(Svc { n: 10 });
    assert_eq!(r.scope(svc.arc_ref(1)).await.ok(), Some(11));
    let s = String::from("nope");
    assert_eq!(lifetimes((1, 2), &s, 0).await.ok(), Some("nope"));
    assert_eq!(lifetimes((1, 1), &s, 0).await.ok(), Some("same"));
}
