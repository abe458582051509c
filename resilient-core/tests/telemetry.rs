//! Telemetry: the log lines each mechanism writes (counted by level and
//! target), the per-spec switches, the metrics recorded through the `metrics`
//! facade, the events listeners receive, and the registry's snapshot.

#![allow(clippy::expect_used, clippy::unwrap_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::capture::{Capture, Meters};
use support::*;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use resilient_core::circuit_breaker::{self, State};
use resilient_core::settings::Value;
use resilient_core::telemetry::{Event, StoppedBy};
use resilient_core::{
    circuit_breakable, concurrency_limit, fallback, rate_limited, retryable, timeout,
    CircuitBreakerSpec, ConcurrencyLimitSpec, Error, RateLimiterSpec, Registry, RetrySpec,
    SpecKind, TimeoutSpec,
};
use resilient_core::{concurrency, retry};
use tracing::Level;

#[derive(Debug, thiserror::Error)]
enum StoreError {
    #[error("store unavailable")]
    Unavailable,
    #[error(transparent)]
    Resilience(#[from] Error),
}

fn retry_section() -> Value {
    table([("delay", s("100ms")), ("attempts", int(2))])
}

fn breaker_section() -> Value {
    table([
        ("failure_rate_threshold", int(100)),
        ("minimum_required_calls", int(1)),
        ("wait_duration_in_open_state", s("1s")),
        ("permitted_calls_in_half_open_state", int(1)),
        ("count_based", table([("window_size", int(1))])),
    ])
}

fn metrics_on(section: Value) -> Value {
    with(
        section,
        "telemetry",
        table([("metrics", table([("enabled", Value::Bool(true))]))]),
    )
}

fn logging_off(section: Value) -> Value {
    with(
        section,
        "telemetry",
        table([("logging", table([("enabled", Value::Bool(false))]))]),
    )
}

// --- logs -------------------------------------------------------------------

#[derive(RetrySpec)]
#[spec("telemetry.logs.retry")]
struct LogRetry;

static LOG_RETRY_CALLS: AtomicU32 = AtomicU32::new(0);

#[retryable(LogRetry)]
async fn always_unavailable() -> Result<(), StoreError> {
    LOG_RETRY_CALLS.fetch_add(1, Ordering::SeqCst);
    Err(StoreError::Unavailable)
}

#[tokio::test(start_paused = true)]
async fn each_retry_logs_at_info_with_the_failure_and_the_wait_and_giving_up_warns_with_the_cause()
{
    let capture = Capture::default();
    let _subscriber = tracing::subscriber::set_default(capture.clone());
    let registry = registry::<LogRetry>(retry_section());
    registry.scope(always_unavailable()).await.unwrap_err();
    assert_eq!(LOG_RETRY_CALLS.load(Ordering::SeqCst), 3);

    let retries = capture.at("resilient::retry", Level::INFO);
    assert_eq!(retries.len(), 2, "one INFO line per retry: {retries:#?}");
    for (n, line) in retries.iter().enumerate() {
        assert_eq!(line.fields["spec"], "LogRetry");
        assert_eq!(line.fields["path"], "telemetry.logs.retry");
        assert_eq!(line.fields["retry"], (n + 1).to_string());
        assert_eq!(line.fields["failure"], "store unavailable");
        assert_eq!(line.fields["delay"], "100ms");
        assert_eq!(line.fields["wait_from"], "backoff");
        assert!(!line.fields.contains_key("status"), "{line:?}");
    }
    let gave_up = capture.at("resilient::retry", Level::WARN);
    assert_eq!(gave_up.len(), 1, "{gave_up:#?}");
    assert_eq!(gave_up[0].fields["calls"], "3");
    assert_eq!(gave_up[0].fields["reason"], "attempts");
    assert_eq!(gave_up[0].fields["cause"], "store unavailable");
}

// --- why a retry waits as long as it does ---------------------------------

/// A status with a `Retry-After` of 3 s, classified as HTTP would.
#[derive(RetrySpec)]
#[spec("telemetry.logs.hinted", classify = StatusOutcomes)]
struct HintedRetry;

struct StatusOutcomes;
impl resilient_core::Classifier for StatusOutcomes {}

impl resilient_core::Classify<u16, StoreError> for StatusOutcomes {
    fn classify(outcome: &Result<u16, StoreError>) -> resilient_core::Verdict {
        match outcome {
            Ok(503) => resilient_core::Verdict::RetryAfter(Duration::from_secs(3)),
            Ok(status) if *status >= 500 => resilient_core::Verdict::Failure,
            Ok(_) => resilient_core::Verdict::Success,
            Err(_) => resilient_core::Verdict::Failure,
        }
    }

