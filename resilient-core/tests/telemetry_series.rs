//! The zero-series policy: the series a dashboard's ratios and alerts read
//! are registered when the registry is built (exported at 0 from the
//! start, as Prometheus's "avoid missing metrics" asks), the others when
//! they first happen, once each.

#![allow(clippy::expect_used, clippy::unwrap_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::capture::Meters;
use support::*;

use std::time::Duration;

use resilient_core::{
    circuit_breakable, retryable, timeout, CircuitBreakerSpec, Error, Registry, RetrySpec, Spec,
    TimeoutSpec,
};

#[derive(Debug, thiserror::Error)]
enum StoreError {
    #[error("store unavailable")]
    Unavailable,
    #[error(transparent)]
    Resilience(#[from] Error),
}

#[derive(CircuitBreakerSpec)]
#[spec("series.breaker")]
struct Breaker;

#[derive(RetrySpec)]
#[spec("series.retry")]
struct Retry;

#[derive(TimeoutSpec)]
#[spec("series.timeout")]
struct Timeout;

#[circuit_breakable(Breaker)]
#[retryable(Retry)]
#[timeout(Timeout)]
async fn call(fail: bool, hang: bool) -> Result<(), StoreError> {
    if hang {
        std::future::pending::<()>().await;
    }
    if fail {
        Err(StoreError::Unavailable)
    } else {
        Ok(())
    }
}

fn series(meters: &Meters) -> Vec<String> {
    let mut all: Vec<String> = meters
        .series()
        .into_iter()
        .filter(|s| !s.starts_with("resilient_call_duration_seconds"))
        .map(|mut s| {
            // Without the spec's path, for a shorter list.
            for path in ["series.breaker", "series.retry", "series.timeout"] {
                s = s
                    .replace(&format!("(\"path\", \"{path}\"), "), "")
                    .replace(&format!(", (\"path\", \"{path}\")"), "");
            }
            s
        })
        .collect();
    all.sort();
    all
}

#[tokio::test(start_paused = true)]
async fn the_series_a_dashboard_needs_exist_at_once_and_the_others_when_they_happen() {
    let meters = Meters::default();
    let _recorder = metrics::set_default_local_recorder(&meters);
    let r = build(
        Registry::builder()
            .spec::<Breaker>()
            .spec::<Retry>()
            .spec::<Timeout>(),
        vec![
            (Breaker::PATH, metered(breaker_section(100, 2, "1s", 2))),
            (
                Retry::PATH,
                metered(table([("delay", s("1ms")), ("attempts", int(1))])),
            ),
            (Timeout::PATH, metered(table([("duration", s("1s"))]))),
        ],
    );
    let at_start = series(&meters);
    assert_eq!(
        at_start,
        [
            "resilient_calls_total[(\"kind\", \"circuit_breaker\"), (\"outcome\", \"failure\"), (\"spec\", \"Breaker\")]",
            "resilient_calls_total[(\"kind\", \"circuit_breaker\"), (\"outcome\", \"rejected\"), (\"spec\", \"Breaker\")]",
            "resilient_calls_total[(\"kind\", \"circuit_breaker\"), (\"outcome\", \"success\"), (\"spec\", \"Breaker\")]",
            "resilient_calls_total[(\"kind\", \"retry\"), (\"outcome\", \"failure\"), (\"spec\", \"Retry\")]",
            "resilient_calls_total[(\"kind\", \"retry\"), (\"outcome\", \"success\"), (\"spec\", \"Retry\")]",
            "resilient_calls_total[(\"kind\", \"timeout\"), (\"outcome\", \"failure\"), (\"spec\", \"Timeout\")]",
            "resilient_calls_total[(\"kind\", \"timeout\"), (\"outcome\", \"success\"), (\"spec\", \"Timeout\")]",
            "resilient_calls_total[(\"kind\", \"timeout\"), (\"outcome\", \"timed_out\"), (\"spec\", \"Timeout\")]",
            "resilient_circuit_breaker_state[(\"spec\", \"Breaker\")]",
            "resilient_circuit_breaker_transitions_total[(\"spec\", \"Breaker\"), (\"to\", \"open\")]",
            "resilient_retries_total[(\"spec\", \"Retry\")]",
            "resilient_retry_exhausted_total[(\"reason\", \"attempts\"), (\"spec\", \"Retry\")]",
        ],
        "only what a dashboard reads, at 0"
    );

    // Two failures open the breaker; after its wait, a success closes it.
    r.scope(call(true, false)).await.unwrap_err();
    r.scope(call(true, false)).await.unwrap_err();
    tokio::time::advance(Duration::from_secs(1)).await;
    r.scope(call(false, false)).await.unwrap();
    // A call dropped while it waits: cancelled, for each spec it entered.
    let dropped = tokio::time::timeout(Duration::from_millis(10), r.scope(call(false, true))).await;
    assert!(dropped.is_err());
    let now = series(&meters);
    let appeared: Vec<&String> = now.iter().filter(|s| !at_start.contains(s)).collect();
    assert_eq!(
        appeared,
        [
            "resilient_calls_total[(\"kind\", \"circuit_breaker\"), (\"outcome\", \"cancelled\"), (\"spec\", \"Breaker\")]",
            "resilient_calls_total[(\"kind\", \"retry\"), (\"outcome\", \"cancelled\"), (\"spec\", \"Retry\")]",
            "resilient_calls_total[(\"kind\", \"timeout\"), (\"outcome\", \"cancelled\"), (\"spec\", \"Timeout\")]",
            "resilient_circuit_breaker_transitions_total[(\"spec\", \"Breaker\"), (\"to\", \"closed\")]",
            "resilient_circuit_breaker_transitions_total[(\"spec\", \"Breaker\"), (\"to\", \"half_open\")]",
        ],
        "each when it first happened"
    );
    let transitions = |to| {
        meters.counter(
            "resilient_circuit_breaker_transitions_total",
            &[("spec", "Breaker"), ("path", "series.breaker"), ("to", to)],
        )
    };
    assert_eq!(
        (
            transitions("open"),
            transitions("half_open"),
            transitions("closed")
        ),
        (Some(1), Some(1), Some(1)),
        "the first occurrence counted too"
    );
}
