//! Telemetry under concurrent callers: rejections counted by metrics and
//! logs on two worker threads. In a process of its own, since its subscriber
//! is the global one (workers are other threads).

#![allow(clippy::expect_used, clippy::unwrap_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::capture::{Capture, Meters};
use support::*;

use std::time::Duration;

use resilient_core::settings::Value;
use resilient_core::{circuit_breakable, CircuitBreakerSpec, Error};
use tracing::Level;

#[derive(CircuitBreakerSpec)]
#[spec("threads.breaker")]
struct Breaker;

#[derive(Debug, thiserror::Error)]
#[error(transparent)]
struct Failed(#[from] Error);

#[circuit_breakable(Breaker)]
async fn call() -> Result<(), Failed> {
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_rejections_are_each_counted_and_summarized_once() {
    let capture = Capture::global();
    let meters = Meters::default();
    let section = table([
        ("failure_rate_threshold", int(100)),
        ("minimum_required_calls", int(1)),
        ("wait_duration_in_open_state", s("1h")),
        ("permitted_calls_in_half_open_state", int(1)),
        ("count_based", table([("window_size", int(1))])),
        (
            "telemetry",
            table([("metrics", table([("enabled", Value::Bool(true))]))]),
        ),
    ]);
    let registry = metrics::with_local_recorder(&meters, || registry::<Breaker>(section));
    registry.sync_scope(Breaker::get).unwrap().force_open();

    const CALLS: usize = 400;
    let tasks: Vec<_> = (0..CALLS)
        .map(|_| {
            let registry = registry.clone();
            tokio::spawn(async move { registry.scope(call()).await })
        })
        .collect();
    tokio::time::timeout(Duration::from_secs(30), async {
        for t in tasks {
            assert!(t.await.unwrap().is_err());
        }
    })
    .await
    .expect("all calls end");

    let rejected = meters.counter(
        "resilient_calls_total",
        &[
            ("spec", "Breaker"),
            ("path", "threads.breaker"),
            ("kind", "circuit_breaker"),
            ("outcome", "rejected"),
        ],
    );
    assert_eq!(rejected, Some(CALLS as u64));
    let target = "resilient::circuit_breaker";
    assert_eq!(capture.at(target, Level::DEBUG).len(), CALLS);
    let summaries: Vec<_> = capture
        .at(target, Level::WARN)
        .into_iter()
        .filter(|l| l.fields.contains_key("rejected"))
        .collect();
    assert_eq!(summaries.len(), 1, "one summary within 10s: {summaries:#?}");
}