    fn status(value: &u16) -> Option<u16> {
        Some(*value)
    }
}

#[retryable(HintedRetry)]
async fn answers(status: u16) -> Result<u16, StoreError> {
    Ok(status)
}

#[tokio::test(start_paused = true)]
async fn a_retry_line_names_the_status_and_whether_its_wait_was_asked_for() {
    let capture = Capture::default();
    let _subscriber = tracing::subscriber::set_default(capture.clone());
    let registry = registry::<HintedRetry>(retry_section());
    registry.scope(answers(503)).await.unwrap_err();
    registry.scope(answers(500)).await.unwrap_err();
    let lines = capture.at("resilient::retry", Level::INFO);
    assert_eq!(lines.len(), 4, "{lines:#?}");
    for line in &lines[..2] {
        assert_eq!(line.fields["status"], "503");
        assert_eq!(line.fields["wait_from"], "retry_after");
        assert_eq!(line.fields["delay"], "3s");
        assert!(
            line.message
                .ends_with("after 3s, the wait the failure asked for (Retry-After)"),
            "{}",
            line.message
        );
        assert!(line.message.contains("status 503"), "{}", line.message);
    }
    for line in &lines[2..] {
        assert_eq!(line.fields["status"], "500");
        assert_eq!(line.fields["wait_from"], "backoff");
        assert_eq!(line.fields["delay"], "100ms");
    }
    let gave_up = capture.at("resilient::retry", Level::WARN);
    assert_eq!(gave_up.len(), 2, "{gave_up:#?}");
    assert_eq!(gave_up[0].fields["status"], "503");
    assert_eq!(
        gave_up[0].fields["cause"],
        "`HintedRetry` classified the returned value as a failure (status 503)"
    );
}

#[derive(RetrySpec)]
#[spec("telemetry.logs.outer")]
struct OuterRetry;

#[derive(RateLimiterSpec)]
#[spec("telemetry.logs.rate")]
struct InnerRate;

#[derive(CircuitBreakerSpec)]
#[spec("telemetry.logs.inner_breaker")]
struct InnerBreaker;

#[retryable(OuterRetry)]
#[rate_limited(InnerRate)]
async fn rate_limited_inside() -> Result<(), StoreError> {
    Ok(())
}

#[retryable(OuterRetry)]
#[circuit_breakable(InnerBreaker)]
async fn behind_an_open_breaker() -> Result<(), StoreError> {
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_retry_line_says_when_its_wait_is_a_limiters_or_a_breakers() {
    let capture = Capture::default();
    let _subscriber = tracing::subscriber::set_default(capture.clone());
    let registry = build(
        Registry::builder()
            .spec::<OuterRetry>()
            .spec::<InnerRate>()
            .spec::<InnerBreaker>(),
        vec![
            (
                "telemetry.logs.outer",
                with(
                    retry_section(),
                    "retry_call_not_permitted",
                    Value::Bool(true),
                ),
            ),
            (
                "telemetry.logs.rate",
                table([
                    ("limit_for_period", int(1)),
                    ("limit_refresh_period", s("1s")),
                ]),
            ),
            (
                "telemetry.logs.inner_breaker",
                with(breaker_section(), "wait_duration_in_open_state", s("2s")),
            ),
        ],
    );
    // The second call finds the permit spent: it waits until the next one.
    registry.scope(rate_limited_inside()).await.unwrap();
    registry.scope(rate_limited_inside()).await.unwrap();
    let lines = capture.at("resilient::retry", Level::INFO);
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert_eq!(lines[0].fields["wait_from"], "rate_limiter");
    assert_eq!(lines[0].fields["delay"], "1s");
    assert!(
        lines[0]
            .message
            .ends_with("until the rate limiter's next permit"),
        "{}",
        lines[0].message
    );
    // One failure opens the breaker: the rest of its open wait is the hint.
    let breaker = registry.sync_scope(InnerBreaker::get).unwrap();
    breaker.try_acquire().unwrap().failure();
    registry.scope(behind_an_open_breaker()).await.unwrap();
    let lines = capture.at("resilient::retry", Level::INFO);
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert_eq!(lines[1].fields["wait_from"], "circuit_breaker");
    assert_eq!(lines[1].fields["delay"], "2s");
}

/// `classify = http`: the response's status, and its `Retry-After`.
#[cfg(feature = "http")]
mod http_lines {
    use super::*;

    #[derive(RetrySpec)]
    #[spec("telemetry.logs.http", classify = http)]
    struct HttpRetry;

    #[retryable(HttpRetry)]
    async fn unavailable() -> Result<http::Response<()>, StoreError> {
        Ok(http::Response::builder()
            .status(503)
            .header("retry-after", "2")
            .body(())
            .unwrap())
    }

    #[tokio::test(start_paused = true)]
    async fn a_retried_503_names_its_status_and_its_retry_after() {
        let capture = Capture::default();
        let _subscriber = tracing::subscriber::set_default(capture.clone());
        let registry = registry::<HttpRetry>(retry_section());
        registry.scope(unavailable()).await.unwrap_err();
        let lines = capture.at("resilient::retry", Level::INFO);
        assert_eq!(lines.len(), 2, "{lines:#?}");
        for line in &lines {
            assert_eq!(line.fields["status"], "503");
            assert_eq!(line.fields["wait_from"], "retry_after");
            assert_eq!(line.fields["delay"], "2s");
        }
    }
}

#[derive(RetrySpec)]
#[spec("telemetry.logs.quiet")]
struct QuietRetry;

#[retryable(QuietRetry)]
async fn quietly_unavailable() -> Result<(), StoreError> {
    Err(StoreError::Unavailable)
}

#[tokio::test(start_paused = true)]
async fn a_spec_with_logging_disabled_writes_no_line() {
    let capture = Capture::default();
    let _subscriber = tracing::subscriber::set_default(capture.clone());
    let registry = registry::<QuietRetry>(logging_off(retry_section()));
    registry.scope(quietly_unavailable()).await.unwrap_err();
    let lines: Vec<_> = capture
        .lines()
        .into_iter()
        .filter(|l| l.target.starts_with("resilient"))
        .collect();
    assert!(lines.is_empty(), "{lines:#?}");
}

#[derive(CircuitBreakerSpec)]
#[spec("telemetry.logs.breaker")]
struct LogBreaker;

#[tokio::test(start_paused = true)]
async fn a_breaker_opening_warns_and_its_half_open_and_close_log_at_info() {
    let capture = Capture::default();
    let _subscriber = tracing::subscriber::set_default(capture.clone());
    let registry = registry::<LogBreaker>(breaker_section());
    let breaker = registry.sync_scope(LogBreaker::get).unwrap();
    breaker.try_acquire().expect("closed").failure();
    tokio::time::advance(Duration::from_secs(1)).await;
    breaker.try_acquire().expect("the probe").success();

    let warns = capture.at("resilient::circuit_breaker", Level::WARN);
    assert_eq!(warns.len(), 1, "{warns:#?}");
    assert_eq!(warns[0].fields["to"], "open");
    let infos = capture.at("resilient::circuit_breaker", Level::INFO);
    let to: Vec<&str> = infos.iter().map(|l| l.fields["to"].as_str()).collect();
    assert_eq!(to, ["half-open", "closed"]);
}

#[derive(CircuitBreakerSpec)]
#[spec("telemetry.logs.flood")]
struct FloodBreaker;

#[circuit_breakable(FloodBreaker)]
async fn behind_flood_breaker() -> Result<(), StoreError> {
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn rejections_log_at_debug_with_a_warn_summary_at_most_once_per_spec_per_10s() {
    let capture = Capture::default();
    let _subscriber = tracing::subscriber::set_default(capture.clone());
    let registry = registry::<FloodBreaker>(breaker_section());
    registry.sync_scope(FloodBreaker::get).unwrap().force_open();
    for _ in 0..100 {
        registry.scope(behind_flood_breaker()).await.unwrap_err();
    }
    let target = "resilient::circuit_breaker";
    assert_eq!(capture.at(target, Level::DEBUG).len(), 100);
    // The forced opening itself, and the first rejection's summary.
    let summaries = |c: &Capture| {
        c.at(target, Level::WARN)
            .into_iter()
            .filter(|l| l.fields.contains_key("rejected"))
            .collect::<Vec<_>>()
    };
    assert_eq!(summaries(&capture).len(), 1);
    assert_eq!(summaries(&capture)[0].fields["rejected"], "1");

    tokio::time::advance(Duration::from_millis(9_999)).await;
    registry.scope(behind_flood_breaker()).await.unwrap_err();
    assert_eq!(summaries(&capture).len(), 1, "not before 10s");
    tokio::time::advance(Duration::from_millis(1)).await;
    registry.scope(behind_flood_breaker()).await.unwrap_err();
    let all = summaries(&capture);
    assert_eq!(all.len(), 2);
    assert_eq!(
        all[1].fields["rejected"], "101",
        "every rejection since the first summary"
    );
}

#[derive(RetrySpec)]
#[spec("telemetry.logs.missing")]
struct MissingRetry;

#[retryable(MissingRetry)]
async fn never_configured() -> Result<(), StoreError> {
    Ok(())
}

#[tokio::test]
async fn a_call_that_finds_no_settings_logs_an_error_once_per_spec() {
    let capture = Capture::default();
    let _subscriber = tracing::subscriber::set_default(capture.clone());
    // A registry without the spec.
    let registry = registry::<LogRetry>(retry_section());
    for _ in 0..5 {
        let err = registry.scope(never_configured()).await.unwrap_err();
        assert!(matches!(
            err,
            StoreError::Resilience(Error::NotConfigured { .. })
        ));
    }
    let errors = capture.at("resilient::registry", Level::ERROR);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(errors[0].fields["spec"], "MissingRetry");
    assert_eq!(errors[0].fields["path"], "telemetry.logs.missing");
}

#[derive(RetrySpec)]
#[spec("telemetry.logs.span")]
struct SpanRetry;

/// Below the resilience attributes, `#[tracing::instrument]` instruments the
/// whole chain: the first resilience attribute expands first and keeps it on
/// the fn.
#[retryable(SpanRetry)]
#[tracing::instrument]
async fn find_pet(id: u64) -> Result<(), StoreError> {
    let _ = id;
    Err(StoreError::Unavailable)
}

#[retryable(SpanRetry)]
async fn find_owner() -> Result<(), StoreError> {
    Err(StoreError::Unavailable)
}

#[tokio::test(start_paused = true)]
async fn the_chain_logs_inside_the_callers_span() {
    use tracing::Instrument;
    let capture = Capture::default();
    let _subscriber = tracing::subscriber::set_default(capture.clone());
    let registry = registry::<SpanRetry>(retry_section());
    registry.scope(find_pet(7)).await.unwrap_err();
    let request = tracing::info_span!("request");
    registry
        .scope(find_owner())
        .instrument(request)
        .await
        .unwrap_err();
    let lines = capture.at("resilient::retry", Level::INFO);
    let spans: Vec<Vec<String>> = lines.into_iter().map(|l| l.spans).collect();
    assert_eq!(
        spans,
        [
            vec!["find_pet".to_owned()],
            vec!["find_pet".to_owned()],
            vec!["request".to_owned()],
            vec!["request".to_owned()],
        ]
    );
}

// --- switches ---------------------------------------------------------------

#[test]
fn telemetry_switches_are_validated_like_every_other_key() {
    let bad = with(
        retry_section(),
        "telemetry",
        table([
            ("logging", table([("enabled", s("yes"))])),
            ("metrics", table([("enabeld", Value::Bool(true))])),
        ]),
    );
    let problems = Registry::builder()
        .spec::<LogRetry>()
        .build(&root(vec![("telemetry.logs.retry", bad)]))
        .unwrap_err();
    let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert_eq!(text.len(), 2, "{text:#?}");
    assert!(
        text[0].contains("key `telemetry.logging.enabled` must be `true` or `false`"),
        "{text:#?}"
    );
    assert!(
        text[1].contains(
            "key `telemetry.metrics.enabeld` is not a known setting; did you mean `enabled`?"
        ),
        "{text:#?}"
    );
}

// --- metrics ----------------------------------------------------------------

#[derive(RetrySpec)]
#[spec("telemetry.metrics.retry")]
struct MeteredRetry;

#[derive(CircuitBreakerSpec)]
#[spec("telemetry.metrics.breaker")]
struct MeteredBreaker;

static METERED_CALLS: AtomicU32 = AtomicU32::new(0);

/// Fails the first two calls of each three.
#[circuit_breakable(MeteredBreaker)]
#[retryable(MeteredRetry)]
async fn metered() -> Result<u32, StoreError> {
    let n = METERED_CALLS.fetch_add(1, Ordering::SeqCst);
    if n % 3 < 2 {
        Err(StoreError::Unavailable)
    } else {
        Ok(n)
    }
}

fn metered_registry(meters: &Meters, retry: Value, breaker: Value) -> Registry {
    metrics::with_local_recorder(meters, || {
        build(
            Registry::builder()
                .spec::<MeteredRetry>()
                .spec::<MeteredBreaker>(),
            vec![
                ("telemetry.metrics.retry", retry),
                ("telemetry.metrics.breaker", breaker),
            ],
        )
    })
}

#[tokio::test(start_paused = true)]
async fn metrics_count_calls_by_outcome_retries_transitions_and_durations() {
    let meters = Meters::default();
    let breaker = with(
        breaker_section(),
        "count_based",
        table([("window_size", int(2))]),
    );
    let breaker = with(breaker, "minimum_required_calls", int(2));
    let registry = metered_registry(&meters, metrics_on(retry_section()), metrics_on(breaker));
    for _ in 0..3 {
        registry.scope(metered()).await.unwrap();
    }
    assert_eq!(METERED_CALLS.load(Ordering::SeqCst), 9);

    let retry = [
        ("spec", "MeteredRetry"),
        ("path", "telemetry.metrics.retry"),
    ];
    let breaker = [
        ("spec", "MeteredBreaker"),
        ("path", "telemetry.metrics.breaker"),
    ];
    let call = |labels: &[(&'static str, &'static str)], kind, outcome| {
        let mut l = labels.to_vec();
        l.push(("kind", kind));
        l.push(("outcome", outcome));
        meters.counter("resilient_calls_total", &l)
    };
    assert_eq!(call(&retry, "retry", "success"), Some(3));
    assert_eq!(call(&retry, "retry", "failure"), Some(0));
    assert_eq!(meters.counter("resilient_retries_total", &retry), Some(6));
    assert_eq!(
        meters.counter(
            "resilient_retry_exhausted_total",
            &[retry[0], retry[1], ("reason", "attempts")]
        ),
        Some(0)
    );
    // The breaker is outside the retry: one outcome per call.
    assert_eq!(call(&breaker, "circuit_breaker", "success"), Some(3));
    assert_eq!(call(&breaker, "circuit_breaker", "rejected"), Some(0));
    let durations = meters
        .histogram(
            "resilient_call_duration_seconds",
            &[breaker[0], breaker[1], ("kind", "circuit_breaker")],
        )
        .unwrap();
    // Each call waited 100ms twice on the paused clock.
    assert_eq!(durations.len(), 3);
    for d in durations {
        assert!((0.2..0.21).contains(&d), "{d}");
    }

    // Open the breaker by hand: a transition, the gauge, a rejection.
    let handle = registry.sync_scope(MeteredBreaker::get).unwrap();
    // A transition to `forced_open` is registered when it first happens,
    // with the recorder in use then (README, Metrics).
    metrics::with_local_recorder(&meters, || handle.force_open());
    registry.scope(metered()).await.unwrap_err();
    assert_eq!(call(&breaker, "circuit_breaker", "rejected"), Some(1));
    assert_eq!(
        meters.counter(
            "resilient_circuit_breaker_transitions_total",
            &[breaker[0], breaker[1], ("to", "forced_open")]
        ),
        Some(1)
    );
    assert_eq!(
        meters.gauge("resilient_circuit_breaker_state", &breaker),
        Some(3.0)
    );
    handle.reset();
    assert_eq!(
        meters.gauge("resilient_circuit_breaker_state", &breaker),
        Some(0.0)
    );
}

#[derive(RetrySpec)]
#[spec("telemetry.metrics.off")]
struct UnmeteredRetry;

#[test]
fn metrics_are_off_unless_a_spec_enables_them() {
    let meters = Meters::default();
    metrics::with_local_recorder(&meters, || registry::<UnmeteredRetry>(retry_section()));
    assert_eq!(meters.registered(), 0);
}

#[derive(ConcurrencyLimitSpec)]
#[spec("telemetry.metrics.places")]
struct MeteredPlaces;

#[concurrency_limit(MeteredPlaces)]
async fn hold_place(rx: Arc<tokio::sync::Notify>) -> Result<(), StoreError> {
    rx.notified().await;
    Ok(())
}

#[tokio::test]
async fn the_in_use_gauge_counts_places_held_now() {
    let meters = Meters::default();
    let registry = metrics::with_local_recorder(&meters, || {
        registry::<MeteredPlaces>(metrics_on(table([("limit", int(2))])))
    });
    let labels = [
        ("spec", "MeteredPlaces"),
        ("path", "telemetry.metrics.places"),
    ];
    let _default = registry.set_default();
    let notify = Arc::new(tokio::sync::Notify::new());
    let a = tokio::spawn(hold_place(notify.clone()));
    let b = tokio::spawn(hold_place(notify.clone()));
    tokio::task::yield_now().await;
    assert_eq!(
        meters.gauge("resilient_concurrency_in_use", &labels),
        Some(2.0)
    );
    hold_place(notify.clone()).await.unwrap_err();
    let rejected = meters.counter(
        "resilient_calls_total",
        &[
            labels[0],
            labels[1],
            ("kind", "concurrency_limit"),
            ("outcome", "rejected"),
        ],
    );
    assert_eq!(rejected, Some(1));
    notify.notify_waiters();
    a.await.unwrap().unwrap();
    b.await.unwrap().unwrap();
    assert_eq!(
        meters.gauge("resilient_concurrency_in_use", &labels),
        Some(0.0)
    );
}

#[derive(ConcurrencyLimitSpec)]
#[spec("telemetry.metrics.queued")]
struct MeteredQueue;

#[tokio::test(start_paused = true)]
async fn the_in_use_gauge_counts_a_block_limiters_places_through_its_handle() {
    let meters = Meters::default();
    let registry = metrics::with_local_recorder(&meters, || {
        registry::<MeteredQueue>(metrics_on(table([
            ("limit", int(1)),
            ("policy", Value::Str("block".into())),
            ("max_wait", Value::Str("10ms".into())),
        ])))
    });
    let labels = [
        ("spec", "MeteredQueue"),
        ("path", "telemetry.metrics.queued"),
    ];
    let in_use = || meters.gauge("resilient_concurrency_in_use", &labels);
    let handle = registry.sync_scope(MeteredQueue::get).unwrap();
    let held = handle.try_acquire().expect("a free place");
    assert_eq!(in_use(), Some(1.0));
    assert_eq!(handle.in_use(), 1);
    assert!(handle.try_acquire().is_none(), "full");
    // A waiter that gives up after max_wait takes nothing.
    assert!(handle.acquire().await.is_err());
    assert_eq!(in_use(), Some(1.0));
    drop(held);
    assert_eq!(in_use(), Some(0.0));
    assert_eq!(handle.in_use(), 0);
    // Taken by waiting, and by a call; each given back once.
    let waited = handle.acquire().await.expect("a free place");
    assert_eq!((in_use(), handle.in_use()), (Some(1.0), 1));
    drop(waited);
    let out = handle
        .call(|| async { Ok::<_, StoreError>(handle.in_use()) })
        .await;
    assert_eq!(out.ok(), Some(1), "the call held the one place");
    assert_eq!((in_use(), handle.in_use()), (Some(0.0), 0));
}

// --- events -----------------------------------------------------------------

#[derive(RetrySpec)]
#[spec("telemetry.events.retry")]
struct EventRetry;

#[derive(CircuitBreakerSpec)]
#[spec("telemetry.events.breaker")]
struct EventBreaker;

#[derive(TimeoutSpec)]
#[spec("telemetry.events.timeout")]
struct EventTimeout;

#[derive(RateLimiterSpec)]
#[spec("telemetry.events.rate")]
struct EventRate;

#[fallback(method = "cached()")]
#[circuit_breakable(EventBreaker)]
#[retryable(EventRetry)]
#[timeout(EventTimeout)]
async fn slow_lookup() -> Result<&'static str, StoreError> {
    tokio::time::sleep(Duration::from_secs(5)).await;
    Ok("fresh")
}

fn cached() -> Result<&'static str, StoreError> {
    Ok("cached")
}

#[rate_limited(EventRate)]
async fn limited() -> Result<(), StoreError> {
    Ok(())
}

fn recorder() -> (
    Arc<Mutex<Vec<Event>>>,
    impl Fn(&Event) + Send + Sync + 'static,
) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&events);
    (events, move |e: &Event| {
        sink.lock().unwrap().push(e.clone())
    })
}

