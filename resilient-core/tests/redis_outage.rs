//! The Redis backend down, and back: each `on_backend_failure` policy does
//! what it says, no call hangs, the backend's breaker makes a dead Redis
//! cheap, and nothing is counted twice when it returns. Also what the
//! registry says at startup about the backend's settings.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
use support::redis::{self as server, get, two_workers, Server};
use support::*;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use resilient_core::circuit_breaker::State;
use resilient_core::settings::Value;
use resilient_core::telemetry::Event;
use resilient_core::{Error, RateLimiterSpec, Registry, Spec};

#[derive(RateLimiterSpec)]
#[spec("redis_outage.deny")]
struct Deny;

#[derive(RateLimiterSpec)]
#[spec("redis_outage.allow")]
struct Allow;

#[derive(RateLimiterSpec)]
#[spec("redis_outage.local")]
struct Local;

fn limit(policy: &str) -> Value {
    let section = table([
        ("limit_for_period", int(1000)),
        ("limit_refresh_period", s("10s")),
        ("backend", s("redis")),
        ("on_backend_failure", s(policy)),
    ]);
    if policy == "local" {
        with(section, "local_limit_for_period", int(5))
    } else {
        section
    }
}

/// 20 calls of each spec, in turn: (admitted, refused) per spec, and the
/// longest call.
async fn round(r: &Registry) -> ([(u32, u32); 3], Duration) {
    let mut counts = [(0, 0); 3];
    let mut longest = Duration::ZERO;
    for (i, count) in counts.iter_mut().enumerate() {
        for _ in 0..20 {
            let started = Instant::now();
            let out = match i {
                0 => r.scope(async { Deny::get()?.acquire().await }).await,
                1 => r.scope(async { Allow::get()?.acquire().await }).await,
                _ => r.scope(async { Local::get()?.acquire().await }).await,
            };
            longest = longest.max(started.elapsed());
            match out {
                Ok(()) => count.0 += 1,
                // `deny` refuses for the backend, `local` for its share.
                Err(Error::BackendUnavailable { .. }) if i == 0 => count.1 += 1,
                Err(Error::RateLimitExceeded { .. }) if i == 2 => count.1 += 1,
                Err(e) => panic!("{e}"),
            }
        }
    }
    (counts, longest)
}

#[test]
fn each_policy_does_what_it_says_while_redis_is_down_and_after() {
    let Some(mut redis) = Server::start("each_policy_does_what_it_says") else {
        return;
    };
    let url = redis.url();
    let prefix = server::prefix("outage");
    let r = build(
        Registry::builder()
            .spec::<Deny>()
            .spec::<Allow>()
            .spec::<Local>(),
        vec![
            (Deny::PATH, limit("deny")),
            (Allow::PATH, limit("allow")),
            (Local::PATH, limit("local")),
            ("resilient.redis", server::section(&url, &prefix)),
        ],
    );
    let opened = Arc::new(AtomicU64::new(0));
    let closed = Arc::new(AtomicU64::new(0));
    let (o, c) = (Arc::clone(&opened), Arc::clone(&closed));
    let _subscription = r.subscribe(move |event| {
        if let Event::BackendTransition {
            backend: "redis",
            to,
            ..
        } = event
        {
            match to {
                State::Open => o.fetch_add(1, Ordering::Relaxed),
                State::Closed => c.fetch_add(1, Ordering::Relaxed),
                _ => 0,
            };
        }
    });
    let key = |path: &str| format!("{{{prefix}:{path}}}:fixed_window:1000:10000000");
    let rt = two_workers();

    // Up: every call is decided in Redis.
    let (up, _) = rt.block_on(round(&r));
    assert_eq!(up, [(20, 0), (20, 0), (20, 0)]);
    for path in [Deny::PATH, Allow::PATH, Local::PATH] {
        let word = get(&url, &key(path)).unwrap_or_default();
        assert!(word.ends_with(" 20"), "{path}: {word}");
    }

    // Down: deny refuses, allow admits, local admits its share of 5.
    redis.kill();
    let (down, longest) = rt.block_on(round(&r));
    assert_eq!(down, [(0, 20), (20, 0), (5, 15)]);
    assert!(
        longest < Duration::from_millis(600),
        "a call took {longest:?}"
    );
    assert_eq!(
        opened.load(Ordering::Relaxed),
        1,
        "the backend's breaker opened once"
    );
    // Open: a call costs a check, not a timeout.
    let started = Instant::now();
    let (open, _) = rt.block_on(round(&r));
    assert_eq!(
        open,
        [(0, 20), (20, 0), (0, 20)],
        "the local share is spent"
    );
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "60 calls took {:?}",
        started.elapsed()
    );

    // Back: after the breaker's second, one probe closes it, and Redis
    // counts exactly the calls made since (none of the outage's).
    assert!(redis.restart());
    std::thread::sleep(Duration::from_millis(1100));
    let (back, _) = rt.block_on(round(&r));
    assert_eq!(back, [(20, 0), (20, 0), (20, 0)]);
    assert_eq!(
        closed.load(Ordering::Relaxed),
        1,
        "the backend's breaker closed once"
    );
    for path in [Deny::PATH, Allow::PATH, Local::PATH] {
        let word = get(&url, &key(path)).unwrap_or_default();
        assert!(word.ends_with(" 20"), "{path}: {word}");
    }
}

/// A free port: nothing listens there.
fn dead_url() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap();
    format!("redis://127.0.0.1:{port}")
}

fn problems(sections: Vec<(&str, Value)>) -> Vec<String> {
    match Registry::builder().spec::<Deny>().build(&root(sections)) {
        Ok(_) => Vec::new(),
        Err(problems) => problems.iter().map(ToString::to_string).collect(),
    }
}

