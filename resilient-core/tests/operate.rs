//! An operator's actions on a breaker named by its path (and key): force
//! open, close, disable, reset; each logged at WARN, published and kept
//! among the spec's recent events; a path or key that names no breaker is
//! refused and creates nothing.

#![allow(clippy::expect_used, clippy::unwrap_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::capture::Capture;
use support::*;

use resilient_core::circuit_breaker::{Action, Metrics, OperateError, State};
use resilient_core::telemetry::Event;
use resilient_core::{
    circuit_breakable, retryable, CircuitBreakerSpec, Error, Registry, RetrySpec, Spec,
};
use tracing::Level;

#[derive(Debug, thiserror::Error)]
enum StoreError {
    #[error("store unavailable")]
    Unavailable,
    #[error(transparent)]
    Resilience(#[from] Error),
}

#[derive(CircuitBreakerSpec)]
#[spec("operate.breaker")]
struct Breaker;

#[derive(CircuitBreakerSpec)]
#[spec("operate.hosts")]
struct HostBreaker;

#[derive(RetrySpec)]
#[spec("operate.retry")]
struct Retry;

thread_local! {
    /// Bodies run on this test's thread: each test has its own
    /// current-thread runtime, so the tests running beside it do not count.
    static RAN: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

#[circuit_breakable(Breaker)]
async fn call(fail: bool) -> Result<(), StoreError> {
    RAN.with(|ran| ran.set(ran.get() + 1));
    if fail {
        Err(StoreError::Unavailable)
    } else {
        Ok(())
    }
}

#[circuit_breakable(HostBreaker, key = host)]
async fn on_host(host: &str) -> Result<(), StoreError> {
    let _ = host;
    Ok(())
}

#[circuit_breakable(HostBreaker, key = tenant)]
async fn on_tenant(tenant: u64) -> Result<(), StoreError> {
    let _ = tenant;
    Ok(())
}

#[retryable(Retry)]
async fn retried() -> Result<(), StoreError> {
    Ok(())
}

fn both() -> Registry {
    build(
        Registry::builder()
            .spec::<Breaker>()
            .spec::<HostBreaker>()
            .spec::<Retry>(),
        vec![
            (Breaker::PATH, breaker_section(50, 4, "10s", 10)),
            (HostBreaker::PATH, breaker_section(50, 4, "10s", 10)),
            (
                Retry::PATH,
                table([("delay", s("1ms")), ("attempts", int(1))]),
            ),
        ],
    )
}

fn state(r: &Registry) -> State {
    r.sync_scope(Breaker::get).unwrap().state()
}

#[tokio::test(start_paused = true)]
async fn force_open_rejects_every_call_until_close_and_each_action_is_kept_and_logged() {
    support::capture::no_silent_callsites();
    let capture = Capture::default();
    let _subscriber = tracing::subscriber::set_default(capture.clone());
    let r = both();
    let done = r
        .operate_breaker(Breaker::PATH, None, Action::ForceOpen)
        .unwrap();
    assert_eq!(
        (done.spec, done.path, done.key, done.from, done.to),
        (
            "Breaker",
            "operate.breaker",
            None,
            State::Closed,
            State::ForcedOpen
        )
    );
    let before = RAN.with(std::cell::Cell::get);
    for _ in 0..3 {
        let e = r.scope(call(false)).await.unwrap_err();
        assert!(matches!(
            e,
            StoreError::Resilience(Error::CallNotPermitted {
                state: State::ForcedOpen,
                ..
            })
        ));
    }
    assert_eq!(RAN.with(std::cell::Cell::get), before, "no body ran");
    let done = r
        .operate_breaker(Breaker::PATH, None, Action::Close)
        .unwrap();
    assert_eq!((done.from, done.to), (State::ForcedOpen, State::Closed));
    r.scope(call(false)).await.unwrap();
    assert_eq!(RAN.with(std::cell::Cell::get), before + 1);

    let events: Vec<String> = r
        .recent_events_of(Breaker::PATH)
        .unwrap()
        .iter()
        .map(|rec| match &rec.event {
            Event::Operated {
                action, from, to, ..
            } => format!("{action}: {from} -> {to}"),
            Event::StateTransition { from, to, .. } => format!("{from} -> {to}"),
            Event::Rejected { .. } => format!("rejected x{}", rec.count),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        events,
        [
            "closed -> forced open",
            "force_open: closed -> forced open",
            "rejected x3",
            "forced open -> closed",
            "close: forced open -> closed",
        ]
    );
    let warned = capture.at("resilient::admin", Level::WARN);
    assert_eq!(warned.len(), 2, "{warned:#?}");
    assert_eq!(warned[0].fields["action"], "force_open");
    assert_eq!(warned[0].fields["spec"], "Breaker");
    assert_eq!(
        warned[0].message,
        "circuit breaker force_open by an operator: closed -> forced open"
    );
}

#[tokio::test(start_paused = true)]
async fn disable_lets_calls_through_uncounted_and_reset_forgets_the_counts() {
    support::capture::no_silent_callsites();
    let r = both();
    for _ in 0..4 {
        r.scope(call(true)).await.unwrap_err();
    }
    assert_eq!(state(&r), State::Open);
    r.scope(call(false)).await.unwrap_err();
    let done = r
        .operate_breaker(Breaker::PATH, None, Action::Disable)
        .unwrap();
    assert_eq!((done.from, done.to), (State::Open, State::Disabled));
    for _ in 0..4 {
        r.scope(call(true)).await.unwrap_err();
    }
    assert_eq!(state(&r), State::Disabled, "failures count nothing");
    let m: Metrics = r.sync_scope(Breaker::get).unwrap().metrics();
    assert_eq!((m.opened, m.rejected), (1, 1));
    let done = r
        .operate_breaker(Breaker::PATH, None, Action::Reset)
        .unwrap();
    assert_eq!((done.from, done.to), (State::Disabled, State::Closed));
    let m: Metrics = r.sync_scope(Breaker::get).unwrap().metrics();
    assert_eq!(
        (
            m.opened,
            m.half_opened,
            m.closed,
            m.rejected,
            m.window.total
        ),
        (0, 0, 0, 0, 0),
        "as a breaker just built"
    );
}

#[tokio::test(start_paused = true)]
async fn a_key_is_acted_on_alone_and_a_key_never_called_is_refused_and_not_made() {
    support::capture::no_silent_callsites();
    let r = both();
    r.scope(on_host("a.example")).await.unwrap();
    r.scope(on_host("b.example")).await.unwrap();
    r.scope(on_tenant(42)).await.unwrap();
    let done = r
        .operate_breaker(HostBreaker::PATH, Some("a.example"), Action::ForceOpen)
        .unwrap();
    assert_eq!(done.key.as_deref(), Some("a.example"));
    assert_eq!(done.to, State::ForcedOpen);
    assert!(r.scope(on_host("a.example")).await.is_err());
    r.scope(on_host("b.example")).await.unwrap();
    let done = r
        .operate_breaker(HostBreaker::PATH, Some("42"), Action::ForceOpen)
        .unwrap();
    assert_eq!(done.key.as_deref(), Some("42"));
    assert!(r.scope(on_tenant(42)).await.is_err());

    let count = keys::<HostBreaker>(&r).count;
    let refused = r
        .operate_breaker(HostBreaker::PATH, Some("c.example"), Action::ForceOpen)
        .unwrap_err();
    assert_eq!(
        refused.to_string(),
        "`HostBreaker` at `operate.hosts` has no breaker for the key `c.example` (a key has one once a call used it, until it goes idle); nothing was created"
    );
    assert_eq!(keys::<HostBreaker>(&r).count, count, "no key made");
    let events = r.recent_events_of(HostBreaker::PATH).unwrap();
    assert!(events.iter().any(|e| matches!(
        &e.event,
        Event::Operated { key: Some(k), action: Action::ForceOpen, .. } if &**k == "a.example"
    )));
}

#[test]
fn a_path_of_no_breaker_is_refused_with_the_breakers_named() {
    support::capture::no_silent_callsites();
    let r = both();
    let nowhere = r
        .operate_breaker("operate.breakr", None, Action::ForceOpen)
        .unwrap_err();
    assert!(matches!(nowhere, OperateError::NoSpec { .. }));
    assert_eq!(
        nowhere.to_string(),
        "no spec at `operate.breakr`; the circuit breakers are at `operate.breaker`, `operate.hosts`"
    );
    let retry = r
        .operate_breaker(Retry::PATH, None, Action::Close)
        .unwrap_err();
    assert_eq!(
        retry.to_string(),
        "`Retry` at `operate.retry` is a retry spec: only a circuit breaker can be forced open, closed, disabled or reset"
    );
    assert_eq!(state(&r), State::Closed);
    let _ = retried;
}

#[test]
fn actions_are_named_as_routes_write_them() {
    support::capture::no_silent_callsites();
    for action in Action::ALL {
        assert_eq!(Action::from_label(action.label()), Some(action));
    }
    assert_eq!(Action::from_label("open"), None);
    assert_eq!(
        Action::ALL.map(Action::label),
        ["force_open", "close", "disable", "reset"]
    );
}
