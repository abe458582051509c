//! Reload: a new configuration applies to the calls that start after it,
//! keeps the state that fits it, and changes nothing when it has a
//! problem. Every test counts: calls, places, permits, tokens, transitions,
//! events and log lines.

#![allow(clippy::expect_used, clippy::unwrap_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::capture::Meters;
use support::*;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use resilient_core::circuit_breaker::{self, State};
use resilient_core::settings::Value;
use resilient_core::telemetry::Event;
use resilient_core::{
    concurrency_limit, rate_limited, retryable, timeout, CircuitBreakerSpec, ConcurrencyLimitSpec,
    Error, RateLimiterSpec, Registry, RetrySpec, TimeoutSpec,
};

#[derive(Debug, thiserror::Error)]
enum TestError {
    #[error("down")]
    Down,
    #[error(transparent)]
    Resilience(#[from] Error),
}

fn breaker(minimum: i128, window: i128) -> Value {
    table([
        ("failure_rate_threshold", int(100)),
        ("minimum_required_calls", int(minimum)),
        ("wait_duration_in_open_state", s("10s")),
        ("permitted_calls_in_half_open_state", int(1)),
        ("count_based", table([("window_size", int(window))])),
    ])
}

// ---------------------------------------------------------------- breaker

#[derive(CircuitBreakerSpec)]
#[spec("reload.breaker")]
struct ReBreaker;

fn reload_one(registry: &Registry, path: &str, section: Value) -> resilient_core::Reloaded {
    match registry.reload(&root(vec![(path, section)])) {
        Ok(r) => r,
        Err(problems) => panic!("reload refused: {problems:#?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_breaker_stays_open_across_a_reload_and_keeps_its_deadline() {
    let registry = registry::<ReBreaker>(breaker(2, 2));
    let handle = registry.sync_scope(ReBreaker::get).unwrap();
    handle.try_acquire().unwrap().failure();
    handle.try_acquire().unwrap().failure();
    assert_eq!(handle.state(), State::Open);

    tokio::time::advance(Duration::from_secs(4)).await;
    // Only `minimum_required_calls` changes; then the open wait too.
    let changed = reload_one(&registry, "reload.breaker", breaker(5, 10));
    assert_eq!(changed.specs.len(), 1);
    assert_eq!(
        changed.specs[0].keys,
        [
            "count_based.window_size: 2 -> 10",
            "minimum_required_calls: 2 -> 5"
        ]
    );
    assert_eq!(handle.state(), State::Open, "still open");
    assert_eq!(handle.settings().minimum_required_calls, 5);
    let mut longer = breaker(5, 10);
    if let Value::Table(t) = &mut longer {
        t.insert("wait_duration_in_open_state".into(), s("1h"));
    }
    reload_one(&registry, "reload.breaker", longer);
    // The running open period keeps the deadline it was given: 10 s.
    tokio::time::advance(Duration::from_millis(5_999)).await;
    assert!(handle.try_acquire().is_none(), "still open at 9.999 s");
    tokio::time::advance(Duration::from_millis(1)).await;
    let probe = handle.try_acquire().expect("the probe at 10 s");
    probe.success();
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(handle.metrics().opened, 1, "opened once, by the failures");
}

#[tokio::test(start_paused = true)]
async fn counts_survive_a_reload_that_keeps_the_window_and_a_new_window_starts_empty() {
    let registry = registry::<ReBreaker>(breaker(3, 4));
    let handle = registry.sync_scope(ReBreaker::get).unwrap();
    handle.try_acquire().unwrap().failure();
    handle.try_acquire().unwrap().success();
    assert_eq!(handle.metrics().window.total, 2);

    let same_window = reload_one(&registry, "reload.breaker", breaker(4, 4));
    assert!(same_window.specs[0].notes.is_empty(), "{same_window:?}");
    assert_eq!(handle.metrics().window.total, 2, "the counts carried over");
    assert_eq!(handle.metrics().window.failures, 1);

    let in_flight = handle.try_acquire().expect("closed");
    let new_window = reload_one(&registry, "reload.breaker", breaker(4, 8));
    assert_eq!(
        new_window.specs[0].notes,
        ["a new window: the calls counted so far are forgotten"]
    );
    assert_eq!(handle.metrics().window.total, 0, "an empty window");
    assert_eq!(handle.state(), State::Closed, "in the same state");
    in_flight.failure();
    assert_eq!(
        handle.metrics().window.total,
        0,
        "a call taken before the new window counts nothing"
    );
    // Back to the first shape: its window again, emptied.
    reload_one(&registry, "reload.breaker", breaker(3, 4));
    assert_eq!(handle.metrics().window.total, 0);
    for _ in 0..3 {
        handle.try_acquire().unwrap().failure();
    }
    assert_eq!(handle.state(), State::Open, "the reloaded settings decide");
}

#[tokio::test(start_paused = true)]
async fn a_breaker_disabled_and_enabled_by_reload_publishes_both_transitions() {
    let registry = registry::<ReBreaker>(breaker(1, 1));
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&events);
    let _ = registry.subscribe(move |e| {
        if let Event::StateTransition { from, to, .. } = e {
            sink.lock().unwrap().push((*from, *to));
        }
    });
    let handle = registry.sync_scope(ReBreaker::get).unwrap();
    let mut off = breaker(1, 1);
    if let Value::Table(t) = &mut off {
        t.insert("enabled".into(), Value::Bool(false));
    }
    reload_one(&registry, "reload.breaker", off);
    assert_eq!(handle.state(), State::Disabled);
    handle.try_acquire().unwrap().failure();
    assert_eq!(handle.state(), State::Disabled, "counts nothing");
    reload_one(&registry, "reload.breaker", breaker(1, 1));
    assert_eq!(handle.state(), State::Closed);
    handle.try_acquire().unwrap().failure();
    assert_eq!(handle.state(), State::Open);
    assert_eq!(
        *events.lock().unwrap(),
        [
            (State::Closed, State::Disabled),
            (State::Disabled, State::Closed),
            (State::Closed, State::Open)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn the_same_values_written_another_way_are_listed_and_keep_the_window() {
    let registry = registry::<ReBreaker>(breaker(3, 4));
    let handle = registry.sync_scope(ReBreaker::get).unwrap();
    handle.try_acquire().unwrap().failure();

    let other_way = with(breaker(3, 4), "wait_duration_in_open_state", s("10000ms"));
    let same = reload_one(&registry, "reload.breaker", other_way.clone());
    assert_eq!(
        same.specs[0].keys,
        [r#"wait_duration_in_open_state: "10s" -> "10000ms""#]
    );
    assert!(same.specs[0].notes.is_empty(), "{same:?}");
    assert_eq!(handle.metrics().window.total, 1, "the same window");

    // Another window type, of the same size, is a new window.
    let fixed = with(other_way, "type", s("fixed_window"));
    let new_type = reload_one(&registry, "reload.breaker", fixed);
    assert_eq!(new_type.specs[0].keys, [r#"type: unset -> "fixed_window""#]);
    assert_eq!(
        new_type.specs[0].notes,
        ["a new window: the calls counted so far are forgotten"]
    );
    assert_eq!(handle.metrics().window.total, 0);
}

// ---------------------------------------------------------------- retry

#[derive(RetrySpec)]
#[spec("reload.retry")]
struct ReRetry;

static RETRY_RUNS: AtomicU32 = AtomicU32::new(0);

#[retryable(ReRetry)]
async fn always_down() -> Result<(), TestError> {
    RETRY_RUNS.fetch_add(1, Ordering::SeqCst);
    Err(TestError::Down)
}

fn retry(attempts: i128, delay: &str) -> Value {
    table([("delay", s(delay)), ("attempts", int(attempts))])
}

#[tokio::test(start_paused = true)]
async fn a_call_in_flight_finishes_under_the_settings_it_started_with() {
    let registry = registry::<ReRetry>(retry(3, "100ms"));
    let scoped = registry.clone();
    let call = tokio::spawn(async move { scoped.scope(always_down()).await });
    // The first attempt failed; the call waits 100 ms for its first retry.
    tokio::time::advance(Duration::from_millis(50)).await;
    assert_eq!(RETRY_RUNS.load(Ordering::SeqCst), 1);
    reload_one(&registry, "reload.retry", retry(0, "1h"));
    let out = call.await.unwrap();
    match out {
        Err(TestError::Resilience(Error::RetryExhausted(e))) => assert_eq!(e.calls, 4),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        RETRY_RUNS.load(Ordering::SeqCst),
        4,
        "1 + 3 attempts, 100 ms apart"
    );
    // A call that starts now runs under the new settings: one call.
    registry.scope(always_down()).await.unwrap_err();
    assert_eq!(RETRY_RUNS.load(Ordering::SeqCst), 5);
}

#[derive(RetrySpec)]
#[spec("reload.budget")]
struct ReBudget;

#[tokio::test(start_paused = true)]
async fn budget_tokens_survive_a_reload_capped_at_the_new_maximum() {
    let with_budget = |max: i128| {
        with(
            retry(1, "1ms"),
            "retry_budget",
            table([
                ("tokens_max", int(max)),
                ("tokens_initial", int(8.min(max))),
                ("ratio", Value::Float(0.0)),
            ]),
        )
    };
    let registry = registry::<ReBudget>(with_budget(10));
    let handle = registry.sync_scope(ReBudget::get).unwrap();
    // Spend 3 of the 8 tokens.
    for _ in 0..3 {
        let _ = handle
            .call(|| async { Err::<(), _>(TestError::Down) })
            .await;
    }
    assert_eq!(handle.budget_tokens(), Some(5.0));
    let changed = reload_one(
        &registry,
        "reload.budget",
        with(with_budget(10), "delay", s("2ms")),
    );
    assert!(changed.specs[0].notes.is_empty());
    assert_eq!(handle.budget_tokens(), Some(5.0), "the tokens carried over");
    let capped = reload_one(&registry, "reload.budget", with_budget(4));
    assert_eq!(
        capped.specs[0].notes,
        ["the budget's tokens were capped at the new `tokens_max`"]
    );
    assert_eq!(handle.budget_tokens(), Some(4.0));
    // The budget's table removed: no budget; put back: a new one, full of
    // its initial tokens.
    let gone = reload_one(&registry, "reload.budget", retry(1, "1ms"));
    assert_eq!(gone.specs[0].notes, ["the retry budget is gone"]);
    assert_eq!(handle.budget_tokens(), None);
    let back = reload_one(&registry, "reload.budget", with_budget(10));
    assert_eq!(
        back.specs[0].notes,
        ["a new retry budget starts with `tokens_initial`"]
    );
    assert_eq!(handle.budget_tokens(), Some(8.0));
}

#[tokio::test(start_paused = true)]
async fn a_backoff_table_removed_takes_its_default_back_none() {
    let backoff = with(
        retry(2, "100ms"),
        "backoff",
        table([("multiplier", Value::Float(10.0))]),
    );
    let registry = registry::<ReRetry>(backoff);
    let handle = registry.sync_scope(ReRetry::get).unwrap();
    let calls = AtomicU32::new(0);
    // Three calls, two waits: how long the whole call took says which.
    let waited = || async {
        let start = tokio::time::Instant::now();
        let _ = handle
            .call(|| async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err::<(), _>(TestError::Down)
            })
            .await;
        start.elapsed()
    };
    assert_eq!(waited().await, Duration::from_millis(100 + 1_000));
    let gone = reload_one(&registry, "reload.retry", retry(2, "100ms"));
    assert_eq!(gone.specs[0].keys, ["backoff.multiplier: 10 -> unset"]);
    assert!(handle.settings().backoff.is_none());
    assert_eq!(waited().await, Duration::from_millis(100 + 100));
    assert_eq!(calls.load(Ordering::SeqCst), 6, "three calls each time");
}

// ---------------------------------------------------------------- limits

#[derive(ConcurrencyLimitSpec)]
#[spec("reload.limit")]
struct ReLimit;

#[concurrency_limit(ReLimit)]
async fn hold(until: Arc<tokio::sync::Notify>) -> Result<(), TestError> {
    until.notified().await;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_smaller_limit_admits_nothing_until_the_calls_in_flight_are_under_it() {
    let registry = registry::<ReLimit>(table([("limit", int(3))]));
    let _default = registry.set_default();
    let handle = registry.sync_scope(ReLimit::get).unwrap();
    let release = Arc::new(tokio::sync::Notify::new());
    let held: Vec<_> = (0..3)
        .map(|_| tokio::spawn(hold(Arc::clone(&release))))
        .collect();
    tokio::task::yield_now().await;
    assert_eq!(handle.in_use(), 3);
    reload_one(&registry, "reload.limit", table([("limit", int(1))]));
    assert_eq!(handle.in_use(), 3, "the calls in flight keep their places");
    assert!(handle.try_acquire().is_none(), "3 in flight, limit 1");
    release.notify_one();
    tokio::task::yield_now().await;
    tokio::task::yield_now().await;
    assert_eq!(handle.in_use(), 2);
    assert!(handle.try_acquire().is_none(), "2 in flight, limit 1");
    release.notify_waiters();
    for h in held {
        h.await.unwrap().unwrap();
    }
    assert_eq!(handle.in_use(), 0);
    let one = handle.try_acquire().expect("under the limit");
    assert!(handle.try_acquire().is_none(), "the new limit is 1");
    drop(one);
}

#[tokio::test(start_paused = true)]
async fn a_larger_block_limit_wakes_its_waiters_at_once() {
    let block = |limit| table([("limit", int(limit)), ("policy", s("block"))]);
    let registry = registry::<ReLimit>(block(1));
    let _default = registry.set_default();
    let handle = registry.sync_scope(ReLimit::get).unwrap();
    let release = Arc::new(tokio::sync::Notify::new());
    let calls: Vec<_> = (0..3)
        .map(|_| tokio::spawn(hold(Arc::clone(&release))))
        .collect();
    tokio::task::yield_now().await;
    assert_eq!(handle.in_use(), 1, "one runs, two wait");
    reload_one(&registry, "reload.limit", block(3));
    tokio::task::yield_now().await;
    tokio::task::yield_now().await;
    assert_eq!(handle.in_use(), 3, "both waiters let in by the reload");
    release.notify_waiters();
    for c in calls {
        c.await.unwrap().unwrap();
    }
    assert_eq!(handle.in_use(), 0);
    // Smaller again while 3 are held: the places given back pay the debt.
    let held: Vec<_> = (0..3)
        .map(|_| handle.try_acquire().expect("free"))
        .collect();
    reload_one(&registry, "reload.limit", block(1));
    assert_eq!(handle.in_use(), 3);
    drop(held);
    assert_eq!(handle.in_use(), 0);
    let one = handle.try_acquire().expect("one place");
    assert!(handle.try_acquire().is_none(), "limit 1 again");
    drop(one);
    assert_eq!(handle.available(), 1);
}

#[derive(RateLimiterSpec)]
#[spec("reload.rate")]
struct ReRate;

#[rate_limited(ReRate)]
async fn limited() -> Result<(), TestError> {
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn the_permits_spent_in_the_current_window_survive_a_reload() {
    let rate = |limit| {
        table([
            ("limit_for_period", int(limit)),
            ("limit_refresh_period", s("1h")),
        ])
    };
    let registry = registry::<ReRate>(rate(3));
    for _ in 0..2 {
        registry.scope(limited()).await.unwrap();
    }
    reload_one(&registry, "reload.rate", rate(4));
    let mut admitted = 0;
    for _ in 0..5 {
        admitted += u32::from(registry.scope(limited()).await.is_ok());
    }
    assert_eq!(admitted, 2, "4 per window, 2 spent before the reload");
}

#[tokio::test(start_paused = true)]
async fn a_token_bucket_keeps_what_it_owes_in_the_new_rate() {
    let bucket = |limit| {
        table([
            ("type", s("token_bucket")),
            ("limit_for_period", int(limit)),
            ("limit_refresh_period", s("1s")),
        ])
    };
    let registry = registry::<ReRate>(bucket(10));
    let handle = registry.sync_scope(ReRate::get).unwrap();
    let mut taken = 0;
    while handle.try_acquire().is_ok() {
        taken += 1;
    }
    assert_eq!(taken, 10, "the burst");
    // Twice the rate: the 10 permits spent are 10 of 20 now.
    let reloaded = reload_one(&registry, "reload.rate", bucket(20));
    assert!(reloaded.specs[0].notes.is_empty());
    let mut more = 0;
    while handle.try_acquire().is_ok() {
        more += 1;
    }
    assert_eq!(more, 10, "the rest of the new burst, no more");
}

#[derive(TimeoutSpec)]
#[spec("reload.timeout")]
struct ReTimeout;

#[timeout(ReTimeout)]
async fn slow() -> Result<(), TestError> {
    tokio::time::sleep(Duration::from_millis(300)).await;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn enabled_false_and_back_works_for_every_mechanism() {
    let registry = build(
        Registry::builder()
            .spec::<ReTimeout>()
            .spec::<ReRate>()
            .spec::<ReLimit>(),
        vec![
            ("reload.timeout", table([("duration", s("100ms"))])),
            (
                "reload.rate",
                table([
                    ("limit_for_period", int(1)),
                    ("limit_refresh_period", s("1h")),
                ]),
            ),
            ("reload.limit", table([("limit", int(1))])),
        ],
    );
    let sections = |enabled: bool| {
        let on = |t: Value| with(t, "enabled", Value::Bool(enabled));
        root(vec![
            ("reload.timeout", on(table([("duration", s("100ms"))]))),
            (
                "reload.rate",
                on(table([
                    ("limit_for_period", int(1)),
                    ("limit_refresh_period", s("1h")),
                ])),
            ),
            ("reload.limit", on(table([("limit", int(1))]))),
        ])
    };
    assert!(registry.scope(slow()).await.is_err(), "timed out");
    registry.scope(limited()).await.unwrap();
    assert!(registry.scope(limited()).await.is_err(), "rate spent");
    let limit = registry.sync_scope(ReLimit::get).unwrap();

    let off = registry.reload(&sections(false)).unwrap();
    assert_eq!(off.specs.len(), 3);
    registry.scope(slow()).await.unwrap();
    registry.scope(limited()).await.unwrap();
    let a = limit.try_acquire().expect("a pass-through");
    let b = limit.try_acquire().expect("a pass-through");
    drop((a, b));

    registry.reload(&sections(true)).unwrap();
    assert!(registry.scope(slow()).await.is_err(), "times out again");
    assert!(
        registry.scope(limited()).await.is_err(),
        "the permit spent before is still spent"
    );
    let a = limit.try_acquire().expect("one place");
    assert!(limit.try_acquire().is_none(), "limited again");
    drop(a);
}

// ---------------------------------------------------------------- problems

#[tokio::test(start_paused = true)]
async fn a_section_of_a_spec_the_registry_lacks_is_not_read() {
    let registry = registry::<ReRetry>(retry(1, "1ms"));
    let reloaded = registry
        .reload(&root(vec![
            ("reload.retry", retry(1, "1ms")),
            // Another spec's section, wrong as it is: not this registry's.
            (
                "reload.breaker",
                table([("failure_rate_threshold", s("half"))]),
            ),
        ]))
        .expect("the registry's own section is fine");
    assert_eq!(reloaded, resilient_core::Reloaded::default());
}

#[tokio::test(start_paused = true)]
async fn a_call_in_flight_keeps_its_timeout_and_the_next_one_runs_the_new() {
    let registry = registry::<ReTimeout>(table([("duration", s("200ms"))]));
    let scoped = registry.clone();
    let start = tokio::time::Instant::now();
    let in_flight = tokio::spawn(async move { scoped.scope(slow()).await });
    tokio::task::yield_now().await; // the call starts at 0
    tokio::time::advance(Duration::from_millis(100)).await;
    reload_one(&registry, "reload.timeout", table([("duration", s("1s"))]));
    let err = in_flight.await.unwrap().expect_err("300 ms against 200 ms");
    assert!(
        matches!(err, TestError::Resilience(Error::Timeout { .. })),
        "{err:?}"
    );
    assert_eq!(start.elapsed(), Duration::from_millis(200), "its own limit");
    registry
        .scope(slow())
        .await
        .expect("300 ms within the new 1 s");
}

// ---------------------------------------------------------------- switches

#[derive(RetrySpec)]
#[spec("reload.switch.quiet")]
struct Quiet;

#[derive(RetrySpec)]
#[spec("reload.switch.loud")]
struct Loud;

#[retryable(Quiet)]
async fn quiet() -> Result<(), TestError> {
    Err(TestError::Down)
}

#[retryable(Loud)]
async fn loud() -> Result<(), TestError> {
    Err(TestError::Down)
}

#[tokio::test(start_paused = true)]
async fn the_global_switch_applies_to_every_spec_without_its_own() {
    let meters = Meters::default();
    let own_off = with(
        retry(1, "1ms"),
        "telemetry",
        table([("metrics", table([("enabled", Value::Bool(false))]))]),
    );
    let sections = |global: bool| {
        root(vec![
            (
                "resilient.telemetry",
                table([("metrics", table([("enabled", Value::Bool(global))]))]),
            ),
            ("reload.switch.quiet", own_off.clone()),
            ("reload.switch.loud", retry(1, "1ms")),
        ])
    };
    let registry = metrics::with_local_recorder(&meters, || {
        Registry::builder()
            .spec::<Quiet>()
            .spec::<Loud>()
            .build(&sections(false))
            .unwrap()
    });
    let failures = |spec, path| {
        meters
            .counter(
                "resilient_calls_total",
                &[
                    ("spec", spec),
                    ("path", path),
                    ("kind", "retry"),
                    ("outcome", "failure"),
                ],
            )
            .unwrap_or(0)
    };
    registry.scope(loud()).await.unwrap_err();
    assert_eq!(meters.registered(), 0, "metrics off everywhere");
    metrics::with_local_recorder(&meters, || registry.reload(&sections(true))).unwrap();
    registry.scope(loud()).await.unwrap_err();
    registry.scope(quiet()).await.unwrap_err();
    assert_eq!(
        failures("Loud", "reload.switch.loud"),
        1,
        "on by the global switch"
    );
    assert_eq!(
        failures("Quiet", "reload.switch.quiet"),
        0,
        "its own switch wins"
    );
    metrics::with_local_recorder(&meters, || registry.reload(&sections(false))).unwrap();
    registry.scope(loud()).await.unwrap_err();
    assert_eq!(failures("Loud", "reload.switch.loud"), 1, "off again");
}

#[tokio::test(start_paused = true)]
async fn metrics_switched_on_by_a_reload_alone_register_every_mechanisms_own() {
    let meters = Meters::default();
    let global = |on: bool| table([("metrics", table([("enabled", Value::Bool(on))]))]);
    // The same sections both times: only the switch changes.
    let sections = |on: bool| {
        root(vec![
            ("resilient.telemetry", global(on)),
            ("reload.switch.loud", retry(1, "1ms")),
            ("reload.breaker", breaker(2, 2)),
            ("reload.limit", table([("limit", int(3))])),
        ])
    };
    let registry = metrics::with_local_recorder(&meters, || {
        Registry::builder()
            .spec::<Loud>()
            .spec::<ReBreaker>()
            .spec::<ReLimit>()
            .build(&sections(false))
            .unwrap()
    });
    let breaker = registry.sync_scope(ReBreaker::get).unwrap();
    let limit = registry.sync_scope(ReLimit::get).unwrap();
    // While metrics are off: a breaker forced open, a place held.
    breaker.force_open();
    let place = limit.try_acquire().expect("a free place");
    assert_eq!(meters.registered(), 0, "metrics off everywhere");

    let reloaded =
        metrics::with_local_recorder(&meters, || registry.reload(&sections(true))).unwrap();
    assert!(reloaded.specs.is_empty(), "no spec's settings changed");
    let labels = |spec, path| [("spec", spec), ("path", path)];
    let of_breaker = labels("ReBreaker", "reload.breaker");
    assert_eq!(
        meters.gauge("resilient_circuit_breaker_state", &of_breaker),
        Some(3.0),
        "registered with the state the breaker is in: forced open"
    );
    // The transitions a dashboard reads (to `open`) are registered at once;
    // the others when they first happen (README, Metrics).
    let to_open = [of_breaker[0], of_breaker[1], ("to", "open")];
    assert_eq!(
        meters.counter("resilient_circuit_breaker_transitions_total", &to_open),
        Some(0)
    );
    let to_closed = [of_breaker[0], of_breaker[1], ("to", "closed")];
    assert_eq!(
        meters.counter("resilient_circuit_breaker_transitions_total", &to_closed),
        None
    );
    let of_limit = labels("ReLimit", "reload.limit");
    assert_eq!(
        meters.gauge("resilient_concurrency_in_use", &of_limit),
        Some(1.0),
        "registered with the place held while metrics were off"
    );

    metrics::with_local_recorder(&meters, || breaker.reset());
    drop(place);
    registry.scope(loud()).await.unwrap_err();
    assert_eq!(
        meters.counter("resilient_circuit_breaker_transitions_total", &to_closed),
        Some(1)
    );
    assert_eq!(
        meters.gauge("resilient_circuit_breaker_state", &of_breaker),
        Some(0.0)
    );
    assert_eq!(
        meters.gauge("resilient_concurrency_in_use", &of_limit),
        Some(0.0)
    );
    let of_loud = labels("Loud", "reload.switch.loud");
    assert_eq!(
        meters.counter("resilient_retries_total", &of_loud),
        Some(1),
        "one retry, counted"
    );
    let exhausted = [of_loud[0], of_loud[1], ("reason", "attempts")];
    assert_eq!(
        meters.counter("resilient_retry_exhausted_total", &exhausted),
        Some(1)
    );
}

// ---------------------------------------------------------------- snapshot

#[test]
fn the_snapshot_shows_the_settings_running_after_a_reload() {
    let registry = registry::<ReBreaker>(breaker(2, 2));
    let settings = |r: &Registry| {
        r.snapshot().specs[0]
            .settings::<circuit_breaker::CircuitBreakerSettings>()
            .map(|s| s.minimum_required_calls)
    };
    assert_eq!(settings(&registry), Some(2));
    reload_one(&registry, "reload.breaker", breaker(7, 10));
    assert_eq!(settings(&registry), Some(7));
}

// ---------------------------------------------------------------- under load

mod under_load {
    use super::*;
    use resilient_core::circuit_breakable;
    use std::cell::Cell;
    use std::collections::BTreeMap;
    use std::sync::atomic::AtomicUsize;

    #[derive(RetrySpec)]
    #[spec("reload.load.retry")]
    struct LoadRetry;

    #[derive(CircuitBreakerSpec)]
    #[spec("reload.load.breaker")]
    struct LoadBreaker;

    #[derive(ConcurrencyLimitSpec)]
    #[spec("reload.load.limit")]
    struct LoadLimit;

    thread_local! {
        /// The call whose attempt this thread runs: the retry's events
        /// are published on the same thread, right after the attempt.
        static CALL: Cell<u64> = const { Cell::new(0) };
    }

    /// Every call's attempts, and the delays its retries were scheduled
    /// with.
    #[derive(Default)]
    struct Seen {
        runs: Mutex<BTreeMap<u64, (u32, Vec<Duration>)>>,
        in_flight: AtomicUsize,
        peak: AtomicUsize,
    }

    #[circuit_breakable(LoadBreaker)]
    #[concurrency_limit(LoadLimit)]
    #[retryable(LoadRetry)]
    async fn call(id: u64, seen: Arc<Seen>) -> Result<(), TestError> {
        let now = seen.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        seen.peak.fetch_max(now, Ordering::SeqCst);
        tokio::task::yield_now().await;
        seen.runs.lock().unwrap().entry(id).or_default().0 += 1;
        seen.in_flight.fetch_sub(1, Ordering::SeqCst);
        CALL.with(|c| c.set(id));
        Err(TestError::Down)
    }

    /// Two settings whose every key differs, so that a call under a mix of
    /// them shows: A retries once after 1 µs, B twice after 2 µs; the
    /// window, the limit and the budget's size change with them.
    fn sections(b: bool) -> Value {
        let (attempts, delay, limit, window) = if b {
            (2, "2us", 40, 2_000_000)
        } else {
            (1, "1us", 24, 1_000_000)
        };
        root(vec![
            (
                "reload.load.retry",
                table([("delay", s(delay)), ("attempts", int(attempts))]),
            ),
            (
                "reload.load.breaker",
                table([
                    ("failure_rate_threshold", int(100)),
                    ("minimum_required_calls", int(window)),
                    ("wait_duration_in_open_state", s("1h")),
                    ("permitted_calls_in_half_open_state", int(1)),
                    // A window far larger than the test's calls: no outcome
                    // can open it, so no transition may happen.
                    ("count_based", table([("window_size", int(window))])),
                    ("type", s("fixed_window")),
                ]),
            ),
            ("reload.load.limit", table([("limit", int(limit))])),
        ])
    }

    #[test]
    fn a_thousand_reloads_under_64_tasks_on_two_workers_tear_nothing_and_lose_nothing() {
        let registry = Registry::builder()
            .spec::<LoadRetry>()
            .spec::<LoadBreaker>()
            .spec::<LoadLimit>()
            .build(&sections(false))
            .unwrap();
        let seen = Arc::new(Seen::default());
        let transitions = Arc::new(AtomicU32::new(0));
        {
            let (seen, transitions) = (Arc::clone(&seen), Arc::clone(&transitions));
            let _ = registry.subscribe(move |e| match e {
                Event::RetryScheduled { delay, .. } => {
                    let id = CALL.with(Cell::get);
                    seen.runs
                        .lock()
                        .unwrap()
                        .entry(id)
                        .or_default()
                        .1
                        .push(*delay);
                }
                Event::StateTransition { .. } => {
                    transitions.fetch_add(1, Ordering::SeqCst);
                }
                _ => {}
            });
        }
        let runtime = registry
            .set_default_on(
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_time(),
            )
            .build()
            .unwrap();
        let reloads_done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reloader = {
            let (registry, done) = (registry.clone(), Arc::clone(&reloads_done));
            std::thread::spawn(move || {
                for i in 0..1000 {
                    registry.reload(&sections(i % 2 == 0)).unwrap();
                    std::thread::sleep(Duration::from_micros(200));
                }
                done.store(true, Ordering::SeqCst);
            })
        };
        let next_id = Arc::new(std::sync::atomic::AtomicU64::new(1));
        let (ran, rejected) = runtime.block_on(async {
            let tasks: Vec<_> = (0..64)
                .map(|_| {
                    let (seen, ids, done) = (
                        Arc::clone(&seen),
                        Arc::clone(&next_id),
                        Arc::clone(&reloads_done),
                    );
                    tokio::spawn(async move {
                        let (mut ran, mut rejected) = (0u32, 0u32);
                        let mut n = 0;
                        while n < 20 || !done.load(Ordering::SeqCst) {
                            n += 1;
                            let id = ids.fetch_add(1, Ordering::SeqCst);
                            match call(id, Arc::clone(&seen)).await {
                                Err(TestError::Resilience(Error::RetryExhausted(_))) => ran += 1,
                                Err(TestError::Resilience(Error::ConcurrencyLimitReached {
                                    ..
                                })) => {
                                    rejected += 1;
                                    tokio::task::yield_now().await;
                                }
                                other => panic!("{other:?}"),
                            }
                        }
                        (ran, rejected)
                    })
                })
                .collect();
            let mut totals = (0, 0);
            for t in tasks {
                let (r, j) = t.await.unwrap();
                totals = (totals.0 + r, totals.1 + j);
            }
            totals
        });
        reloader.join().unwrap();
        let limit = registry.sync_scope(LoadLimit::get).unwrap();
        assert_eq!(limit.in_use(), 0, "every place came back");
        assert!(
            seen.peak.load(Ordering::SeqCst) <= 40,
            "never above the larger limit"
        );
        assert_eq!(
            transitions.load(Ordering::SeqCst),
            0,
            "no outcome opened it"
        );
        let runs = seen.runs.lock().unwrap();
        assert_eq!(runs.len(), ran as usize, "every call that ran, seen");
        let (mut a, mut b) = (0, 0);
        for (id, (attempts, delays)) in runs.iter() {
            match (*attempts, delays.as_slice()) {
                (2, [d]) if *d == Duration::from_micros(1) => a += 1,
                (3, [d, e]) if *d == Duration::from_micros(2) && *e == *d => b += 1,
                other => panic!("call {id} ran under a mix of settings: {other:?}"),
            }
        }
        assert!(a > 0 && b > 0, "calls ran under both settings: {a} and {b}");
        assert!(ran + rejected >= 64 * 20);
    }
}