#[tokio::test(start_paused = true)]
async fn listeners_receive_typed_events_for_all_specs_or_for_one() {
    let registry = build(
        Registry::builder()
            .spec::<EventRetry>()
            .spec::<EventBreaker>()
            .spec::<EventTimeout>()
            .spec::<EventRate>(),
        vec![
            (
                "telemetry.events.retry",
                table([("delay", s("10ms")), ("attempts", int(1))]),
            ),
            ("telemetry.events.breaker", breaker_section()),
            ("telemetry.events.timeout", table([("duration", s("1s"))])),
            (
                "telemetry.events.rate",
                table([
                    ("limit_for_period", int(1)),
                    ("limit_refresh_period", s("1s")),
                ]),
            ),
        ],
    );
    let (all, listener) = recorder();
    registry.subscribe(listener);
    let (breaker_only, listener) = recorder();
    registry.subscribe_to::<EventBreaker>(listener);

    assert_eq!(registry.scope(slow_lookup()).await.unwrap(), "cached");
    assert_eq!(registry.scope(slow_lookup()).await.unwrap(), "cached");
    registry.scope(limited()).await.unwrap();
    registry.scope(limited()).await.unwrap_err();

    let timed_out = Event::TimedOut {
        spec: "EventTimeout",
        path: "telemetry.events.timeout",
        after: Duration::from_secs(1),
    };
    let opened = Event::StateTransition {
        spec: "EventBreaker",
        path: "telemetry.events.breaker",
        from: State::Closed,
        to: State::Open,
        key: None,
    };
    let expected = vec![
        timed_out.clone(),
        Event::RetryScheduled {
            spec: "EventRetry",
            path: "telemetry.events.retry",
            retry: 1,
            delay: Duration::from_millis(10),
        },
        timed_out,
        Event::RetryExhausted {
            spec: "EventRetry",
            path: "telemetry.events.retry",
            calls: 2,
            reason: StoppedBy::Attempts,
        },
        opened.clone(),
        Event::FallbackTaken {
            function: "slow_lookup",
        },
        Event::Rejected {
            spec: "EventBreaker",
            path: "telemetry.events.breaker",
            kind: SpecKind::CIRCUIT_BREAKER,
            retry_after: Some(Duration::from_secs(1)),
            key: None,
        },
        Event::FallbackTaken {
            function: "slow_lookup",
        },
        Event::Rejected {
            spec: "EventRate",
            path: "telemetry.events.rate",
            kind: SpecKind::RATE_LIMITER,
            retry_after: Some(Duration::from_secs(1)),
            key: None,
        },
    ];
    assert_eq!(*all.lock().unwrap(), expected);
    assert_eq!(
        *breaker_only.lock().unwrap(),
        [expected[4].clone(), expected[6].clone()]
    );
}

