//! The Redis backend's races: a decision in flight across a reload, calls
//! cancelled while they wait for their turn, a refusal kept across a reset
//! of the key, many threads deciding at once on blocking connections. Each
//! test failed before its fix. Needs RESILIENT_REDIS_URL (see
//! `support/redis.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
use support::redis::{self as server, two_workers};
use support::*;

use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

use resilient_core::settings::Value;
use resilient_core::{Error, RateLimiterSpec, Registry, Spec};

#[derive(RateLimiterSpec)]
#[spec("redis_races.a")]
struct A;

#[derive(RateLimiterSpec)]
#[spec("redis_races.b")]
struct B;

fn limit(kind: &str, n: i128, period: &str) -> Value {
    table([
        ("type", s(kind)),
        ("limit_for_period", int(n)),
        ("limit_refresh_period", s(period)),
        ("backend", s("redis")),
    ])
}

/// A Redis section whose decisions may take 2 s (so that a `CLIENT PAUSE`
/// of a few hundred ms delays a decision without failing it).
fn patient(url: &str, prefix: &str) -> Value {
    with(
        with(server::section(url, prefix), "timeout", s("2s")),
        "connect_timeout",
        s("2s"),
    )
}

fn conn(url: &str) -> ::redis::Connection {
    ::redis::Client::open(url)
        .unwrap()
        .get_connection()
        .unwrap()
}

/// Every command of every other client waits `ms` (a slow Redis).
fn pause(url: &str, ms: u64) {
    let () = ::redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(ms)
        .arg("ALL")
        .query(&mut conn(url))
        .unwrap();
}

// ---------------------------------------------------------------- 1

/// A decision in flight while a reload lowers the limit lands after
/// `forget`: its lease of the OLD settings (99 permits of 100/h) is handed
/// out under the NEW ones (2/h).
#[test]
fn a_lease_in_flight_across_a_reload_is_not_used_by_the_new_settings() {
    // A server of its own: `CLIENT PAUSE` stops every client of it.
    let Some(redis) = server::Server::start("r2_lease_reload") else {
        return;
    };
    let url = redis.url();
    let prefix = server::prefix("r2_lease_reload");
    let redis = patient(&url, &prefix);
    let r = build(
        Registry::builder().spec::<A>().spec::<B>(),
        vec![
            (
                A::PATH,
                with(limit("fixed_window", 100, "1h"), "lease", int(100)),
            ),
            (B::PATH, limit("fixed_window", 100, "1h")),
            ("resilient.redis", redis.clone()),
        ],
    );
    let rt = two_workers();
    // Connect first (on B), so that the pause delays only A's decision.
    rt.block_on(r.scope(async { B::get()?.acquire().await }))
        .unwrap();
    pause(&url, 600);
    let r1 = r.clone();
    let in_flight = rt.spawn(async move { r1.scope(async { A::get()?.acquire().await }).await });
    std::thread::sleep(Duration::from_millis(150));
    r.reload(&root(vec![
        (A::PATH, limit("fixed_window", 2, "1h")),
        (B::PATH, limit("fixed_window", 100, "1h")),
        ("resilient.redis", redis),
    ]))
    .unwrap();
    rt.block_on(in_flight).unwrap().unwrap();
    let admitted = rt.block_on(r.scope(async {
        let l = A::get().unwrap();
        let mut n = 0;
        for _ in 0..20 {
            n += u32::from(l.acquire().await.is_ok());
        }
        n
    }));
    assert!(
        admitted <= 2,
        "new settings: 2 per hour; admitted {admitted} of 20 right after the reload"
    );
}

