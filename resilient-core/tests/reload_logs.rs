//! Reload and breaker transitions, as the log lines, events and metrics
//! tell them. Every test here records the log lines of its own thread: a
//! test binary of its own, so that no test without a subscriber registers
//! these lines' callsites first.

#![allow(clippy::expect_used, clippy::unwrap_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::capture::{Capture, Meters};
use support::*;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use resilient_core::circuit_breaker::State;
use resilient_core::settings::Value;
use resilient_core::telemetry::Event;
use resilient_core::{CircuitBreakerSpec, Registry, RetrySpec};
use tracing::Level;

fn breaker(minimum: i128, window: i128) -> Value {
    table([
        ("failure_rate_threshold", int(100)),
        ("minimum_required_calls", int(minimum)),
        ("wait_duration_in_open_state", s("10s")),
        ("permitted_calls_in_half_open_state", int(1)),
        ("count_based", table([("window_size", int(window))])),
    ])
}

fn retry(attempts: i128, delay: &str) -> Value {
    table([("delay", s(delay)), ("attempts", int(attempts))])
}

#[derive(CircuitBreakerSpec)]
#[spec("reload_logs.breaker")]
struct ReBreaker;

#[tokio::test(start_paused = true)]
async fn force_open_and_disable_say_which_state_they_left() {
    let registry = registry::<ReBreaker>(breaker(1, 1));
    let capture = Capture::default();
    let _subscriber = tracing::subscriber::set_default(capture.clone());
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&events);
    let _ = registry.subscribe(move |e| {
        if let Event::StateTransition { from, to, .. } = e {
            sink.lock().unwrap().push((*from, *to));
        }
    });
    let handle = registry.sync_scope(ReBreaker::get).unwrap();
    handle.force_open();
    handle.force_open();
    handle.reset();
    handle.disable();
    handle.disable();
    handle.reset();
    assert_eq!(
        *events.lock().unwrap(),
        [
            (State::Closed, State::ForcedOpen),
            (State::ForcedOpen, State::Closed),
            (State::Closed, State::Disabled),
            (State::Disabled, State::Closed),
        ],
        "a second force_open or disable changes nothing and says nothing"
    );
    let warn = capture.at("resilient::circuit_breaker", Level::WARN);
    assert_eq!(warn.len(), 1);
    assert_eq!(warn[0].message, "circuit breaker closed -> forced open");
}

#[derive(RetrySpec)]
#[spec("reload.bad.retry")]
struct BadRetry;

#[derive(CircuitBreakerSpec)]
#[spec("reload.bad.breaker")]
struct BadBreaker;

#[tokio::test(start_paused = true)]
async fn an_invalid_edit_changes_nothing_and_reports_every_problem() {
    let capture = Capture::default();
    let _subscriber = tracing::subscriber::set_default(capture.clone());
    let registry = build(
        Registry::builder().spec::<BadRetry>().spec::<BadBreaker>(),
        vec![
            ("reload.bad.retry", retry(2, "100ms")),
            ("reload.bad.breaker", breaker(2, 4)),
        ],
    );
    let rejected = Arc::new(AtomicU32::new(0));
    let counter = Arc::clone(&rejected);
    let _ = registry.subscribe(move |e| {
        if let Event::ReloadRejected { problems } = e {
            counter.fetch_add(u32::try_from(*problems).unwrap(), Ordering::SeqCst);
        }
    });
    // Three problems, one of them in a section that is otherwise fine to
    // apply: nothing is applied.
    let problems = registry
        .reload(&root(vec![
            (
                "reload.bad.retry",
                table([
                    ("delay", s("-1s")),
                    ("attempts", int(5)),
                    ("atempts", int(1)),
                ]),
            ),
            (
                "reload.bad.breaker",
                with(breaker(2, 4), "minimum_required_calls", int(9)),
            ),
        ]))
        .expect_err("invalid");
    let keys: Vec<_> = problems.iter().map(|p| (p.path, p.key.as_str())).collect();
    assert_eq!(
        keys,
        [
            ("reload.bad.breaker", "minimum_required_calls"),
            ("reload.bad.retry", "atempts"),
            ("reload.bad.retry", "delay"),
        ],
        "{problems:#?}"
    );
    let running = registry.sync_scope(BadRetry::get).unwrap();
    assert_eq!(running.settings().attempts, 2, "the running settings stay");
    let breaker_handle = registry.sync_scope(BadBreaker::get).unwrap();
    assert_eq!(breaker_handle.settings().minimum_required_calls, 2);
    assert_eq!(rejected.load(Ordering::SeqCst), 3);
    let errors = capture.at("resilient::registry", Level::ERROR);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    for p in &problems {
        assert!(
            errors[0].message.contains(&p.to_string()),
            "{}",
            errors[0].message
        );
    }

    // A required section that disappears is a problem, as at startup.
    let problems = registry
        .reload(&root(vec![("reload.bad.retry", retry(3, "1s"))]))
        .expect_err("a section is gone");
    assert_eq!(problems.len(), 1);
    assert_eq!(problems[0].path, "reload.bad.breaker");
    assert_eq!(running.settings().attempts, 2);
}