#[tokio::test(start_paused = true)]
async fn an_unsubscribed_listener_hears_nothing_more() {
    let registry = registry::<EventRate>(table([
        ("limit_for_period", int(1)),
        ("limit_refresh_period", s("1h")),
    ]));
    let (heard, listener) = recorder();
    let subscription = registry.subscribe(listener);
    registry.scope(limited()).await.unwrap();
    registry.scope(limited()).await.unwrap_err();
    assert_eq!(heard.lock().unwrap().len(), 1, "the rejection");
    assert!(registry.unsubscribe(subscription));
    assert!(!registry.unsubscribe(subscription), "only once");
    registry.scope(limited()).await.unwrap_err();
    assert_eq!(heard.lock().unwrap().len(), 1, "nothing after unsubscribe");
}

#[tokio::test(start_paused = true)]
async fn another_registrys_subscription_stops_nothing() {
    let section = || {
        table([
            ("limit_for_period", int(1)),
            ("limit_refresh_period", s("1h")),
        ])
    };
    let (a, b) = (
        registry::<EventRate>(section()),
        registry::<EventRate>(section()),
    );
    let (heard_a, listener_a) = recorder();
    let (heard_b, listener_b) = recorder();
    let of_a = a.subscribe(listener_a);
    let _of_b = b.subscribe(listener_b);
    assert!(!b.unsubscribe(of_a), "`of_a` is a's");
    b.scope(limited()).await.unwrap();
    b.scope(limited()).await.unwrap_err();
    assert_eq!(
        heard_b.lock().unwrap().len(),
        1,
        "b's listener still hears b"
    );
    assert!(heard_a.lock().unwrap().is_empty());
    assert!(a.unsubscribe(of_a));
}

