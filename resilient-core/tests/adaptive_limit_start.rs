//! Where an adaptive limit comes to rest does not depend on where it
//! started: against the same dependency, a limit started far below its
//! capacity and one started far above it end in the same band, with the
//! same baseline (the dependency's latency without a queue, never one
//! measured while calls queued).
//!
//! The dependency has 15 workers and answers in 20 ms while at most 15
//! calls run; each call beyond adds a share of that to every call's
//! latency: 2.5 % (a gentle queue: 30 calls take 1.4 times as long, so a
//! step down from 30 looks much like one from 15) or 20 % (a steep one).
//! 80 callers keep a `block` limit full, `window = "200ms"`, the default
//! `tolerance` (1.1). Each run lasts 150 windows on tokio's paused clock;
//! the last 75 are the resting band. The figures are printed (`cargo test
//! --test adaptive_limit_start -- --nocapture`).

mod support;
use support::*;

mod adaptive_support;
use adaptive_support::*;

use std::ops::RangeInclusive;
use std::time::Duration;

/// The dependency's workers.
const K: u32 = 15;
/// Its latency without a queue.
const NO_QUEUE: Duration = Duration::from_millis(20);
const CALLERS: usize = 80;
const WINDOW_LEN: Duration = Duration::from_millis(200);
const WINDOWS: usize = 150;
/// The windows before the resting band.
const SETTLING: usize = 75;
/// The baseline a limit must learn: the latency without a queue, within
/// tokio's timer (whole milliseconds).
const BASELINE: RangeInclusive<Duration> = NO_QUEUE..=Duration::from_millis(21);

/// Where one run came to rest, and what the dependency saw meanwhile.
#[derive(Debug)]
struct Rest {
    initial: u32,
    /// The lowest, highest and mean limit of the resting band.
    band: (u32, u32, f64),
    /// The baseline the limit learnt, at the end.
    baseline: Duration,
    /// The most calls the dependency saw at once in the resting band.
    peak: u32,
    /// The calls that reached the dependency in the resting band, and how
    /// many of them found all 15 workers busy.
    calls: u64,
    queued: u64,
    /// The mean latency of the dependency's calls in the resting band.
    latency: Duration,
}

impl Rest {
    /// The share of the resting band's calls that queued, in percent.
    fn queued_percent(&self) -> f64 {
        100.0 * self.queued as f64 / self.calls.max(1) as f64
    }
}

/// A `block` limit started at `initial` against the dependency whose
/// latency grows `percent` % per call beyond its 15 workers.
async fn rest(initial: u32, percent: f64) -> Result<Rest, Box<dyn std::error::Error>> {
    let section = with(
        adaptive([
            ("max", int(100)),
            ("initial", int(i128::from(initial))),
            ("window", s("200ms")),
        ]),
        "policy",
        s("block"),
    );
    let r = registry::<Reviews>(section);
    let _default = r.set_default();
    let h = handle(&r)?;
    let dep = Dependency::growing(K, NO_QUEUE, percent);
    let load = Load::start(&dep, CALLERS);
    let mut limits = watch_every(&h, WINDOW_LEN, SETTLING).await;
    dep.reset_counts();
    let band = watch_every(&h, WINDOW_LEN, WINDOWS - SETTLING).await;
    let (queued, calls) = dep.queued();
    let (peak, latency) = (dep.peak(), dep.mean_latency());
    let counts = load.stop().await?;
    limits.extend_from_slice(&band);
    let rest = Rest {
        initial,
        band: spread(&band),
        baseline: status(&r)?.adaptive.ok_or("measured")?.baseline,
        peak,
        calls,
        queued,
        latency,
    };
    let (lo, hi, mean) = rest.band;
    println!(
        "{percent} % per call, from {initial}: rests at {lo}..={hi} (mean {mean:.1}), baseline {:?}; the dependency saw at most {peak} at once, {queued} of {calls} calls queued ({:.0} %), mean latency {latency:?}; {counts:?}; limits {limits:?}",
        rest.baseline,
        rest.queued_percent(),
    );
    assert_eq!(counts.rejected, 0, "`block` rejects nothing");
    assert_eq!(h.in_use(), 0, "every place came back");
    Ok(rest)
}

/// Checks that the runs from 2 and from 60 rest with a mean limit in
/// `band` and the baseline in [`BASELINE`], that the dependency never saw
/// more calls than the band's top allows nor a mean latency above the
/// tolerance, and that both runs end in the same band: means within one
/// call, the same lowest and highest limits, queued shares within 5
/// points.
fn same_band(low: &Rest, high: &Rest, band: RangeInclusive<f64>) -> TestResult {
    for rest in [low, high] {
        let from = rest.initial;
        let (lo, hi, mean) = rest.band;
        if !band.contains(&mean) {
            return Err(format!("from {from}: mean limit {mean:.1}, not in {band:?}").into());
        }
        if !BASELINE.contains(&rest.baseline) {
            return Err(format!(
                "from {from}: baseline {:?}, not in {BASELINE:?}: learnt while calls queued",
                rest.baseline
            )
            .into());
        }
        if rest.peak > hi {
            return Err(format!(
                "from {from}: the dependency saw {} calls at once, the limit rested at {lo}..={hi}",
                rest.peak
            )
            .into());
        }
        if rest.latency > NO_QUEUE.mul_f64(1.1) {
            return Err(format!(
                "from {from}: the dependency's calls took {:?} on average, above `tolerance` times {NO_QUEUE:?}",
                rest.latency
            )
            .into());
        }
    }
    if (low.band.2 - high.band.2).abs() > 1.0
        || (low.band.0, low.band.1) != (high.band.0, high.band.1)
        || (low.queued_percent() - high.queued_percent()).abs() > 5.0
    {
        return Err(format!(
            "the resting band depends on the start: {low:?} from 2, {high:?} from 60"
        )
        .into());
    }
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_gentle_queue_rests_in_the_same_band_from_below_and_from_above() -> TestResult {
    // At most 19 calls keep latency within the tolerance (19 take 22 ms).
    let low = rest(2, 2.5).await?;
    let high = rest(60, 2.5).await?;
    same_band(&low, &high, 16.0..=20.0)
}

#[tokio::test(start_paused = true)]
async fn a_steep_queue_rests_in_the_same_band_from_below_and_from_above() -> TestResult {
    // 15 calls take 20 ms, 16 take 24 ms: past the tolerance at once.
    let low = rest(2, 20.0).await?;
    let high = rest(60, 20.0).await?;
    same_band(&low, &high, 13.0..=16.0)
}
