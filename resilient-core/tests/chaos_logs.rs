//! Fault injection as the telemetry tells it: each injection counted by
//! fault in a metric, logged once at DEBUG, and shown in the snapshot. A
//! test binary of its own, as `reload_logs.rs`: a test of `chaos.rs` that
//! injects without a subscriber could register the DEBUG line's callsite
//! first, while this one's subscriber is being set, and its lines would be
//! lost (seen: 55 of 150 read in one run).

mod support;
use support::*;

use resilient_core::chaos::ChaosCounts;
use resilient_core::{chaos, ChaosSpec, Error, Registry};

type TestResult = Result<(), Box<dyn std::error::Error>>;

#[derive(Debug, thiserror::Error)]
enum TestError {
    #[error(transparent)]
    Resilience(#[from] Error),
}

fn counts<S: ChaosSpec>(registry: &Registry) -> Result<ChaosCounts, Error> {
    registry.sync_scope(|| S::get().map(|h| h.counts()))
}

// --------------------------------------------------------------- telemetry

#[derive(ChaosSpec)]
#[spec("chaos.observed")]
struct Observed;

#[chaos(Observed)]
async fn observed() -> Result<(), TestError> {
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn each_injection_is_counted_by_fault_and_logged_at_debug() -> TestResult {
    let meters = support::capture::Meters::default();
    let capture = support::capture::Capture::default();
    let _subscriber = tracing::subscriber::set_default(capture.clone());
    let section = table([
        ("enabled", boolean(true)),
        ("latency_rate", float(0.5)),
        ("latency", s("10ms")),
        ("error_rate", float(0.25)),
        ("seed", int(5)),
        (
            "telemetry",
            table([("metrics", table([("enabled", boolean(true))]))]),
        ),
    ]);
    let registry = metrics::with_local_recorder(&meters, || registry::<Observed>(section));
    for _ in 0..200 {
        let _ = registry.scope(observed()).await;
    }
    let c = counts::<Observed>(&registry)?;
    assert_eq!(c.calls, 200);
    assert!(c.latency_injected > 0 && c.errors_injected > 0, "{c:?}");
    let labels = |fault| {
        [
            ("spec", "Observed"),
            ("path", "chaos.observed"),
            ("fault", fault),
        ]
    };
    let counter = |fault| meters.counter("resilient_chaos_injected_total", &labels(fault));
    assert_eq!(counter("latency"), Some(c.latency_injected));
    assert_eq!(counter("error"), Some(c.errors_injected));
    let lines = capture.at("resilient::chaos", tracing::Level::DEBUG);
    assert_eq!(
        lines.len() as u64,
        c.latency_injected + c.errors_injected,
        "one DEBUG line per injection"
    );
    let errors = lines
        .iter()
        .filter(|l| l.fields["fault"] == "error")
        .count();
    assert_eq!(errors as u64, c.errors_injected);
    // The snapshot shows the same counts as the handle.
    let snapshot = registry.snapshot();
    let shown = snapshot
        .specs
        .iter()
        .find_map(|s| s.status::<ChaosCounts>())
        .ok_or("no chaos counts in the snapshot")?;
    assert_eq!(*shown, c);
    Ok(())
}
