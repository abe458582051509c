//! A fn under four attributes, called as a server calls it: each call in its
//! own spawned task on a 2-worker runtime. The attributes expand into the
//! fn's own future, so the guards live there: these tests count what the
//! guards let through and what they give back, also when calls are dropped
//! halfway.

#![allow(clippy::expect_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::*;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use resilient_core::circuit_breaker::State;
use resilient_core::{
    circuit_breakable, concurrency_limit, retryable, timeout, CircuitBreakerSpec,
    ConcurrencyLimitSpec, Error, Registry, RetrySpec, Spec, TimeoutSpec,
};

#[derive(RetrySpec)]
#[spec("threads.retry")]
struct StackRetry;

#[derive(CircuitBreakerSpec)]
#[spec("threads.breaker")]
struct StackBreaker;

#[derive(ConcurrencyLimitSpec)]
#[spec("threads.limit")]
struct StackLimit;

#[derive(TimeoutSpec)]
#[spec("threads.timeout")]
struct StackTimeout;

/// What the body saw.
#[derive(Default)]
struct Body {
    now: AtomicUsize,
    peak: AtomicUsize,
    ran: AtomicUsize,
}

#[retryable(StackRetry)]
#[circuit_breakable(StackBreaker)]
#[concurrency_limit(StackLimit)]
#[timeout(StackTimeout)]
async fn call(body: &Body, hold: bool) -> Result<(), Error> {
    let n = body.now.fetch_add(1, Ordering::SeqCst) + 1;
    body.peak.fetch_max(n, Ordering::SeqCst);
    body.ran.fetch_add(1, Ordering::SeqCst);
    tokio::task::yield_now().await;
    if hold {
        std::future::pending::<()>().await;
    }
    body.now.fetch_sub(1, Ordering::SeqCst);
    Ok(())
}

/// No retry (a rejection is the call's outcome), a breaker that opens only
/// when every one of 100 calls failed, at most 4 calls at once.
fn stack() -> Registry {
    build(
        Registry::builder()
            .spec::<StackRetry>()
            .spec::<StackBreaker>()
            .spec::<StackLimit>()
            .spec::<StackTimeout>(),
        vec![
            (
                StackRetry::PATH,
                table([("attempts", int(0)), ("delay", s("1ms"))]),
            ),
            (
                StackBreaker::PATH,
                table([
                    ("failure_rate_threshold", int(100)),
                    ("minimum_required_calls", int(100)),
                    ("wait_duration_in_open_state", s("1h")),
                    ("permitted_calls_in_half_open_state", int(1)),
                    ("count_based", table([("window_size", int(100))])),
                ]),
            ),
            (StackLimit::PATH, table([("limit", int(4))])),
            (StackTimeout::PATH, table([("duration", s("1h"))])),
        ],
    )
}

#[test]
fn every_call_runs_or_is_turned_away_and_every_place_comes_back() {
    let rt = two_workers();
    let r = stack();
    let body = Arc::new(Body::default());
    let rejected = Arc::new(AtomicUsize::new(0));
    rt.block_on(async {
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let (r, body, rejected) = (r.clone(), Arc::clone(&body), Arc::clone(&rejected));
                tokio::spawn(async move {
                    for _ in 0..100 {
                        match r.scope(call(&body, false)).await {
                            Ok(()) => {}
                            Err(Error::ConcurrencyLimitReached { .. }) => {
                                rejected.fetch_add(1, Ordering::SeqCst);
                            }
                            Err(e) => panic!("unexpected {e}"),
                        }
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("task");
        }
    });
    let (ran, rejected) = (
        body.ran.load(Ordering::SeqCst),
        rejected.load(Ordering::SeqCst),
    );
    assert_eq!(
        ran + rejected,
        6_400,
        "every call ran once or was turned away"
    );
    assert!(ran >= 100, "calls ran: {ran}");
    assert!(body.peak.load(Ordering::SeqCst) <= 4, "at most 4 at once");
    let limit = r.sync_scope(StackLimit::get).expect("limit");
    assert_eq!(limit.in_use(), 0, "every place came back");
    let breaker = r.sync_scope(StackBreaker::get).expect("breaker");
    let m = breaker.metrics();
    // Rejections by the limit inside are no outcome of the dependency.
    assert_eq!(
        (m.state, m.window.total, m.window.failures),
        (State::Closed, 100, 0)
    );
}

#[test]
fn calls_dropped_inside_give_back_their_places_and_count_nothing() {
    let rt = two_workers();
    let r = stack();
    let body = Arc::new(Body::default());
    let limit = r.sync_scope(StackLimit::get).expect("limit");
    let breaker = r.sync_scope(StackBreaker::get).expect("breaker");
    rt.block_on(async {
        for round in 0..20 {
            let held: Vec<_> = (0..4)
                .map(|_| {
                    let (r, body) = (r.clone(), Arc::clone(&body));
                    tokio::spawn(async move { r.scope(call(&body, true)).await })
                })
                .collect();
            // Bounded: the four calls reach their bodies on the workers.
            let mut waited = 0;
            while body.now.load(Ordering::SeqCst) < 4 {
                assert!(waited < 5_000, "round {round}: the calls never started");
                tokio::time::sleep(Duration::from_millis(1)).await;
                waited += 1;
            }
            assert_eq!(limit.in_use(), 4, "round {round}");
            // A fifth call finds the limit full.
            let fifth = r.scope(call(&body, false)).await;
            assert!(
                matches!(fifth, Err(Error::ConcurrencyLimitReached { .. })),
                "round {round}: {fifth:?}"
            );
            for task in &held {
                task.abort();
            }
            for task in held {
                assert!(task.await.expect_err("aborted").is_cancelled());
            }
            assert_eq!(limit.in_use(), 0, "round {round}: the places came back");
            // The bodies never ended: reset the count the test keeps.
            body.now.store(0, Ordering::SeqCst);
        }
    });
    assert_eq!(body.ran.load(Ordering::SeqCst), 80, "20 rounds of 4 calls");
    let m = breaker.metrics();
    assert_eq!(
        (m.window.total, m.window.failures),
        (0, 0),
        "a dropped call is neither a success nor a failure"
    );
}
