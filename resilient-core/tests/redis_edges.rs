//! The Redis backend at its edges: programs without async code, dead
//! runtimes, reloads, clocks that step back, slow handshakes, silent
//! connections, runtimes without timers, rounding. Each test failed before
//! its fix.
//! Needs RESILIENT_REDIS_URL (see `support/redis.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
use support::redis::{self as server, replica, two_workers, Proxy};
use support::*;

use std::net::TcpListener;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use resilient_core::settings::Value;
use resilient_core::{Error, RateLimiterSpec, Registry, Spec};

#[derive(RateLimiterSpec)]
#[spec("redis_review.a")]
struct A;

#[derive(RateLimiterSpec)]
#[spec("redis_review.b")]
struct B;

fn limit(kind: &str, n: i128, period: &str) -> Value {
    table([
        ("type", s(kind)),
        ("limit_for_period", int(n)),
        ("limit_refresh_period", s(period)),
        ("backend", s("redis")),
    ])
}

fn conn(url: &str) -> ::redis::Connection {
    ::redis::Client::open(url)
        .unwrap()
        .get_connection()
        .unwrap()
}

// ---------------------------------------------------------------- 1

/// A program without async code (a sync service, blocking fns only)
/// reaches Redis: `try_acquire` on a plain thread takes its permits there
/// (it was refused by `deny` when a blocking decision needed a runtime).
#[test]
fn a_program_without_async_code_is_decided_by_redis() {
    let Some(url) = server::url("sync_only") else {
        return;
    };
    let prefix = server::prefix("sync_only");
    let r = replica::<A>(
        limit("fixed_window", 10, "1h"),
        server::section(&url, &prefix),
    );
    let h = r.sync_scope(A::get).unwrap();
    let out = h.try_acquire();
    assert!(out.is_ok(), "first permit of 10 with Redis up: {out:?}");
}

// ---------------------------------------------------------------- 2

/// The first async decision ran on a runtime that has since been dropped
/// (a startup runtime, a test's): later blocking decisions, from
/// `spawn_blocking` on a live one, still reach Redis (they were sent to the
/// dead runtime).
#[test]
fn blocking_decisions_outlive_the_first_runtime() {
    let Some(url) = server::url("first_runtime") else {
        return;
    };
    let prefix = server::prefix("first_runtime");
    let r = replica::<A>(
        limit("fixed_window", 10, "1h"),
        server::section(&url, &prefix),
    );
    {
        let rt1 = two_workers();
        let r = r.clone();
        rt1.block_on(async move { r.scope(async { A::get()?.acquire().await }).await })
            .unwrap();
    }
    let rt2 = two_workers();
    let out = rt2.block_on(async {
        // let the new runtime make a decision of its own first
        let r2 = r.clone();
        // the first call on rt2 finds rt1's connection dead and reconnects
        let _ = r2.scope(async { A::get()?.acquire().await }).await;
        let async_out = r2.scope(async { A::get()?.acquire().await }).await;
        assert!(async_out.is_ok(), "async on rt2: {async_out:?}");
        let r3 = r.clone();
        tokio::task::spawn_blocking(move || r3.sync_scope(|| A::get()?.try_acquire()))
            .await
            .unwrap()
    });
    assert!(out.is_ok(), "permit 4 of 10 with Redis up: {out:?}");
}

// ---------------------------------------------------------------- 3

/// A blocking call on a worker thread of a multi-thread runtime is decided
/// at once (it was spawned into the worker's own LIFO slot, which no other
/// worker takes, and refused after its whole deadline).
#[test]
fn a_blocking_call_on_a_worker_is_decided_at_once() {
    let Some(url) = server::url("worker") else {
        return;
    };
    let prefix = server::prefix("worker");
    let r = replica::<A>(
        limit("fixed_window", 100, "1h"),
        server::section(&url, &prefix),
    );
    let rt = two_workers();
    let (took, out) = rt.block_on(async {
        let r1 = r.clone();
        r1.scope(async { A::get()?.acquire().await }).await.unwrap();
        let r2 = r.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let out = r2.sync_scope(|| A::get()?.try_acquire());
            (started.elapsed(), out)
        })
        .await
        .unwrap()
    });
    assert!(out.is_ok(), "took {took:?}: {out:?}");
}