#[tokio::test(start_paused = true)]
async fn a_reload_logs_each_changed_key_publishes_an_event_and_counts() {
    let capture = Capture::default();
    let _subscriber = tracing::subscriber::set_default(capture.clone());
    let meters = Meters::default();
    let registry = build(
        Registry::builder().spec::<BadRetry>().spec::<BadBreaker>(),
        vec![
            ("reload.bad.retry", retry(2, "100ms")),
            ("reload.bad.breaker", breaker(2, 4)),
        ],
    );
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&events);
    let _ = registry.subscribe(move |e| {
        if let Event::Reloaded { spec, keys, .. } = e {
            sink.lock().unwrap().push((*spec, keys.clone()));
        }
    });
    let sections = |attempts| {
        root(vec![
            (
                "resilient.telemetry",
                table([("metrics", table([("enabled", Value::Bool(true))]))]),
            ),
            ("reload.bad.retry", retry(attempts, "100ms")),
            ("reload.bad.breaker", breaker(2, 4)),
        ])
    };
    let reloaded =
        metrics::with_local_recorder(&meters, || registry.reload(&sections(3))).expect("valid");
    assert_eq!(reloaded.global, ["metrics.enabled: false -> true"]);
    assert_eq!(reloaded.specs.len(), 1, "the breaker did not change");
    assert_eq!(reloaded.specs[0].spec, "BadRetry");
    assert_eq!(
        *events.lock().unwrap(),
        [("BadRetry", vec!["attempts: 2 -> 3".to_owned()])]
    );
    let info: Vec<_> = capture
        .at("resilient::registry", Level::INFO)
        .into_iter()
        .map(|l| l.message)
        .collect();
    assert_eq!(
        info,
        [
            "reloaded `BadRetry` at `reload.bad.retry`: attempts: 2 -> 3",
            "reloaded the global telemetry switches at `resilient.telemetry`: metrics.enabled: false -> true"
        ]
    );
    assert_eq!(
        meters.counter("resilient_reloads_total", &[("result", "applied")]),
        Some(1)
    );
    // The same file again: nothing changes, nothing is said.
    let again =
        metrics::with_local_recorder(&meters, || registry.reload(&sections(3))).expect("valid");
    assert_eq!(again, resilient_core::Reloaded::default());
    assert_eq!(events.lock().unwrap().len(), 1);
    assert_eq!(
        meters.counter("resilient_reloads_total", &[("result", "applied")]),
        Some(2)
    );
}

#[tokio::test(start_paused = true)]
async fn logging_off_silences_a_reloads_changes_but_not_its_rejection() {
    let capture = Capture::default();
    let _subscriber = tracing::subscriber::set_default(capture.clone());
    let quiet = table([("logging", table([("enabled", Value::Bool(false))]))]);
    let sections = |attempts| {
        root(vec![
            ("resilient.telemetry", quiet.clone()),
            ("reload.bad.retry", retry(attempts, "100ms")),
        ])
    };
    let registry = Registry::builder()
        .spec::<BadRetry>()
        .build(&sections(2))
        .unwrap();
    let reloaded = registry.reload(&sections(3)).unwrap();
    assert_eq!(reloaded.specs.len(), 1, "applied");
    assert!(
        capture.at("resilient::registry", Level::INFO).is_empty(),
        "the change is not logged with logging off"
    );
    registry.reload(&sections(-1)).unwrap_err();
    let errors = capture.at("resilient::registry", Level::ERROR);
    assert_eq!(
        errors.len(),
        1,
        "a rejection needs an operator: always logged"
    );
}