#[test]
fn startup_names_the_spec_the_url_and_what_was_tried() {
    let url = dead_url();
    let mut redis = server::section(&url, "p");
    let found = problems(vec![
        (Deny::PATH, limit("deny")),
        (
            "resilient.redis",
            with(redis.clone(), "require_at_startup", boolean(true)),
        ),
    ]);
    assert_eq!(found.len(), 1, "{found:?}");
    for part in [
        "Deny",
        "redis_outage.deny",
        &url,
        "connected with `connect_timeout` = 200ms",
        "require_at_startup",
    ] {
        assert!(found[0].contains(part), "{part} in {}", found[0]);
    }
    // Not required: the registry starts, and the policy answers.
    assert!(problems(vec![
        (Deny::PATH, limit("deny")),
        ("resilient.redis", redis.clone())
    ])
    .is_empty());
    // No section at all.
    let found = problems(vec![(Deny::PATH, limit("deny"))]);
    assert!(
        found.len() == 1 && found[0].contains("no `[resilient.redis]` section"),
        "{found:?}"
    );
    // Every problem of the section at once.
    redis = table([
        ("url", s("http://example.com")),
        ("timeout", s("0ms")),
        ("key_prefix", s("a b")),
        ("pool", int(4)),
    ]);
    let found = problems(vec![
        (Deny::PATH, limit("deny")),
        ("resilient.redis", redis),
    ]);
    assert_eq!(found.len(), 4, "{found:#?}");
}

#[test]
fn policies_are_validated_with_the_spec() {
    let url = dead_url();
    let redis = server::section(&url, "p");
    let local_without_share = with(limit("deny"), "on_backend_failure", s("local"));
    let found = problems(vec![
        (Deny::PATH, local_without_share),
        ("resilient.redis", redis.clone()),
    ]);
    assert!(
        found.len() == 1 && found[0].contains("local_limit_for_period"),
        "{found:?}"
    );
    let share_too_big = with(limit("local"), "local_limit_for_period", int(2000));
    let found = problems(vec![
        (Deny::PATH, share_too_big),
        ("resilient.redis", redis.clone()),
    ]);
    assert!(
        found.len() == 1 && found[0].contains("at most `limit_for_period` (1000)"),
        "{found:?}"
    );
    let policy_without_backend = with(limit("allow"), "backend", s("local"));
    let found = problems(vec![(Deny::PATH, policy_without_backend)]);
    assert!(
        found.len() == 1 && found[0].contains("only with `backend = \"redis\"`"),
        "{found:?}"
    );
}

/// With Redis unreachable from the start, no call hangs: each is refused
/// within `connect_timeout` (deny), and once the breaker opens, at once.
#[test]
fn an_unreachable_redis_never_holds_a_call() {
    let url = dead_url();
    let r = build(
        Registry::builder().spec::<Deny>(),
        vec![
            (Deny::PATH, limit("deny")),
            ("resilient.redis", server::section(&url, "p")),
        ],
    );
    let rt = two_workers();
    let calls = Arc::new(AtomicU64::new(0));
    rt.block_on(async {
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let (r, calls) = (r.clone(), Arc::clone(&calls));
                tokio::spawn(async move {
                    let started = Instant::now();
                    let out = r.scope(async { Deny::get()?.acquire().await }).await;
                    assert!(
                        matches!(out, Err(Error::BackendUnavailable { .. })),
                        "{out:?}"
                    );
                    calls.fetch_add(1, Ordering::Relaxed);
                    started.elapsed()
                })
            })
            .collect();
        for t in tasks {
            let took = t.await.unwrap();
            assert!(took < Duration::from_millis(1000), "{took:?}");
        }
    });
    assert_eq!(calls.load(Ordering::Relaxed), 64);
}

/// Redis down, `on_backend_failure` at its default `deny`: 50 calls through
/// each way in (`acquire().await`, a handle's `try_acquire`, a blocking
/// fn) are refused for the backend, not for a limit: the error says the
/// backend is unavailable, and an HTTP server answers 503 without a
/// `Retry-After` that would promise what it cannot know (it answered 429
/// with `Retry-After: 1`, "rate limit exceeded").
#[test]
fn deny_says_the_backend_is_unavailable() {
    let r = build(
        Registry::builder().spec::<Deny>(),
        vec![
            (Deny::PATH, limit("deny")),
            ("resilient.redis", server::section(&dead_url(), "p")),
        ],
    );
    let rt = two_workers();
    let mut errors = Vec::new();
    for i in 0..50 {
        let out = match i % 3 {
            0 => rt.block_on(r.scope(async { Deny::get()?.acquire().await })),
            1 => r.sync_scope(|| Deny::get()?.try_acquire()),
            _ => r.sync_scope(|| deny_blocking(&AtomicU64::new(0))),
        };
        errors.push(out.expect_err("refused"));
    }
    let said: Vec<(String, (u16, Option<Duration>))> = errors
        .iter()
        .map(|e| (e.to_string(), resilient_core::http::rejection_status(e)))
        .collect();
    println!("{:?}", &said[..3]);
    let unavailable = said
        .iter()
        .filter(|(text, status)| text.contains("backend is unavailable") && *status == (503, None))
        .count();
    assert_eq!(unavailable, 50, "{said:#?}");
    assert!(errors.iter().all(|e| matches!(
        e,
        Error::BackendUnavailable {
            spec: "Deny",
            backend: "redis"
        }
    )));
}

#[resilient_core::rate_limited(Deny)]
fn deny_blocking(runs: &AtomicU64) -> Result<(), Error> {
    runs.fetch_add(1, Ordering::SeqCst);
    Ok(())
}