/// The same race with a refusal: 1/h refused (wait ~1 h) while a reload
/// raises the limit to 100/s; the refusal lands after `forget` and the new
/// limit refuses everything for an hour, though Redis has 100 permits.
#[test]
fn a_refusal_in_flight_across_a_reload_does_not_refuse_the_new_settings() {
    // A server of its own: `CLIENT PAUSE` stops every client of it.
    let Some(redis) = server::Server::start("r2_refusal_reload") else {
        return;
    };
    let url = redis.url();
    let prefix = server::prefix("r2_refusal_reload");
    let redis = patient(&url, &prefix);
    let r = build(
        Registry::builder().spec::<A>(),
        vec![
            (A::PATH, limit("fixed_window", 1, "1h")),
            ("resilient.redis", redis.clone()),
        ],
    );
    let rt = two_workers();
    rt.block_on(r.scope(async { A::get()?.acquire().await }))
        .unwrap();
    pause(&url, 600);
    let r1 = r.clone();
    let in_flight = rt.spawn(async move { r1.scope(async { A::get()?.acquire().await }).await });
    std::thread::sleep(Duration::from_millis(150));
    r.reload(&root(vec![
        (A::PATH, limit("fixed_window", 100, "1s")),
        ("resilient.redis", redis),
    ]))
    .unwrap();
    assert!(rt.block_on(in_flight).unwrap().is_err(), "1/h: refused");
    let out = rt.block_on(r.scope(async { A::get()?.acquire().await }));
    assert!(
        out.is_ok(),
        "first call under 100/s, Redis has 100 permits: {out:?}"
    );
}

// ---------------------------------------------------------------- 2

/// Calls cancelled while they wait for their turn (a timeout around
/// `acquire`, a dropped request) never take back their place in
/// `waiting`: every later decision of this process asks for that many more
/// permits. With `lease = 1` (the default: "none beyond the caller's"),
/// replica A takes the whole shared limit after 3 calls, and replica B,
/// which made none, is refused.
#[test]
fn cancelled_waiters_do_not_make_a_replica_hoard_the_shared_limit() {
    // A server of its own: `CLIENT PAUSE` stops every client of it.
    let Some(redis) = server::Server::start("r2_hoard") else {
        return;
    };
    let url = redis.url();
    let prefix = server::prefix("r2_hoard");
    let replica = || {
        build(
            Registry::builder().spec::<A>(),
            vec![
                (A::PATH, limit("fixed_window", 10, "1h")),
                ("resilient.redis", patient(&url, &prefix)),
            ],
        )
    };
    let (a, b) = (replica(), replica());
    let rt = two_workers();
    rt.block_on(a.scope(async { A::get()?.acquire().await }))
        .unwrap();
    pause(&url, 400);
    let a1 = a.clone();
    let leader = rt.spawn(async move { a1.scope(async { A::get()?.acquire().await }).await });
    std::thread::sleep(Duration::from_millis(50));
    cancel_waiters(&rt, &a, 8);
    rt.block_on(leader).unwrap().unwrap();
    rt.block_on(a.scope(async { A::get()?.acquire().await }))
        .unwrap();
    let key = format!("{{{prefix}:{}}}:fixed_window:10:3600000000", A::PATH);
    let word = server::get(&url, &key);
    let out = rt.block_on(b.scope(async { B2::call().await }));
    assert!(
        out.is_ok(),
        "3 calls admitted in all, limit 10; Redis holds {word:?}; replica B: {out:?}"
    );
}

/// `n` calls of `A` in `r`, each cancelled (a 50 ms timeout) while it
/// waits for its turn behind a paused decision.
fn cancel_waiters(rt: &tokio::runtime::Runtime, r: &Registry, n: usize) {
    rt.block_on(async {
        let mut cancelled = Vec::new();
        for _ in 0..n {
            let r = r.clone();
            cancelled.push(tokio::spawn(async move {
                let call = r.scope(async { A::get()?.acquire().await });
                tokio::time::timeout(Duration::from_millis(50), call).await
            }));
        }
        for c in cancelled {
            assert!(c.await.unwrap().is_err(), "cancelled while waiting");
        }
    });
}

/// `A::get()?.acquire()` in the scope of replica B.
struct B2;
impl B2 {
    async fn call() -> Result<(), Error> {
        A::get()?.acquire().await
    }
}

