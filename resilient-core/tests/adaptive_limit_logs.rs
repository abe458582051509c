//! The adaptive limit's telemetry: the limit in the snapshot, its gauge,
//! and a DEBUG line per change. A test binary of its own, so that no test
//! without a subscriber registers the log line's callsite first.

mod support;
use support::capture::{Capture, Meters};
use support::*;

mod adaptive_support;
use adaptive_support::*;

use resilient_core::concurrency::adaptive::Measured;
use resilient_core::settings::Value;

#[tokio::test(start_paused = true)]
async fn the_limit_is_in_the_snapshot_in_a_gauge_and_in_a_debug_line_per_change() -> TestResult {
    let meters = Meters::default();
    let capture = Capture::default();
    let _subscriber = tracing::subscriber::set_default(capture.clone());
    let metered = with(
        section(1, 400),
        "telemetry",
        table([("metrics", table([("enabled", Value::Bool(true))]))]),
    );
    let r = metrics::with_local_recorder(&meters, || registry::<Reviews>(metered));
    let _default = r.set_default();
    let h = handle(&r)?;
    let labels = [("spec", "Reviews"), ("path", "adaptive.reviews")];
    assert_eq!(
        meters.gauge("resilient_concurrency_limit", &labels),
        Some(1.0)
    );
    let dep = Dependency::new(40, BASE);
    let load = Load::start(&dep, 120);
    let limits = watch(&h, 40).await;
    let counts = load.stop().await?;
    let places = status(&r)?;
    assert_eq!(places.permits_limit, h.limit());
    assert_eq!(places.permits_in_use, 0);
    let measured: Measured = places.adaptive.ok_or("measured")?;
    assert_eq!(measured.baseline, BASE, "the dependency's best");
    assert!(measured.windows >= 30, "{measured:?}");
    assert_eq!(
        meters.gauge("resilient_concurrency_limit", &labels),
        Some(f64::from(h.limit()))
    );
    let lines = capture.at("resilient::concurrency", tracing::Level::DEBUG);
    let changes: Vec<_> = lines
        .iter()
        .filter(|l| l.message.starts_with("adaptive limit "))
        .collect();
    let moves = limits.windows(2).filter(|w| w[0] != w[1]).count();
    println!(
        "telemetry: {counts:?}, {} change lines for {} windows ({moves} moves seen once per window), last: {:?}",
        changes.len(),
        measured.windows,
        changes.last().map(|l| &l.message)
    );
    assert!(changes.len() >= moves, "a line per change");
    assert!(
        (changes.len() as u64) <= measured.windows,
        "at most one line per window, none per call"
    );
    let last = changes.last().ok_or("a change")?;
    assert_eq!(last.fields.get("spec").map(String::as_str), Some("Reviews"));
    assert!(last.fields.contains_key("was") && last.fields.contains_key("limit"));
    Ok(())
}
