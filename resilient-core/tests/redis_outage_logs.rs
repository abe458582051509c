//! The Redis backend's outage in logs and metrics: in a binary of its
//! own, since a log line's callsite caches whether anyone listens, and the
//! other tests' threads have no subscriber.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
use support::redis::{self as server, Server};
use support::*;

use std::time::Duration;

use resilient_core::settings::Value;
use resilient_core::{RateLimiterSpec, Registry, Spec};

fn limit(policy: &str) -> Value {
    table([
        ("limit_for_period", int(1000)),
        ("limit_refresh_period", s("10s")),
        ("backend", s("redis")),
        ("on_backend_failure", s(policy)),
    ])
}

#[derive(RateLimiterSpec)]
#[spec("redis_outage_logs.observed")]
struct Observed;

/// Two outages: one ERROR each on `resilient::backend`, one INFO when Redis
/// answers again; every failed decision counted by reason, every call the
/// policy answered counted by policy. The breaker opens at 3 failures (its
/// window holds 3 successes before them): the other 17 calls of the outage
/// cost no attempt.
#[test]
fn an_outage_is_logged_once_and_counted_always() {
    let Some(mut redis) = Server::start("an_outage_is_logged_once_and_counted_always") else {
        return;
    };
    let meters = support::capture::Meters::default();
    let capture = support::capture::Capture::default();
    let _subscriber = tracing::subscriber::set_default(capture.clone());
    let section = with(
        limit("deny"),
        "telemetry",
        table([("metrics", table([("enabled", boolean(true))]))]),
    );
    let r = build(
        Registry::builder().spec::<Observed>(),
        vec![
            (Observed::PATH, section),
            (
                "resilient.redis",
                server::section(&redis.url(), &server::prefix("observed")),
            ),
        ],
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let calls = |n| {
        metrics::with_local_recorder(&meters, || {
            rt.block_on(async {
                let mut admitted = 0;
                for _ in 0..n {
                    if r.scope(async { Observed::get()?.acquire().await })
                        .await
                        .is_ok()
                    {
                        admitted += 1;
                    }
                }
                admitted
            })
        })
    };
    assert_eq!(calls(3), 3);
    redis.kill();
    assert_eq!(calls(20), 0);
    let failures = |meters: &support::capture::Meters| {
        ["connect", "error", "timeout", "garbage"]
            .iter()
            .filter_map(|reason| {
                meters.counter(
                    "resilient_backend_failures_total",
                    &[("backend", "redis"), ("reason", reason)],
                )
            })
            .sum::<u64>()
    };
    // The window holds the 3 decisions made before: 3 failures of 6 open it.
    assert_eq!(failures(&meters), 3, "the breaker opened at 50% of 6");
    let unavailable = |meters: &support::capture::Meters| {
        meters.counter(
            "resilient_rate_limiter_backend_unavailable_total",
            &[
                ("spec", "Observed"),
                ("path", "redis_outage_logs.observed"),
                ("policy", "deny"),
            ],
        )
    };
    assert_eq!(unavailable(&meters), Some(20));
    assert!(redis.restart());
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(calls(3), 3);
    redis.kill();
    assert_eq!(calls(1), 0);
    let errors = capture.at("resilient::backend", tracing::Level::ERROR);
    let infos = capture.at("resilient::backend", tracing::Level::INFO);
    assert_eq!(
        (errors.len(), infos.len()),
        (2, 1),
        "{errors:#?} {infos:#?}"
    );
    assert!(
        errors[0].message.contains("on_backend_failure"),
        "{}",
        errors[0].message
    );
    assert_eq!(unavailable(&meters), Some(21));
    // The refusals' summary says why: the backend, not a limit nobody
    // reached.
    let warns = capture.at("resilient::rate_limiter", tracing::Level::WARN);
    println!("{warns:#?}");
    assert!(!warns.is_empty());
    for line in warns {
        assert!(
            line.message.contains("Redis backend is unavailable")
                && !line.message.contains("more than"),
            "{}",
            line.message
        );
    }
}

#[derive(RateLimiterSpec)]
#[spec("redis_outage_logs.probed")]
struct Probed;

/// Redis killed, the backend's breaker open (the `local` policy answers),
/// a probe that finds it still down logs why it failed; then Redis
/// restarted empty behind a proxy that delays each new connection's first
/// answer by 300 ms (a busy host: the connection and the script's load
/// take longer than `timeout`, 50 ms, and less than `connect_timeout` +
/// `timeout`, 1.05 s). The first probe after the restart reconnects,
/// loads the script and decides in Redis: the breaker closes, and Redis
/// holds that permit. It failed on `timeout` alone, and the `local` policy
/// lasted one more open period.
#[test]
fn the_first_probe_after_a_restart_reconnects_within_connect_timeout_and_timeout() {
    let Some(mut redis) = Server::start("first_probe") else {
        return;
    };
    let capture = support::capture::Capture::default();
    let _subscriber = tracing::subscriber::set_default(capture.clone());
    let proxy = support::redis::Proxy::start(format!("127.0.0.1:{}", redis.port));
    let prefix = server::prefix("first_probe");
    let section = table([
        ("url", s(&proxy.url())),
        ("key_prefix", s(&prefix)),
        ("timeout", s("50ms")),
        ("connect_timeout", s("1s")),
    ]);
    let local = with(limit("local"), "local_limit_for_period", int(1000));
    let r = build(
        Registry::builder().spec::<Probed>(),
        vec![(Probed::PATH, local), ("resilient.redis", section)],
    );
    let transitions = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = std::sync::Arc::clone(&transitions);
    let _subscription = r.subscribe(move |event| {
        if let resilient_core::telemetry::Event::BackendTransition {
            backend: "redis",
            to,
            ..
        } = event
        {
            seen.lock().unwrap().push(*to);
        }
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let call = || {
        rt.block_on(r.scope(async { Probed::get()?.acquire().await }))
            .is_ok()
    };
    let key = format!("{{{prefix}:redis_outage_logs.probed}}:fixed_window:1000:10000000");
    assert!(call() && call());
    redis.kill();
    // The local policy admits every call; the breaker opens.
    assert!((0..10).all(|_| call()));
    // Open for 1 s: the next call is a probe, and Redis is still down.
    std::thread::sleep(Duration::from_millis(1100));
    assert!(call());
    // Back, empty, behind a slow first answer.
    proxy
        .first_delay_ms
        .store(300, std::sync::atomic::Ordering::SeqCst);
    assert!(redis.restart());
    std::thread::sleep(Duration::from_millis(1100));
    let started = std::time::Instant::now();
    assert!(call());
    let took = started.elapsed();
    let word = server::get(&redis.url(), &key);
    let states: Vec<String> = transitions
        .lock()
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect();
    println!("the first probe after the restart took {took:?}; Redis holds {word:?}; transitions {states:?}");
    assert_eq!(
        states,
        ["open", "half-open", "open", "half-open", "closed"],
        "opened, a probe while down, the first probe after the restart closes it"
    );
    assert!(
        word.as_deref().is_some_and(|w| w.ends_with(" 1")),
        "the probe's permit is in Redis: {word:?}"
    );
    let warns = capture.at("resilient::backend", tracing::Level::WARN);
    assert_eq!(warns.len(), 1, "{warns:#?}");
    assert!(
        warns[0].message.contains("probe failed")
            && warns[0].fields.get("reason").map(String::as_str) == Some("connect"),
        "the failed probe says why: {warns:#?}"
    );
}
