//! The Redis backend in the snapshot, the readiness and the events, as its
//! own kind (not a spec): unknown until its first decision, up, down while
//! redis-server is killed (since when, its failures, its breaker, and the
//! policy of each spec that uses it), up again; its `readiness` rule; no
//! password anywhere in what it shows.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
use support::redis::{self as server, Server};
use support::*;

use resilient_core::backend::BackendState;
use resilient_core::circuit_breaker::State;
use resilient_core::registry::Ready;
use resilient_core::settings::Value;
use resilient_core::telemetry::Event;
use resilient_core::{RateLimiterSpec, Registry, RetrySpec, Spec};

#[derive(RateLimiterSpec)]
#[spec("redis_snapshot.local")]
struct Local;

#[derive(RateLimiterSpec)]
#[spec("redis_snapshot.in_process")]
struct InProcess;

#[derive(RetrySpec)]
#[spec("redis_snapshot.retry")]
struct Budgeted;

fn limit(policy: &str) -> Value {
    table([
        ("limit_for_period", int(1000)),
        ("limit_refresh_period", s("10s")),
        ("backend", s("redis")),
        ("on_backend_failure", s(policy)),
        ("local_limit_for_period", int(1000)),
    ])
}

fn registry(url: &str, prefix: &str, readiness: Option<&str>) -> Registry {
    let mut redis = server::section(url, prefix);
    if let Some(rule) = readiness {
        redis = with(redis, "readiness", s(rule));
    }
    build(
        Registry::builder()
            .spec::<Local>()
            .spec::<InProcess>()
            .spec::<Budgeted>(),
        vec![
            (Local::PATH, limit("local")),
            (
                InProcess::PATH,
                table([
                    ("limit_for_period", int(10)),
                    ("limit_refresh_period", s("1s")),
                ]),
            ),
            (
                Budgeted::PATH,
                table([
                    ("delay", s("1ms")),
                    ("attempts", int(1)),
                    (
                        "retry_budget",
                        table([("backend", s("redis")), ("on_backend_failure", s("allow"))]),
                    ),
                ]),
            ),
            ("resilient.redis", redis),
        ],
    )
}

fn call(rt: &tokio::runtime::Runtime, r: &Registry) -> bool {
    rt.block_on(r.scope(async { Local::get()?.acquire().await }))
        .is_ok()
}

#[test]
fn the_backend_shows_unknown_up_down_and_up_again_with_its_users_and_policies() {
    let Some(mut redis) = Server::start("the_backend_shows_its_state") else {
        return;
    };
    let url = redis.url();
    let r = registry(&url, &server::prefix("snapshot"), Some("not_ready"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();

    let backend = || {
        r.snapshot()
            .backends
            .into_iter()
            .next()
            .expect("one backend")
    };
    let first = backend();
    assert_eq!(r.snapshot().backends.len(), 1);
    assert_eq!((first.backend, first.path), ("redis", "resilient.redis"));
    assert_eq!(first.state, BackendState::Unknown);
    assert_eq!(first.since_ms, None);
    assert_eq!(first.url, url);
    let users: Vec<(&str, &str)> = first
        .used_by
        .iter()
        .map(|u| (u.path, u.on_backend_failure))
        .collect();
    assert_eq!(
        users,
        [
            ("redis_snapshot.local", "local"),
            ("redis_snapshot.retry", "allow")
        ],
        "the spec kept in the process is not a user"
    );
    assert!(
        r.snapshot().specs.iter().all(|s| s.spec != "RedisBackend"),
        "no spec named after the backend"
    );

    assert!(call(&rt, &r));
    let up = backend();
    assert_eq!(up.state, BackendState::Up);
    assert!(up.since_ms.is_some());
    assert_eq!(r.snapshot().readiness().status, Ready::Ready);

    redis.kill();
    for _ in 0..10 {
        assert!(call(&rt, &r), "the local policy admits");
    }
    let down = backend();
    assert_eq!(down.state, BackendState::Down);
    // The first call succeeded: four failures make five decisions, and the
    // breaker opens (50 % of at least 5); no decision is tried after.
    assert_eq!(down.failures, 4, "{down:?}");
    assert_eq!(down.breaker, State::Open, "no decision is tried");
    assert!(down.since_ms >= up.since_ms);
    let readiness = r.snapshot().readiness();
    assert_eq!(readiness.status, Ready::NotReady, "{readiness:#?}");
    assert_eq!(
        (readiness.reasons[0].spec, readiness.reasons[0].state),
        ("redis", "down")
    );

    assert!(redis.restart());
    std::thread::sleep(std::time::Duration::from_millis(1100));
    assert!(call(&rt, &r), "the probe");
    assert_eq!(backend().state, BackendState::Up);
    assert_eq!(backend().breaker, State::Closed);

    let changes: Vec<String> = r
        .recent_events()
        .iter()
        .filter_map(|e| match &e.event {
            Event::BackendChanged { backend, state, .. } => {
                Some(format!("{backend} {}", state.label()))
            }
            Event::BackendTransition {
                backend, from, to, ..
            } => Some(format!("{backend} breaker {from} -> {to}")),
            _ => None,
        })
        .collect();
    assert_eq!(
        changes,
        [
            "redis up",
            "redis down",
            "redis breaker closed -> open",
            "redis breaker open -> half-open",
            "redis breaker half-open -> closed",
            "redis up",
        ]
    );
}

#[test]
fn a_backend_down_degrades_readiness_by_default_and_ignore_reports_nothing() {
    let Some(mut redis) = Server::start("a_backend_down_degrades") else {
        return;
    };
    let url = redis.url();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let degraded = registry(&url, &server::prefix("degraded"), None);
    let ignored = registry(&url, &server::prefix("ignored"), Some("ignore"));
    redis.kill();
    assert!(call(&rt, &degraded));
    assert!(call(&rt, &ignored));
    assert_eq!(degraded.snapshot().readiness().status, Ready::Degraded);
    let quiet = ignored.snapshot().readiness();
    assert_eq!(quiet.status, Ready::Ready);
    assert!(quiet.reasons.is_empty());
}

#[cfg(feature = "serde")]
#[test]
fn the_backend_json_holds_no_password() {
    let Some(url) = server::url("the_backend_json_holds_no_password") else {
        return;
    };
    let with_password = url.replacen("redis://", "redis://user:s3cr3t-pw@", 1);
    let r = registry(&with_password, &server::prefix("json"), None);
    let json = serde_json::to_string(&r.snapshot()).unwrap();
    assert!(!json.contains("s3cr3t-pw"), "{json}");
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    let backend = &value["backends"][0];
    assert_eq!(backend["backend"], "redis");
    assert_eq!(backend["state"], "unknown");
    assert_eq!(backend["breaker"], "closed");
    assert_eq!(backend["readiness"], "degraded");
    assert_eq!(backend["used_by"][0]["on_backend_failure"], "local");
    assert!(
        backend["url"].as_str().unwrap().contains("***"),
        "{backend}"
    );
}