// ---------------------------------------------------------------- 4

/// `resilient.redis` is read when the registry is built: a reload with a
/// new URL is refused, saying so, and the limiters keep asking the old
/// server (the application restarts to change it).
#[test]
fn a_reload_that_changes_the_redis_section_is_refused() {
    let Some(url) = server::url("reload_url") else {
        return;
    };
    let prefix = server::prefix("reload_url");
    let dead = {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        format!("redis://127.0.0.1:{port}")
    };
    let spec = limit("fixed_window", 10, "1h");
    let r = replica::<A>(spec.clone(), server::section(&dead, &prefix));
    let reloaded = r.reload(&root(vec![
        (A::PATH, spec),
        ("resilient.redis", server::section(&url, &prefix)),
    ]));
    let problems = reloaded.expect_err("refused");
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].path, "resilient.redis");
    assert!(
        problems[0].rule.contains("restart the application"),
        "{problems:?}"
    );
    let rt = two_workers();
    let out = rt.block_on(r.scope(async { A::get()?.acquire().await }));
    assert!(
        matches!(out, Err(Error::BackendUnavailable { .. })),
        "still the dead server, `deny`: {out:?}"
    );
}

// ---------------------------------------------------------------- 5

/// A reload that adds `[resilient.redis]` and switches a spec to it is
/// refused because the section changed (it said "the configuration has no
/// `[resilient.redis]` section", though the configuration given has one).
#[test]
fn a_reload_that_adds_the_redis_section_says_why_it_is_refused() {
    let url = "redis://127.0.0.1:6399";
    let local = table([
        ("limit_for_period", int(10)),
        ("limit_refresh_period", s("1s")),
    ]);
    let r = build(Registry::builder().spec::<A>(), vec![(A::PATH, local)]);
    let out = r.reload(&root(vec![
        (A::PATH, limit("fixed_window", 10, "1s")),
        ("resilient.redis", server::section(url, "p")),
    ]));
    let problems: Vec<String> = out
        .err()
        .unwrap_or_default()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(
        !problems
            .iter()
            .any(|p| p.contains("has no `[resilient.redis]` section")),
        "{problems:#?}"
    );
}

// ---------------------------------------------------------------- 6

/// Token bucket: a reload to a shorter interval rescales what is owed in
/// the local limiter (1 per hour -> 1000 per second: owed 1 h becomes
/// 1 ms); in Redis the new settings count under a key of their own (the
/// old arrival time refused for an hour).
#[test]
fn a_reload_of_the_rate_applies_in_redis() {
    let Some(url) = server::url("tb_reload") else {
        return;
    };
    let prefix = server::prefix("tb_reload");
    let redis = server::section(&url, &prefix);
    let local = |n: i128, p: &str| {
        table([
            ("type", s("token_bucket")),
            ("limit_for_period", int(n)),
            ("limit_refresh_period", s(p)),
        ])
    };
    let r = build(
        Registry::builder().spec::<A>().spec::<B>(),
        vec![
            (A::PATH, local(1, "1h")),
            (B::PATH, limit("token_bucket", 1, "1h")),
            ("resilient.redis", redis.clone()),
        ],
    );
    let rt = two_workers();
    rt.block_on(async {
        r.scope(async {
            A::get().unwrap().acquire().await.unwrap();
            B::get().unwrap().acquire().await.unwrap();
        })
        .await;
    });
    r.reload(&root(vec![
        (A::PATH, local(1000, "1s")),
        (B::PATH, limit("token_bucket", 1000, "1s")),
        ("resilient.redis", redis),
    ]))
    .unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let (a, b) = rt.block_on(r.scope(async {
        (
            A::get().unwrap().acquire().await,
            B::get().unwrap().acquire().await,
        )
    }));
    assert!(a.is_ok(), "local: {a:?}");
    assert!(b.is_ok(), "redis, same settings as local: {b:?}");
}

// ---------------------------------------------------------------- 7