#[derive(ConcurrencyLimitSpec)]
#[spec("telemetry.handles.places")]
struct HandlePlaces;

#[tokio::test]
async fn a_handles_try_acquire_that_finds_no_place_counts_as_a_rejection() {
    let meters = Meters::default();
    let registry = metrics::with_local_recorder(&meters, || {
        registry::<HandlePlaces>(metrics_on(table([("limit", int(1))])))
    });
    let (heard, listener) = recorder();
    let _ = registry.subscribe(listener);
    let handle = registry.sync_scope(HandlePlaces::get).unwrap();
    let held = handle.try_acquire().expect("a free place");
    assert!(handle.try_acquire().is_none());
    assert!(handle.try_acquire().is_none());
    drop(held);
    let rejected = meters.counter(
        "resilient_calls_total",
        &[
            ("spec", "HandlePlaces"),
            ("path", "telemetry.handles.places"),
            ("kind", "concurrency_limit"),
            ("outcome", "rejected"),
        ],
    );
    assert_eq!(rejected, Some(2));
    assert_eq!(heard.lock().unwrap().len(), 2, "two Rejected events");
}

#[derive(RetrySpec)]
#[spec("telemetry.fallback.retry")]
struct FallbackRetry;

#[fallback(method = "cached()")]
#[retryable(FallbackRetry)]
async fn answered_by_the_fallback() -> Result<&'static str, StoreError> {
    Err(StoreError::Unavailable)
}

