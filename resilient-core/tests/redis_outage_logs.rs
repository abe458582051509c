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
}