/// The server's clock steps back (NTP correction, or a failover to a
/// replica whose clock is behind the primary that wrote the key): the
/// window's start lies ahead of `now`; the window goes on from now with
/// its 9 permits left (it answered a wait of the whole step). Here the key
/// is written as a server 10 minutes ahead would have written it.
#[test]
fn a_clock_stepping_back_does_not_stop_the_shared_limit() {
    let Some(url) = server::url("clock_back") else {
        return;
    };
    let prefix = server::prefix("clock_back");
    let r = replica::<A>(
        limit("fixed_window", 10, "1s"),
        server::section(&url, &prefix),
    );
    let mut c = conn(&url);
    let (secs, micros): (u64, u64) = ::redis::cmd("TIME").query(&mut c).unwrap();
    let ahead = secs * 1_000_000 + micros + 600 * 1_000_000;
    // The key the limiter reads: its parameters are part of it.
    let key = format!("{{{prefix}:{}}}:fixed_window:10:1000000", A::PATH);
    let () = ::redis::cmd("SET")
        .arg(&key)
        .arg(format!("{ahead} 1"))
        .arg("PX")
        .arg(601_000)
        .query(&mut c)
        .unwrap();
    let rt = two_workers();
    let out = rt.block_on(r.scope(async { A::get()?.acquire().await }));
    assert!(out.is_ok(), "9 of 10 permits left: {out:?}");
    let word = server::get(&url, &key).unwrap_or_default();
    assert!(word.ends_with(" 2"), "the script read this key: {word}");
}

// ---------------------------------------------------------------- 8