#[tokio::test(start_paused = true)]
async fn fallbacks_taken_are_counted_under_the_global_metrics_switch() {
    let meters = Meters::default();
    let sections = |metrics: bool| {
        root(vec![
            (
                "resilient.telemetry",
                table([("metrics", table([("enabled", Value::Bool(metrics))]))]),
            ),
            ("telemetry.fallback.retry", retry_section()),
        ])
    };
    let registry = metrics::with_local_recorder(&meters, || {
        Registry::builder()
            .spec::<FallbackRetry>()
            .build(&sections(false))
            .unwrap()
    });
    let taken = || {
        meters.counter(
            "resilient_fallbacks_total",
            &[("function", "answered_by_the_fallback")],
        )
    };
    // The counter is registered where the fallback is taken: with the
    // recorder in use there (the test's, as an application's global one).
    let _recorder = metrics::set_default_local_recorder(&meters);
    let call = || registry.scope(answered_by_the_fallback());
    assert_eq!(call().await.unwrap(), "cached");
    assert_eq!(taken(), None, "metrics off");
    registry.reload(&sections(true)).unwrap();
    assert_eq!(call().await.unwrap(), "cached");
    assert_eq!(call().await.unwrap(), "cached");
    assert_eq!(taken(), Some(2));
}

// --- snapshot ---------------------------------------------------------------