/// The same leak over-admits a token bucket with `lease = 1`: 9 cancelled
/// waiters make each decision take the whole burst (10) as a lease valid
/// 1 s; used at its end, then a fresh burst: 19 calls in ~120 ms where the
/// bucket (10/s, burst 10) gives at most 11.
#[test]
fn cancelled_waiters_do_not_make_a_token_bucket_over_admit() {
    // A server of its own: `CLIENT PAUSE` stops every client of it.
    let Some(redis) = server::Server::start("r2_tb_leak") else {
        return;
    };
    let url = redis.url();
    let prefix = server::prefix("r2_tb_leak");
    let r = build(
        Registry::builder().spec::<A>(),
        vec![
            (A::PATH, limit("token_bucket", 10, "1s")),
            ("resilient.redis", patient(&url, &prefix)),
        ],
    );
    let rt = two_workers();
    rt.block_on(r.scope(async { A::get()?.acquire().await }))
        .unwrap();
    pause(&url, 400);
    let r1 = r.clone();
    let leader = rt.spawn(async move { r1.scope(async { A::get()?.acquire().await }).await });
    std::thread::sleep(Duration::from_millis(50));
    cancel_waiters(&rt, &r, 9);
    rt.block_on(leader).unwrap().unwrap();
    std::thread::sleep(Duration::from_millis(1500)); // the bucket is full again
    let admitted = rt.block_on(r.scope(async {
        let l = A::get().unwrap();
        l.acquire().await.unwrap(); // t0: one round trip
        tokio::time::sleep(Duration::from_millis(900)).await;
        let start = Instant::now();
        let mut n = 0;
        while start.elapsed() < Duration::from_millis(120) {
            n += u32::from(l.acquire().await.is_ok());
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        n
    }));
    assert!(
        admitted <= 11,
        "10/s, burst 10, lease 1: {admitted} admitted within 120 ms"
    );
}

// ---------------------------------------------------------------- 3

/// A refusal is kept at most 100 ms: an operator who deletes the key (a
/// quota reset), or a Redis restarted empty, is seen after that (it was
/// refused for the rest of the hour, where Redis and every other replica
/// admitted).
#[test]
fn a_known_refusal_follows_a_reset_of_the_key() {
    let Some(url) = server::url("r2_reset") else {
        return;
    };
    let prefix = server::prefix("r2_reset");
    let r = build(
        Registry::builder().spec::<A>(),
        vec![
            (A::PATH, limit("fixed_window", 1, "1h")),
            ("resilient.redis", server::section(&url, &prefix)),
        ],
    );
    let rt = two_workers();
    let call = || rt.block_on(r.scope(async { A::get()?.acquire().await }));
    call().unwrap();
    assert!(call().is_err(), "1/h: refused");
    let key = format!("{{{prefix}:{}}}:fixed_window:1:3600000000", A::PATH);
    let n: i64 = ::redis::cmd("DEL")
        .arg(&key)
        .query(&mut conn(&url))
        .unwrap();
    assert_eq!(n, 1, "the key {key}");
    std::thread::sleep(Duration::from_millis(150));
    let out = call();
    assert!(out.is_ok(), "Redis has the permit again: {out:?}");
}

// ---------------------------------------------------------------- 4

/// Blocking decisions (`try_acquire`, blocking fns) of the whole registry
/// share one connection behind one mutex, held across connect and round
/// trip: with a Redis that does not answer, 6 threads wait in turn, the
/// last 6 x `connect_timeout` (200 ms), where the policy (`allow`) should
/// apply after `connect_timeout` (+ `timeout`).
#[test]
fn blocking_decisions_of_many_threads_are_bounded_by_the_timeouts() {
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let held = Arc::new(std::sync::Mutex::new(Vec::new()));
    let h = Arc::clone(&held);
    std::thread::spawn(move || {
        for c in silent.incoming() {
            h.lock().unwrap().push(c); // accepted, never answered
        }
    });
    let prefix = server::prefix("r2_blocking");
    let r = build(
        Registry::builder().spec::<A>().spec::<B>(),
        vec![
            (
                A::PATH,
                with(
                    limit("fixed_window", 100, "1s"),
                    "on_backend_failure",
                    s("allow"),
                ),
            ),
            (
                B::PATH,
                with(
                    limit("fixed_window", 100, "1s"),
                    "on_backend_failure",
                    s("allow"),
                ),
            ),
            (
                "resilient.redis",
                server::section(&format!("redis://127.0.0.1:{port}"), &prefix),
            ),
        ],
    );
    let threads: Vec<_> = (0..6)
        .map(|i| {
            let r = r.clone();
            std::thread::spawn(move || {
                let start = Instant::now();
                let out = if i % 2 == 0 {
                    r.sync_scope(|| A::get()?.try_acquire())
                } else {
                    r.sync_scope(|| B::get()?.try_acquire())
                };
                (start.elapsed(), out.is_ok())
            })
        })
        .collect();
    let took: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let longest = took.iter().map(|t| t.0).max().unwrap();
    assert!(
        longest < Duration::from_millis(1000),
        "timeout 200ms, connect_timeout 200ms; each thread's wait: {took:?}"
    );
}