/// Checked, holds: after the open connection goes silent (no RST), the
/// backend gets decisions again on a new connection.
#[test]
fn a_silent_connection_is_replaced() {
    let Some(url) = server::url("silent") else {
        return;
    };
    let proxy = Proxy::start(url.trim_start_matches("redis://").to_owned());
    let prefix = server::prefix("silent");
    let r = replica::<A>(
        limit("fixed_window", 100_000, "1h"),
        server::section(&proxy.url(), &prefix),
    );
    let rt = two_workers();
    let ok = |r: &Registry| {
        rt.block_on(r.scope(async { A::get()?.acquire().await }))
            .is_ok()
    };
    assert!(ok(&r) && ok(&r));
    proxy.freeze_open_connections();
    let until = Instant::now() + Duration::from_secs(5);
    let mut admitted = 0;
    while Instant::now() < until {
        if ok(&r) {
            admitted += 1;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        admitted > 0,
        "not one call decided in 5 s, new connections work"
    );
}

/// `connect_timeout` = 1s, `timeout` = 100ms, a handshake of 300 ms: the
/// connection opens within `connect_timeout`, and decisions follow (it
/// was made inside the decision's `timeout`, dropped unfinished every
/// time).
#[test]
fn a_handshake_longer_than_timeout_connects() {
    let Some(url) = server::url("handshake") else {
        return;
    };
    let proxy = Proxy::start(url.trim_start_matches("redis://").to_owned());
    proxy.first_delay_ms.store(300, Ordering::SeqCst);
    let prefix = server::prefix("handshake");
    let section = with(
        with(
            server::section(&proxy.url(), &prefix),
            "timeout",
            s("100ms"),
        ),
        "connect_timeout",
        s("1s"),
    );
    let r = replica::<A>(limit("fixed_window", 100_000, "1h"), section);
    let rt = two_workers();
    let until = Instant::now() + Duration::from_secs(4);
    let mut admitted = 0;
    while Instant::now() < until {
        if rt
            .block_on(r.scope(async { A::get()?.acquire().await }))
            .is_ok()
        {
            admitted += 1;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(admitted > 0, "not one call decided in 4 s");
}

// ---------------------------------------------------------------- 9

/// A runtime with the IO driver and no time driver: the call gets the
/// policy, no panic (it panicked inside `tokio::time::timeout`).
#[test]
fn a_runtime_without_timers_gets_the_policy() {
    let Some(url) = server::url("no_timers") else {
        return;
    };
    let prefix = server::prefix("no_timers");
    let r = replica::<A>(
        limit("fixed_window", 10, "1h"),
        server::section(&url, &prefix),
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_io()
        .build()
        .unwrap();
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.block_on(r.scope(async { A::get()?.acquire().await }))
    }));
    assert!(out.is_ok(), "acquire panicked");
}

// ---------------------------------------------------------------- 10

/// Token bucket of 3 per second: a burst of 3 at one instant. The
/// interval goes to Redis rounded up to a whole µs (333334), and the burst
/// tolerance must be counted in that interval (666668), or the third
/// permit of the burst is 2 µs late. With `lease = 3`, the first call's
/// one round trip takes the whole burst: three permits, one round trip.
#[test]
fn a_token_bucket_burst_is_whole_in_redis() {
    let Some(redis) = server::Server::start("burst") else {
        return;
    };
    let url = redis.url();
    let prefix = server::prefix("burst");
    let spec = with(limit("token_bucket", 3, "1s"), "lease", int(3));
    let r = replica::<A>(spec, server::section(&url, &prefix));
    let rt = two_workers();
    // A first run loads the script (EVALSHA refused, then EVAL: two runs).
    let warm = replica::<B>(
        limit("token_bucket", 3, "1s"),
        server::section(&url, &prefix),
    );
    assert!(rt
        .block_on(warm.scope(async { B::get()?.acquire().await }))
        .is_ok());
    let before = server::script_runs(&url);
    let admitted = rt.block_on(r.scope(async {
        let l = A::get()?;
        let mut n = 0;
        for _ in 0..4 {
            n += u32::from(l.acquire().await.is_ok());
        }
        Ok::<_, Error>(n)
    }));
    assert_eq!(admitted.unwrap(), 3, "the burst, then a refusal");
    assert_eq!(
        server::script_runs(&url) - before,
        2,
        "one round trip for the burst, one for the refusal"
    );
}

// ---------------------------------------------------------------- sections

/// `[resilient.redis]` while no spec of the registry says `backend =
/// "redis"`: nothing connects, and the registry says so at WARN, once at
/// the build; with a spec on Redis, nothing is said.
#[test]
fn a_redis_section_no_spec_uses_is_a_warning() {
    let capture = support::capture::Capture::default();
    let _subscriber = tracing::subscriber::set_default(capture.clone());
    let local = table([
        ("limit_for_period", int(10)),
        ("limit_refresh_period", s("1s")),
    ]);
    let section = server::section("redis://127.0.0.1:6399", "unused");
    let r = build(
        Registry::builder().spec::<A>(),
        vec![(A::PATH, local), ("resilient.redis", section.clone())],
    );
    let warned: Vec<String> = capture
        .at("resilient::registry", tracing::Level::WARN)
        .into_iter()
        .map(|l| l.message)
        .collect();
    assert_eq!(
        warned,
        ["`resilient.redis` has no effect: no spec says `backend = \"redis\"` (a rate limiter's, or a retry spec's `retry_budget.backend`), so every limit and budget is kept in this process; set `backend = \"redis\"` on the specs replicas must share, or remove the section"]
    );
    drop(r);
    let before = capture.lines().len();
    let _r = build(
        Registry::builder().spec::<A>(),
        vec![
            (A::PATH, limit("fixed_window", 10, "1s")),
            ("resilient.redis", section),
        ],
    );
    let after: Vec<_> = capture.lines().into_iter().skip(before).collect();
    assert!(
        after.iter().all(|l| l.level != tracing::Level::WARN),
        "{after:#?}"
    );
}

// ---------------------------------------------------------------- 12

/// A token bucket in Redis counts its interval in whole microseconds:
/// more than one permit per microsecond would be rounded to one, a rate
/// lowered in silence (a million per 100 ms gave 100,000). Refused when
/// read, with no server needed; one per microsecond exactly is kept.
#[test]
fn a_shared_token_bucket_faster_than_one_permit_per_microsecond_is_refused() {
    let url = "redis://127.0.0.1:6399";
    let built = |n: i128, period: &str| {
        Registry::builder().spec::<A>().build(&root(vec![
            (A::PATH, limit("token_bucket", n, period)),
            ("resilient.redis", server::section(url, "p")),
        ]))
    };
    let problems: Vec<String> = built(1_000_000, "100ms")
        .err()
        .unwrap_or_default()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert!(
        problems[0].contains("the shared bucket gives at most one permit per microsecond"),
        "{problems:#?}"
    );
    assert!(built(1_000_000, "1s").is_ok());
    // The same rate in this process is kept: it counts nanoseconds.
    let local = table([
        ("type", s("token_bucket")),
        ("limit_for_period", int(1_000_000)),
        ("limit_refresh_period", s("100ms")),
    ]);
    assert!(Registry::builder()
        .spec::<A>()
        .build(&root(vec![(A::PATH, local)]))
        .is_ok());
}
