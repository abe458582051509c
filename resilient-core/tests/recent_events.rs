//! Recent events: each spec keeps its latest events whether or not anyone
//! listens (`telemetry.recent_events`, 100 by default), a run of
//! rejections by one instance is one entry with its count, the registry
//! keeps its own (fallbacks, rejected reloads), and the size is read,
//! validated and reloaded with the rest of the telemetry settings.

#![allow(clippy::expect_used, clippy::unwrap_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::*;

use std::sync::atomic::{AtomicU32, Ordering};

use resilient_core::circuit_breaker::State;
use resilient_core::settings::Value;
use resilient_core::telemetry::{Event, Recorded};
use resilient_core::{
    circuit_breakable, fallback, retryable, CircuitBreakerSpec, Error, Registry, RetrySpec, Spec,
};

#[derive(Debug, thiserror::Error)]
enum StoreError {
    #[error("store unavailable")]
    Unavailable,
    #[error(transparent)]
    Resilience(#[from] Error),
}

#[derive(CircuitBreakerSpec)]
#[spec("recent.breaker")]
struct Breaker;

#[derive(RetrySpec)]
#[spec("recent.retry")]
struct Retry;

#[derive(CircuitBreakerSpec)]
#[spec("recent.keyed")]
struct HostBreaker;

static CALLS: AtomicU32 = AtomicU32::new(0);

#[circuit_breakable(Breaker)]
async fn failing() -> Result<(), StoreError> {
    Err(StoreError::Unavailable)
}

/// `failing`, counted apart (the other tests call `failing` too).
#[circuit_breakable(Breaker)]
async fn counted() -> Result<(), StoreError> {
    CALLS.fetch_add(1, Ordering::SeqCst);
    Err(StoreError::Unavailable)
}

#[circuit_breakable(HostBreaker, key = host)]
async fn on_host(host: &str) -> Result<(), StoreError> {
    let _ = host;
    Err(StoreError::Unavailable)
}

#[retryable(Retry)]
async fn retried() -> Result<(), StoreError> {
    Err(StoreError::Unavailable)
}

#[fallback(method = "cached()")]
#[circuit_breakable(Breaker)]
async fn with_fallback() -> Result<u32, StoreError> {
    Err(StoreError::Unavailable)
}

async fn cached() -> Result<u32, StoreError> {
    Ok(7)
}

fn breaker() -> Value {
    breaker_section(100, 1, "1s", 1)
}

fn sized(section: Value, n: i128) -> Value {
    with(section, "telemetry", table([("recent_events", int(n))]))
}

fn kinds(events: &[Recorded]) -> Vec<String> {
    events
        .iter()
        .map(|r| match &r.event {
            Event::StateTransition { from, to, key, .. } => match key {
                Some(k) => format!("{k}: {from} -> {to}"),
                None => format!("{from} -> {to}"),
            },
            Event::Rejected { key, .. } => match key {
                Some(k) => format!("{k}: rejected x{}", r.count),
                None => format!("rejected x{}", r.count),
            },
            Event::RetryScheduled { retry, .. } => format!("retry {retry}"),
            Event::RetryExhausted { calls, .. } => format!("gave up after {calls}"),
            Event::FallbackTaken { function } => format!("fallback {function}"),
            Event::ReloadRejected { problems } => format!("reload rejected ({problems})"),
            Event::Reloaded { keys, .. } => format!("reloaded {}", keys.join("; ")),
            other => format!("{other:?}"),
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_breaker_keeps_its_transition_and_one_entry_for_its_run_of_rejections() {
    let r = registry::<Breaker>(breaker());
    r.scope(counted()).await.unwrap_err();
    for _ in 0..50 {
        let e = r.scope(counted()).await.unwrap_err();
        assert!(matches!(
            e,
            StoreError::Resilience(Error::CallNotPermitted { .. })
        ));
    }
    assert_eq!(CALLS.load(Ordering::SeqCst), 1, "one call ran, 50 rejected");
    let events = r
        .recent_events_of(Breaker::PATH)
        .expect("the spec is there");
    assert_eq!(kinds(&events), ["closed -> open", "rejected x50"]);
    assert!(events[0].seq < events[1].seq);
    assert!(events[0].at_ms > 0, "a wall-clock time");
    // No listener was ever subscribed: the events were kept regardless.
    assert_eq!(kinds(&r.recent_events()), kinds(&events));
}

#[tokio::test(start_paused = true)]
async fn rejections_of_two_keys_are_counted_apart() {
    let r = registry::<HostBreaker>(breaker());
    for host in ["a", "b"] {
        r.scope(on_host(host)).await.unwrap_err();
    }
    for host in ["a", "a", "a", "b", "b", "a"] {
        r.scope(on_host(host)).await.unwrap_err();
    }
    let events = r
        .recent_events_of(HostBreaker::PATH)
        .expect("the spec is there");
    assert_eq!(
        kinds(&events),
        [
            "a: closed -> open",
            "b: closed -> open",
            "a: rejected x3",
            "b: rejected x2",
            "a: rejected x1",
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_spec_keeps_its_latest_events_only_and_another_the_global_number() {
    let r = build(
        Registry::builder().spec::<Retry>().spec::<Breaker>(),
        vec![
            (
                Retry::PATH,
                sized(table([("delay", s("1ms")), ("attempts", int(4))]), 3),
            ),
            (Breaker::PATH, breaker()),
            ("resilient.telemetry", table([("recent_events", int(1))])),
        ],
    );
    r.scope(retried()).await.unwrap_err();
    let retry = r.recent_events_of(Retry::PATH).expect("the spec is there");
    assert_eq!(kinds(&retry), ["retry 3", "retry 4", "gave up after 5"]);
    r.scope(failing()).await.unwrap_err();
    r.scope(failing()).await.unwrap_err();
    let breaker = r
        .recent_events_of(Breaker::PATH)
        .expect("the spec is there");
    assert_eq!(kinds(&breaker), ["rejected x1"], "the global 1");
}

#[tokio::test(start_paused = true)]
async fn recent_events_0_keeps_nothing() {
    let r = registry::<Breaker>(sized(breaker(), 0));
    r.scope(failing()).await.unwrap_err();
    r.scope(failing()).await.unwrap_err();
    assert_eq!(r.recent_events_of(Breaker::PATH), Some(Vec::new()));
    assert_eq!(r.recent_events_of("recent.nowhere"), None);
}

#[tokio::test(start_paused = true)]
async fn the_registry_keeps_its_fallbacks_and_rejected_reloads() {
    let sections = || vec![(Breaker::PATH, breaker())];
    let r = build(Registry::builder().spec::<Breaker>(), sections());
    assert_eq!(r.scope(with_fallback()).await.unwrap(), 7);
    let bad = root(vec![(Breaker::PATH, sized(breaker(), -1))]);
    let problems = r.reload(&bad).unwrap_err();
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert_eq!(
        kinds(&r.recent_events()),
        [
            "closed -> open",
            "fallback with_fallback",
            "reload rejected (1)"
        ]
    );
}

#[test]
fn recent_events_must_be_a_whole_number_up_to_10000() {
    for (value, found) in [
        (int(-1), "-1"),
        (int(10_001), "10001"),
        (s("many"), "\"many\""),
        (Value::Float(1.5), "1.5"),
    ] {
        let problems = Registry::builder()
            .spec::<Breaker>()
            .build(&root(vec![(
                Breaker::PATH,
                with(breaker(), "telemetry", table([("recent_events", value)])),
            )]))
            .unwrap_err();
        assert_eq!(problems.len(), 1, "{problems:#?}");
        assert_eq!(problems[0].key, "telemetry.recent_events");
        assert_eq!(problems[0].rule, "must be a whole number in 0..=10000");
        assert_eq!(problems[0].found.as_deref(), Some(found));
    }
    let global = Registry::builder()
        .spec::<Breaker>()
        .build(&root(vec![
            (Breaker::PATH, breaker()),
            (
                "resilient.telemetry",
                table([("recent_events", int(20_000))]),
            ),
        ]))
        .unwrap_err();
    assert_eq!(global.len(), 1, "{global:#?}");
    assert_eq!(global[0].path, "resilient.telemetry");
    assert_eq!(global[0].key, "recent_events");
    // Misspelt: the nearest key is named.
    let misspelt = Registry::builder()
        .spec::<Breaker>()
        .build(&root(vec![(
            Breaker::PATH,
            with(breaker(), "telemetry", table([("recent_event", int(5))])),
        )]))
        .unwrap_err();
    assert_eq!(misspelt.len(), 1, "{misspelt:#?}");
    assert!(
        misspelt[0].rule.contains("did you mean `recent_events`?"),
        "{misspelt:#?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_reload_resizes_the_ring_and_keeps_the_latest_events() {
    let r = registry::<Breaker>(sized(breaker(), 10));
    r.scope(failing()).await.unwrap_err();
    r.scope(failing()).await.unwrap_err();
    r.breaker_reset_for_test();
    let reloaded = r
        .reload(&root(vec![(Breaker::PATH, sized(breaker(), 2))]))
        .unwrap();
    assert_eq!(reloaded.specs[0].keys, ["telemetry.recent_events: 10 -> 2"]);
    let events = r
        .recent_events_of(Breaker::PATH)
        .expect("the spec is there");
    assert_eq!(
        kinds(&events),
        [
            "open -> closed",
            "reloaded telemetry.recent_events: 10 -> 2"
        ]
    );
}

/// Closes the breaker of this file by hand.
trait ResetForTest {
    fn breaker_reset_for_test(&self);
}

impl ResetForTest for Registry {
    fn breaker_reset_for_test(&self) {
        self.sync_scope(|| Breaker::get().expect("configured").reset());
        assert_eq!(
            self.sync_scope(|| Breaker::get().expect("configured").state()),
            State::Closed
        );
    }
}

#[cfg(feature = "serde")]
#[tokio::test(start_paused = true)]
async fn an_event_serializes_as_a_table_named_by_its_type() {
    let r = registry::<HostBreaker>(breaker());
    r.scope(on_host("api.example")).await.unwrap_err();
    r.scope(on_host("api.example")).await.unwrap_err();
    let events = r.recent_events();
    let json = serde_json::to_value(&events).unwrap();
    let first = &json[0];
    assert_eq!(first["type"], "state_transition");
    assert_eq!(first["spec"], "HostBreaker");
    assert_eq!(first["path"], "recent.keyed");
    assert_eq!(first["from"], "closed");
    assert_eq!(first["to"], "open");
    assert_eq!(first["key"], "api.example");
    assert_eq!(first["count"], 1);
    assert!(first["seq"].as_u64().is_some() && first["at_ms"].as_u64().is_some());
    let second = &json[1];
    assert_eq!(second["type"], "rejected");
    assert_eq!(second["kind"], "circuit_breaker");
    assert_eq!(second["retry_after"], "1s");
}
