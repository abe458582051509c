//! Readiness: an open breaker degrades the service's readiness by default
//! and fails it only when its spec says `readiness = "not_ready"`; a keyed
//! breaker's keys fail it only when every key is unhealthy; the snapshot
//! lists every unhealthy key; the key is validated and reloaded.

#![allow(clippy::expect_used, clippy::unwrap_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::*;

use resilient_core::circuit_breaker::{Metrics, State};
use resilient_core::registry::{ReadinessRule, Ready};
use resilient_core::settings::Value;
use resilient_core::{
    circuit_breakable, retryable, CircuitBreakerSpec, Error, Registry, RetrySpec, Spec,
};

#[derive(Debug, thiserror::Error)]
enum StoreError {
    #[error("store unavailable")]
    Unavailable,
    #[error(transparent)]
    Resilience(#[from] Error),
}

#[derive(CircuitBreakerSpec)]
#[spec("ready.breaker")]
struct Breaker;

#[derive(CircuitBreakerSpec)]
#[spec("ready.hosts")]
struct HostBreaker;

#[derive(RetrySpec)]
#[spec("ready.retry")]
struct Retry;

#[circuit_breakable(Breaker)]
async fn call(fail: bool) -> Result<(), StoreError> {
    if fail {
        Err(StoreError::Unavailable)
    } else {
        Ok(())
    }
}

#[circuit_breakable(HostBreaker, key = host)]
async fn on_host(host: &str, fail: bool) -> Result<(), StoreError> {
    let _ = host;
    if fail {
        Err(StoreError::Unavailable)
    } else {
        Ok(())
    }
}

#[retryable(Retry)]
async fn retried() -> Result<(), StoreError> {
    Ok(())
}

fn breaker(rule: Option<&str>) -> Value {
    let section = breaker_section(100, 1, "1s", 1);
    match rule {
        Some(rule) => with(section, "readiness", s(rule)),
        None => section,
    }
}

#[tokio::test(start_paused = true)]
async fn an_open_breaker_degrades_readiness_by_default_and_the_service_stays_ready() {
    let r = registry::<Breaker>(breaker(None));
    assert_eq!(r.snapshot().readiness().status, Ready::Ready);
    assert!(r.snapshot().readiness().reasons.is_empty());
    r.scope(call(true)).await.unwrap_err();
    let readiness = r.snapshot().readiness();
    assert_eq!(readiness.status, Ready::Degraded);
    assert_eq!(readiness.status.http_status(), 200);
    assert_eq!(readiness.reasons.len(), 1, "{readiness:#?}");
    let reason = &readiness.reasons[0];
    assert_eq!(
        (reason.spec, reason.path, reason.state, reason.rule),
        ("Breaker", "ready.breaker", "open", ReadinessRule::Degraded)
    );
    assert_eq!(reason.key, None);
    assert_eq!(reason.effect, Ready::Degraded);
}

#[tokio::test(start_paused = true)]
async fn not_ready_makes_an_open_breaker_fail_readiness_until_it_closes() {
    let r = registry::<Breaker>(breaker(Some("not_ready")));
    r.scope(call(true)).await.unwrap_err();
    let readiness = r.snapshot().readiness();
    assert_eq!(readiness.status, Ready::NotReady);
    assert_eq!(readiness.status.http_status(), 503);
    tokio::time::advance(std::time::Duration::from_secs(1)).await;
    // The probe: half-open while it runs, which still counts.
    let handle = r.sync_scope(Breaker::get).unwrap();
    let permit = handle.try_acquire().expect("the probe");
    assert_eq!(handle.state(), State::HalfOpen);
    assert_eq!(r.snapshot().readiness().reasons[0].state, "half_open");
    permit.success();
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(r.snapshot().readiness().status, Ready::Ready);
}

#[tokio::test(start_paused = true)]
async fn ignore_reports_nothing_and_forced_open_counts_and_disabled_does_not() {
    let r = registry::<Breaker>(breaker(Some("ignore")));
    r.scope(call(true)).await.unwrap_err();
    assert_eq!(r.snapshot().readiness().status, Ready::Ready);
    assert!(r.snapshot().readiness().reasons.is_empty());

    let r = registry::<Breaker>(breaker(Some("not_ready")));
    let handle = r.sync_scope(Breaker::get).unwrap();
    handle.force_open();
    let readiness = r.snapshot().readiness();
    assert_eq!(readiness.status, Ready::NotReady);
    assert_eq!(readiness.reasons[0].state, "forced_open");
    handle.disable();
    assert_eq!(r.snapshot().readiness().status, Ready::Ready);
}

#[tokio::test(start_paused = true)]
async fn one_key_open_of_several_degrades_only_and_every_key_open_fails() {
    let r = registry::<HostBreaker>(breaker(Some("not_ready")));
    r.scope(on_host("a", true)).await.unwrap_err();
    r.scope(on_host("b", false)).await.unwrap();
    let readiness = r.snapshot().readiness();
    assert_eq!(readiness.status, Ready::Degraded, "{readiness:#?}");
    assert_eq!(readiness.reasons.len(), 1);
    assert_eq!(readiness.reasons[0].key.as_deref(), Some("a"));
    assert_eq!(readiness.reasons[0].rule, ReadinessRule::NotReady);
    assert_eq!(readiness.reasons[0].effect, Ready::Degraded);

    r.scope(on_host("b", true)).await.unwrap_err();
    let readiness = r.snapshot().readiness();
    assert_eq!(readiness.status, Ready::NotReady, "{readiness:#?}");
    assert_eq!(readiness.reasons.len(), 2);
    assert!(readiness
        .reasons
        .iter()
        .all(|r| r.effect == Ready::NotReady));
}

#[tokio::test(start_paused = true)]
async fn the_snapshot_lists_every_unhealthy_key_past_the_keys_it_shows() {
    let r = registry::<HostBreaker>(breaker(None));
    // 150 hosts, the first 120 failing: their breakers open.
    for n in 0..150 {
        let host = format!("host-{n:03}");
        let _ = r.scope(on_host(&host, n < 120)).await;
    }
    let keys = keys::<HostBreaker>(&r);
    assert_eq!(keys.count, 150);
    assert_eq!(keys.shown.len(), 100);
    assert_eq!(keys.ejected, 120);
    assert_eq!(keys.unhealthy.len(), 120, "every open key");
    assert_eq!(&*keys.unhealthy[0].key, "host-000");
    assert_eq!(&*keys.unhealthy[119].key, "host-119");
    assert!(keys
        .unhealthy
        .iter()
        .all(|k| k.status::<Metrics>().map(|m| m.state) == Some(State::Open)));
    // The spec's own instance, never called, still says closed.
    let spec = r
        .snapshot()
        .specs
        .into_iter()
        .find(|s| s.spec == "HostBreaker")
        .unwrap();
    assert_eq!(spec.status::<Metrics>().unwrap().state, State::Closed);
    assert_eq!(r.snapshot().readiness().reasons.len(), 120);
}

#[test]
fn readiness_on_a_spec_that_is_no_breaker_is_a_problem() {
    let problems = Registry::builder()
        .spec::<Retry>()
        .build(&root(vec![(
            Retry::PATH,
            table([
                ("delay", s("1ms")),
                ("attempts", int(1)),
                ("readiness", s("not_ready")),
            ]),
        )]))
        .unwrap_err();
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert_eq!(problems[0].key, "readiness");
    assert_eq!(
        problems[0].rule,
        "has no effect on a retry spec: only a circuit breaker's state (open, half-open, forced open) counts for readiness; remove the key, or set it in the section of the breaker whose state should count"
    );
    assert_eq!(problems[0].found.as_deref(), Some("\"not_ready\""));
    let _ = retried;
}

#[test]
fn a_readiness_that_is_no_rule_is_a_problem_naming_the_three() {
    for (value, found) in [
        (s("not-ready"), "\"not-ready\""),
        (s("fail"), "\"fail\""),
        (Value::Bool(true), "true"),
    ] {
        let problems = Registry::builder()
            .spec::<Breaker>()
            .build(&root(vec![(
                Breaker::PATH,
                with(breaker(None), "readiness", value),
            )]))
            .unwrap_err();
        assert_eq!(problems.len(), 1, "{problems:#?}");
        assert_eq!(problems[0].key, "readiness");
        assert_eq!(
            problems[0].rule,
            "must be \"ignore\" or \"degraded\" or \"not_ready\""
        );
        assert_eq!(problems[0].found.as_deref(), Some(found));
    }
    // Written in capitals, it is the rule meant.
    let r = registry::<Breaker>(breaker(Some("NOT_READY")));
    assert_eq!(
        r.snapshot().specs[0].readiness,
        Some(ReadinessRule::NotReady)
    );
}

#[tokio::test(start_paused = true)]
async fn a_reload_changes_the_rule_of_a_breaker_open_now() {
    let r = registry::<Breaker>(breaker(None));
    r.scope(call(true)).await.unwrap_err();
    assert_eq!(r.snapshot().readiness().status, Ready::Degraded);
    let reloaded = r
        .reload(&root(vec![(Breaker::PATH, breaker(Some("not_ready")))]))
        .unwrap();
    assert_eq!(
        reloaded.specs[0].keys,
        ["readiness: unset -> \"not_ready\""]
    );
    assert_eq!(r.snapshot().readiness().status, Ready::NotReady);
    assert_eq!(
        r.sync_scope(Breaker::get).unwrap().state(),
        State::Open,
        "the breaker's state is kept"
    );
}

#[cfg(feature = "serde")]
#[tokio::test(start_paused = true)]
async fn readiness_serializes_with_its_status_and_reasons() {
    let r = registry::<HostBreaker>(breaker(Some("not_ready")));
    r.scope(on_host("a.example", true)).await.unwrap_err();
    let snapshot = r.snapshot();
    let json = serde_json::to_value(snapshot.readiness()).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "status": "not_ready",
            "reasons": [{
                "spec": "HostBreaker",
                "path": "ready.hosts",
                "key": "a.example",
                "state": "open",
                "rule": "not_ready",
                "effect": "not_ready"
            }]
        })
    );
    let spec = serde_json::to_value(&snapshot.specs[0]).unwrap();
    assert_eq!(spec["readiness"], "not_ready");
    assert_eq!(spec["keys"]["unhealthy"][0]["key"], "a.example");
    assert_eq!(spec["keys"]["unhealthy"][0]["status"]["state"], "open");
}
