//! Blocking fns under the attributes, on real threads: their waits block the
//! thread with the contracts of the async ones, and a blocking and an async
//! caller of one spec share its instance.

#![allow(clippy::expect_used, clippy::unwrap_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::*;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use resilient_core::circuit_breaker::State;
use resilient_core::{
    circuit_breakable, concurrency_limit, fallback, rate_limited, retryable, CircuitBreakerSpec,
    ConcurrencyLimitSpec, Error, RateLimiterSpec, Registry, RetrySpec,
};

#[derive(Debug, thiserror::Error)]
enum DbError {
    #[error("the database is down")]
    Down,
    #[error(transparent)]
    Resilience(#[from] Error),
}

#[derive(ConcurrencyLimitSpec)]
#[spec("blocking.limit")]
struct Pool;

/// What the body saw.
#[derive(Default)]
struct Seen {
    now: AtomicUsize,
    peak: AtomicUsize,
    ran: AtomicUsize,
}

#[concurrency_limit(Pool)]
fn query(seen: &Seen) -> Result<(), DbError> {
    let n = seen.now.fetch_add(1, Ordering::SeqCst) + 1;
    seen.peak.fetch_max(n, Ordering::SeqCst);
    seen.ran.fetch_add(1, Ordering::SeqCst);
    thread::sleep(Duration::from_millis(2));
    seen.now.fetch_sub(1, Ordering::SeqCst);
    Ok(())
}

fn pool(limit: i128) -> Registry {
    registry::<Pool>(table([
        ("limit", int(limit)),
        ("policy", s("block")),
        ("max_wait", s("10s")),
    ]))
}

#[test]
fn eight_threads_on_a_block_limit_of_two_run_two_at_a_time_and_all_run() {
    let r = pool(2);
    let seen = Arc::new(Seen::default());
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (r, seen) = (r.clone(), Arc::clone(&seen));
            thread::spawn(move || {
                let _registry = r.set_default();
                for _ in 0..20 {
                    query(&seen).expect("a place within max_wait");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("thread");
    }
    assert_eq!(seen.ran.load(Ordering::SeqCst), 160, "every call ran");
    assert_eq!(seen.peak.load(Ordering::SeqCst), 2, "exactly 2 at once");
    let limit = r.sync_scope(Pool::get).expect("limit");
    assert_eq!(limit.in_use(), 0, "every place came back");
}

#[test]
fn a_wait_for_a_place_ends_at_max_wait() {
    let r = registry::<Pool>(table([
        ("limit", int(1)),
        ("policy", s("block")),
        ("max_wait", s("30ms")),
    ]));
    let seen = Arc::new(Seen::default());
    let (held, release) = std::sync::mpsc::channel::<()>();
    let (entered, wait_entered) = std::sync::mpsc::channel::<()>();
    let holder = {
        let r = r.clone();
        thread::spawn(move || {
            let _registry = r.set_default();
            #[concurrency_limit(Pool)]
            fn hold(
                entered: &std::sync::mpsc::Sender<()>,
                release: &std::sync::mpsc::Receiver<()>,
            ) -> Result<(), DbError> {
                entered.send(()).ok();
                release.recv().ok();
                Ok(())
            }
            hold(&entered, &release)
        })
    };
    wait_entered.recv().expect("the holder entered");
    let _registry = r.set_default();
    let start = Instant::now();
    let out = query(&seen);
    let waited = start.elapsed();
    assert!(
        matches!(
            out,
            Err(DbError::Resilience(Error::ConcurrencyLimitReached { .. }))
        ),
        "{out:?}"
    );
    assert!(waited >= Duration::from_millis(30), "waited {waited:?}");
    assert_eq!(seen.ran.load(Ordering::SeqCst), 0);
    held.send(()).ok();
    holder.join().expect("holder").expect("the holder's call");
    query(&seen).expect("free again");
    assert_eq!(seen.ran.load(Ordering::SeqCst), 1);
}

#[derive(RetrySpec)]
#[spec("blocking.retry")]
struct Flaky;

#[retryable(Flaky)]
fn fetch(calls: &Mutex<Vec<Instant>>, succeed_at: usize) -> Result<usize, DbError> {
    let mut calls = calls.lock().unwrap();
    calls.push(Instant::now());
    if calls.len() >= succeed_at {
        Ok(calls.len())
    } else {
        Err(DbError::Down)
    }
}

#[test]
fn retry_gaps_are_never_shorter_than_the_delay() {
    let r = registry::<Flaky>(table([("attempts", int(3)), ("delay", s("20ms"))]));
    let _registry = r.set_default();
    let calls = Mutex::new(Vec::new());
    let out = fetch(&calls, usize::MAX);
    assert!(
        matches!(&out, Err(DbError::Resilience(Error::RetryExhausted(e))) if e.calls == 4),
        "exhausted after 4 calls: {out:?}"
    );
    let calls = calls.into_inner().unwrap();
    assert_eq!(calls.len(), 4, "the first call and 3 retries");
    for pair in calls.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(gap >= Duration::from_millis(20), "gap {gap:?}");
    }
    let calls = Mutex::new(Vec::new());
    assert_eq!(fetch(&calls, 2).unwrap(), 2, "the second call's value");
}

#[test]
fn the_overall_timeout_stops_a_blocking_retry() {
    // Waits of 30 ms under a 100 ms limit: a retry whose wait would cross
    // it is not started. Each wait lasts at least 30 ms, so at most 4 calls
    // fit; a slow machine may fit fewer, never more.
    let r = registry::<Flaky>(table([
        ("attempts", int(10)),
        ("delay", s("30ms")),
        ("timeout", s("100ms")),
    ]));
    let _registry = r.set_default();
    let calls = Mutex::new(Vec::new());
    let out = fetch(&calls, usize::MAX);
    let made = calls.lock().unwrap().len();
    assert!(
        matches!(
            &out,
            Err(DbError::Resilience(Error::RetryExhausted(e)))
                if e.reason == resilient_core::GaveUp::Timeout && e.calls == made as u64
        ),
        "{out:?}"
    );
    assert!((2..=4).contains(&made), "calls: {made}");
}

#[derive(CircuitBreakerSpec)]
#[spec("blocking.breaker")]
struct Shared;

#[circuit_breakable(Shared)]
fn sync_side(hits: &AtomicUsize) -> Result<(), DbError> {
    hits.fetch_add(1, Ordering::SeqCst);
    Err(DbError::Down)
}

#[circuit_breakable(Shared)]
async fn async_side(hits: &AtomicUsize) -> Result<(), DbError> {
    hits.fetch_add(1, Ordering::SeqCst);
    Err(DbError::Down)
}

#[test]
fn a_blocking_and_an_async_fn_of_one_breaker_open_it_together() {
    let r = registry::<Shared>(breaker_section(100, 4, "1h", 4));
    let (sync_hits, async_hits) = (Arc::new(AtomicUsize::new(0)), AtomicUsize::new(0));
    let _registry = r.set_default();
    // Two failures from a thread of its own, two from an async fn.
    let blocking = {
        let (r, hits) = (r.clone(), Arc::clone(&sync_hits));
        thread::spawn(move || {
            let _registry = r.set_default();
            for _ in 0..2 {
                assert!(matches!(sync_side(&hits), Err(DbError::Down)));
            }
        })
    };
    blocking.join().expect("thread");
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    rt.block_on(async {
        for _ in 0..2 {
            assert!(matches!(async_side(&async_hits).await, Err(DbError::Down)));
        }
    });
    let breaker = r.sync_scope(Shared::get).expect("breaker");
    assert_eq!(breaker.metrics().state, State::Open, "4 failures of 4");
    // Open for both kinds of caller.
    assert!(matches!(
        sync_side(&sync_hits),
        Err(DbError::Resilience(Error::CallNotPermitted { .. }))
    ));
    assert!(matches!(
        rt.block_on(async_side(&async_hits)),
        Err(DbError::Resilience(Error::CallNotPermitted { .. }))
    ));
    assert_eq!(
        (
            sync_hits.load(Ordering::SeqCst),
            async_hits.load(Ordering::SeqCst)
        ),
        (2, 2),
        "no call reached either side once open"
    );
}

#[derive(RateLimiterSpec)]
#[spec("blocking.rate")]
struct Quota;

#[rate_limited(Quota)]
fn send(sent: &AtomicUsize) -> Result<(), DbError> {
    sent.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

fn quota() -> Registry {
    registry::<Quota>(table([
        ("limit_for_period", int(1)),
        ("limit_refresh_period", s("100ms")),
        ("type", s("token_bucket")),
        ("max_wait", s("250ms")),
    ]))
}

#[test]
fn a_rate_limiter_reservation_blocks_until_the_permit_is_due() {
    let r = quota();
    let _registry = r.set_default();
    let sent = AtomicUsize::new(0);
    let start = Instant::now();
    for _ in 0..3 {
        send(&sent).expect("reserved within max_wait");
    }
    let took = start.elapsed();
    assert_eq!(sent.load(Ordering::SeqCst), 3);
    assert!(
        took >= Duration::from_millis(200),
        "two waits of 100 ms: {took:?}"
    );
}

#[test]
fn threads_that_reserve_past_max_wait_are_refused_at_once() {
    // Five threads at once: permits due at 0, 100 and 200 ms are reserved
    // and waited for; those due at 300 and 400 ms are past `max_wait`.
    let r = quota();
    let sent = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(std::sync::Barrier::new(5));
    let threads: Vec<_> = (0..5)
        .map(|_| {
            let (r, sent, start) = (r.clone(), Arc::clone(&sent), Arc::clone(&start));
            thread::spawn(move || {
                let _registry = r.set_default();
                start.wait();
                let at = Instant::now();
                let out = send(&sent);
                (out.is_ok(), at.elapsed())
            })
        })
        .collect();
    let outcomes: Vec<(bool, Duration)> = threads
        .into_iter()
        .map(|t| t.join().expect("thread"))
        .collect();
    let admitted = outcomes.iter().filter(|(ok, _)| *ok).count();
    assert_eq!((admitted, sent.load(Ordering::SeqCst)), (3, 3));
    for (ok, took) in &outcomes {
        if !ok {
            assert!(
                *took < Duration::from_millis(100),
                "refused at once: {took:?}"
            );
        }
    }
    let longest = outcomes.iter().map(|(_, took)| *took).max().unwrap();
    assert!(
        longest >= Duration::from_millis(190),
        "the last permit waited: {longest:?}"
    );
}

struct Store {
    primary: AtomicUsize,
    cache: AtomicUsize,
}

impl Store {
    #[fallback(method = "cached(id)")]
    #[retryable(Flaky)]
    fn lookup(&self, id: u64) -> Result<String, DbError> {
        self.primary.fetch_add(1, Ordering::SeqCst);
        Err(DbError::Down)
    }

    fn cached(&self, id: u64, error: DbError) -> Result<String, DbError> {
        self.cache.fetch_add(1, Ordering::SeqCst);
        Ok(format!("cached {id} after {error}"))
    }
}

#[test]
fn a_blocking_method_falls_back_after_its_retries() {
    let r = registry::<Flaky>(table([("attempts", int(2)), ("delay", s("1ms"))]));
    let _registry = r.set_default();
    let store = Store {
        primary: AtomicUsize::new(0),
        cache: AtomicUsize::new(0),
    };
    assert_eq!(
        store.lookup(7).unwrap(),
        "cached 7 after `Flaky` gave up after 3 calls (attempts exhausted)"
    );
    assert_eq!(
        (
            store.primary.load(Ordering::SeqCst),
            store.cache.load(Ordering::SeqCst)
        ),
        (3, 1),
        "three calls, then the fallback once"
    );
}

#[concurrency_limit(Pool)]
fn panics(seen: &Seen) -> Result<(), DbError> {
    seen.ran.fetch_add(1, Ordering::SeqCst);
    panic!("the driver panicked");
}

#[test]
fn a_panic_propagates_and_gives_the_place_back() {
    let r = pool(1);
    let _registry = r.set_default();
    let seen = Seen::default();
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| panics(&seen)));
    assert!(out.is_err(), "the panic reached the caller");
    let limit = r.sync_scope(Pool::get).expect("limit");
    assert_eq!(limit.in_use(), 0, "the place came back");
    query(&seen).expect("the one place is free");
    assert_eq!(seen.ran.load(Ordering::SeqCst), 2);
}

#[concurrency_limit(Pool)]
async fn hold_async(release: tokio::sync::oneshot::Receiver<()>) -> Result<(), DbError> {
    release.await.ok();
    Ok(())
}

#[test]
fn on_a_current_thread_runtime_a_full_limit_is_refused_not_waited_for() {
    // No `max_wait`: on the runtime's only thread, a wait for the place an
    // async task of that runtime holds would never end.
    let r = registry::<Pool>(table([("limit", int(1)), ("policy", s("block"))]));
    let _registry = r.set_default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let seen = Seen::default();
    rt.block_on(async {
        let (release, held) = tokio::sync::oneshot::channel();
        let holder = tokio::spawn(hold_async(held));
        tokio::task::yield_now().await;
        let start = Instant::now();
        let out = query(&seen);
        assert!(
            matches!(
                out,
                Err(DbError::Resilience(Error::ConcurrencyLimitReached { .. }))
            ),
            "{out:?}"
        );
        assert!(start.elapsed() < Duration::from_secs(1), "refused at once");
        release.send(()).ok();
        holder.await.expect("holder").expect("its call");
        query(&seen).expect("free again: no wait needed");
    });
    assert_eq!(seen.ran.load(Ordering::SeqCst), 1);
}

#[test]
fn on_a_multi_thread_worker_a_blocking_fn_waits_for_an_async_holder() {
    let r = registry::<Pool>(table([("limit", int(1)), ("policy", s("block"))]));
    let rt = r
        .set_default_on(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_time(),
        )
        .build()
        .expect("runtime");
    let seen = Arc::new(Seen::default());
    rt.block_on(async {
        let (release, held) = tokio::sync::oneshot::channel();
        let holder = tokio::spawn(hold_async(held));
        while r.sync_scope(Pool::get).expect("limit").in_use() == 0 {
            tokio::task::yield_now().await;
        }
        // The blocking call, in a task on a worker: it waits inside
        // `block_in_place`, so the holder's release still runs.
        let waiter = {
            let seen = Arc::clone(&seen);
            tokio::spawn(async move { query(&seen) })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(seen.ran.load(Ordering::SeqCst), 0, "still waiting");
        release.send(()).ok();
        holder.await.expect("holder").expect("its call");
        waiter
            .await
            .expect("waiter")
            .expect("a place once released");
    });
    assert_eq!(seen.ran.load(Ordering::SeqCst), 1);
}

#[test]
fn a_retry_delay_waits_in_every_runtime_context_without_panicking() {
    // Contexts where tokio refuses `block_in_place`: a `LocalSet` driven on
    // a multi-thread runtime, and a current-thread `block_on` with a
    // multi-thread runtime's handle entered. A blocking fn's wait must not
    // panic in either.
    let r = registry::<Flaky>(table([("attempts", int(3)), ("delay", s("10ms"))]));
    let _registry = r.set_default();
    let mt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let local = tokio::task::LocalSet::new();
    let calls = Mutex::new(Vec::new());
    let out = local.block_on(&mt, async { fetch(&calls, 2) });
    assert_eq!(out.expect("the second call's value"), 2);

    let ct = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let calls = Mutex::new(Vec::new());
    let out = ct.block_on(async {
        let _entered = mt.handle().enter();
        fetch(&calls, 2)
    });
    assert_eq!(out.expect("the second call's value"), 2);
    let calls = calls.into_inner().unwrap();
    assert!(calls[1] - calls[0] >= Duration::from_millis(10));
}

#[test]
fn a_fn_that_blocks_on_a_runtime_of_its_own_is_no_tokio_main() {
    // A sync facade over an async client: `let body = async ..` and
    // `block_on(body)`, as `#[tokio::main]` writes, but by the user.
    #[retryable(Flaky)]
    fn facade(rt: &tokio::runtime::Runtime, id: u64) -> Result<u64, DbError> {
        let body = async move { Ok::<u64, DbError>(id) };
        rt.block_on(body)
    }
    let r = retry_registry_for_facade();
    let _registry = r.set_default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    assert_eq!(facade(&rt, 5).expect("ok"), 5);
}

fn retry_registry_for_facade() -> Registry {
    registry::<Flaky>(table([("attempts", int(1)), ("delay", s("1ms"))]))
}

#[rate_limited(Quota, key = tenant)]
fn send_for(tenant: &str, sent: &AtomicUsize) -> Result<(), DbError> {
    sent.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[test]
fn a_keyed_rate_limiter_on_a_blocking_fn_gives_each_key_its_own_quota() {
    let r = registry::<Quota>(table([
        ("limit_for_period", int(1)),
        ("limit_refresh_period", s("1h")),
    ]));
    let _registry = r.set_default();
    let sent = AtomicUsize::new(0);
    send_for("a", &sent).expect("a's first");
    assert!(matches!(
        send_for("a", &sent),
        Err(DbError::Resilience(Error::RateLimitExceeded { .. }))
    ));
    send_for("b", &sent).expect("b's first: a quota of its own");
    assert_eq!(sent.load(Ordering::SeqCst), 2);
}
