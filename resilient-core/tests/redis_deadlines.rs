//! How long a decision waits for a Redis that does not answer: a real
//! redis-server stopped with SIGSTOP (the kernel still accepts
//! connections, nothing answers on them). A decision that must open a
//! connection waits at most `connect_timeout` for it, the client's setup
//! commands (`AUTH`, `SELECT`, `CLIENT SETINFO`) included, and then
//! `timeout` for the script, on every path: a handle's `try_acquire`, a
//! blocking fn, a retry budget's withdrawal, `acquire().await`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
use support::redis::{replica, two_workers, Server};
use support::*;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use resilient_core::settings::Value;
use resilient_core::{rate_limited, retryable, Error, RateLimiterSpec, RetrySpec};

const CONNECT_TIMEOUT: Duration = Duration::from_millis(300);
const TIMEOUT: Duration = Duration::from_millis(50);

/// What a loaded 2-core CI machine may add to the documented bound
/// (thread start, scheduling): well below one more `connect_timeout`.
const SLACK: Duration = Duration::from_millis(150);

#[derive(Debug, thiserror::Error)]
enum CallError {
    #[error("the dependency failed")]
    Down,
    #[error(transparent)]
    Resilience(#[from] Error),
}

#[derive(RateLimiterSpec)]
#[spec("redis_deadlines.limit")]
struct Limit;

#[derive(RetrySpec)]
#[spec("redis_deadlines.retry")]
struct Retry;

#[rate_limited(Limit)]
fn send(sent: &AtomicU64) -> Result<(), CallError> {
    sent.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[retryable(Retry)]
fn fetch(hits: &AtomicU64) -> Result<(), CallError> {
    hits.fetch_add(1, Ordering::SeqCst);
    Err(CallError::Down)
}

/// A shared limit whose `local` policy admits while Redis is down.
fn limit() -> Value {
    table([
        ("limit_for_period", int(1000)),
        ("limit_refresh_period", s("10s")),
        ("backend", s("redis")),
        ("on_backend_failure", s("local")),
        ("local_limit_for_period", int(100)),
    ])
}

/// One retry 1 ms after a failure, from a shared budget whose `local`
/// policy gives tokens while Redis is down.
fn retry() -> Value {
    table([
        ("attempts", int(1)),
        ("delay", s("1ms")),
        (
            "retry_budget",
            table([
                ("tokens_max", int(10)),
                ("tokens_initial", int(10)),
                ("backend", s("redis")),
                ("on_backend_failure", s("local")),
                ("local_tokens_max", int(5)),
            ]),
        ),
    ])
}

/// The stalled server's URL with a password and a database: the client's
/// setup sends `AUTH`, `SELECT` and two `CLIENT SETINFO`, each waiting for
/// a reply that does not come.
fn section(redis: &Server) -> Value {
    table([
        ("url", s(&format!("redis://:pw@127.0.0.1:{}/1", redis.port))),
        ("key_prefix", s(&support::redis::prefix("deadlines"))),
        ("timeout", s("50ms")),
        ("connect_timeout", s("300ms")),
    ])
}

fn timed<R>(f: impl FnOnce() -> R) -> (Duration, R) {
    let started = Instant::now();
    let out = f();
    (started.elapsed(), out)
}

/// Each path's first decision on a fresh registry (a backend of its own,
/// no connection yet) against the stopped server: each within
/// `connect_timeout` + `timeout` (350 ms) and `SLACK`, then answered by the
/// `local` policy. It took 4 × `connect_timeout` and more on the blocking
/// paths, one setup reply waited for after another.
#[test]
fn a_decision_on_a_stalled_redis_waits_at_most_connect_timeout_and_timeout() {
    let Some(redis) = Server::start("stalled") else {
        return;
    };
    redis.pause();
    let bound = CONNECT_TIMEOUT + TIMEOUT;
    let mut took = Vec::new();

    let r = replica::<Limit>(limit(), section(&redis));
    let (t, out) = timed(|| r.sync_scope(|| Limit::get()?.try_acquire()));
    assert!(out.is_ok(), "the local policy admits: {out:?}");
    took.push(("a handle's try_acquire", t));

    let r = replica::<Limit>(limit(), section(&redis));
    let sent = AtomicU64::new(0);
    let (t, out) = timed(|| r.sync_scope(|| send(&sent)));
    assert!(out.is_ok(), "the local policy admits: {out:?}");
    assert_eq!(sent.load(Ordering::SeqCst), 1);
    took.push(("a blocking fn", t));

    let r = replica::<Retry>(retry(), section(&redis));
    let hits = AtomicU64::new(0);
    let (t, out) = timed(|| r.sync_scope(|| fetch(&hits)));
    assert!(out.is_err());
    assert_eq!(
        hits.load(Ordering::SeqCst),
        2,
        "the local bucket gave the retry its token"
    );
    took.push(("a retry budget's withdrawal", t));

    let r = replica::<Limit>(limit(), section(&redis));
    let rt = two_workers();
    let (t, out) = timed(|| rt.block_on(r.scope(async { Limit::get()?.acquire().await })));
    assert!(out.is_ok(), "the local policy admits: {out:?}");
    took.push(("acquire().await", t));

    redis.resume();
    println!("bound {bound:?} + slack {SLACK:?}: {took:?}");
    for (path, t) in took {
        assert!(
            t <= bound + SLACK,
            "{path} took {t:?}, more than `connect_timeout` + `timeout` ({bound:?}) and {SLACK:?}"
        );
    }
}