#[derive(RetrySpec)]
#[spec("telemetry.snapshot.retry")]
struct SnapRetry;

#[derive(CircuitBreakerSpec)]
#[spec("telemetry.snapshot.breaker")]
struct SnapBreaker;

#[derive(ConcurrencyLimitSpec)]
#[spec("telemetry.snapshot.places")]
struct SnapPlaces;

#[test]
fn the_snapshot_lists_every_spec_with_its_state_counts_places_and_tokens() {
    let retry = with(
        retry_section(),
        "retry_budget",
        table([("tokens_max", int(20)), ("tokens_initial", int(5))]),
    );
    let registry = build(
        Registry::builder()
            .spec::<SnapRetry>()
            .spec::<SnapBreaker>()
            .spec::<SnapPlaces>(),
        vec![
            ("telemetry.snapshot.retry", retry),
            (
                "telemetry.snapshot.breaker",
                with(breaker_section(), "minimum_required_calls", int(1)),
            ),
            ("telemetry.snapshot.places", table([("limit", int(3))])),
        ],
    );
    let breaker = registry.sync_scope(SnapBreaker::get).unwrap();
    breaker.try_acquire().expect("closed").success();
    let places = registry.sync_scope(SnapPlaces::get).unwrap();
    let _held = places.try_acquire().expect("a free place");

    let snapshot = registry.snapshot();
    let paths: Vec<&str> = snapshot.specs.iter().map(|s| s.path).collect();
    assert_eq!(
        paths,
        [
            "telemetry.snapshot.breaker",
            "telemetry.snapshot.places",
            "telemetry.snapshot.retry"
        ]
    );
    let [b, p, r] = &snapshot.specs[..] else {
        unreachable!()
    };
    assert_eq!((b.spec, b.kind), ("SnapBreaker", SpecKind::CIRCUIT_BREAKER));
    let status = b
        .status::<circuit_breaker::Metrics>()
        .expect("a breaker's metrics");
    assert_eq!(status.state, State::Closed);
    assert_eq!((status.window.total, status.window.failures), (1, 0));
    assert_eq!(status.failure_rate, Some(0));
    let settings = b
        .settings::<circuit_breaker::CircuitBreakerSettings>()
        .expect("a breaker's settings");
    assert_eq!(settings.minimum_required_calls, 1);
    let places = p.status::<concurrency::Places>().expect("a limit's places");
    assert_eq!((places.permits_in_use, places.permits_limit), (1, 3));
    assert!(p.status::<circuit_breaker::Metrics>().is_none());
    let budget = r.status::<retry::BudgetTokens>().expect("a budget");
    assert_eq!(budget.budget_tokens, 5.0);
    assert_eq!(
        r.settings::<retry::RetrySettings>().map(|s| s.attempts),
        Some(2)
    );
}
