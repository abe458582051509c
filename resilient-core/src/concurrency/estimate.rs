//! The arithmetic of an adaptive limit: from one window's mean latency and
//! the most calls it held at once, the limit for the next window.
//!
//! Nothing here reads a clock or an atomic: [`Estimator::update`] is called
//! by the one thread that closes a window, under the estimator's lock, and
//! the unit tests below drive it window by window.

/// Windows whose mean latencies the baseline is the lowest of: the
/// baseline follows the dependency after this many windows, whatever
/// happened before.
pub(super) const BASELINE_WINDOWS: usize = 10;

/// Windows without a decrease after which a saturated limit is probed
/// lower for one window.
pub(super) const PROBE_AFTER: u32 = 10;

/// What a probe keeps of the limit, for one window. Below `1 / tolerance`
/// for any tolerance up to 1.25, so that the latency seen back at the old
/// limit stands out when the dependency was queueing there.
const PROBE: f64 = 0.8;

/// What a decrease keeps of the limit it aims at, so that the window after
/// it runs just under the knee and measures the baseline there.
const UNDERSHOOT: f64 = 0.9;

/// The most of the limit one decrease keeps at least: a window twice as slow
/// as the baseline or worse halves the limit, no more.
const GRADIENT_FLOOR: f64 = 0.5;

/// The bounds and the tolerance an update works within.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bounds {
    pub(super) min: u32,
    pub(super) max: u32,
    pub(super) tolerance: f64,
}

/// What one window did to the limit, for the log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Why {
    /// Fewer than half the places were used: nothing learnt.
    Idle,
    /// Latency above the baseline times the tolerance: lowered.
    Slower,
    /// Latency did not fall with the last decrease: the baseline was taken
    /// again from this window, the limit kept.
    Rebased,
    /// Saturated and calm for a while: lowered for one window, to measure
    /// the baseline below the limit.
    Probe,
    /// Latency within the tolerance and the limit used: raised.
    Grew,
}

impl Why {
    /// The reason, in words.
    pub(super) fn words(self) -> &'static str {
        match self {
            Why::Idle => "the limit was not used",
            Why::Slower => "latency above the baseline times `tolerance`",
            Why::Rebased => {
                "latency did not fall with the limit: the baseline is taken again from this window"
            }
            Why::Probe => "probing below the limit for the baseline",
            Why::Grew => "latency within `tolerance` of the baseline",
        }
    }
}

/// An adaptive limit's state between windows.
#[derive(Debug, Clone)]
pub(super) struct Estimator {
    /// The limit, unrounded: [`limit`](Self::limit) publishes it rounded
    /// down.
    limit: f64,
    /// The mean latencies (µs) of the last windows, oldest overwritten
    /// first.
    means: [u64; BASELINE_WINDOWS],
    /// How many of `means` hold a window.
    held: usize,
    /// Where the next mean goes.
    next: usize,
    /// Where the last decrease found the knee (the limit at which latency
    /// would have been the baseline): growth is quick below it and careful
    /// above it. `None` before any decrease.
    knee: Option<f64>,
    /// The previous window's mean (µs), unless it was censored.
    last_mean: Option<u64>,
    /// The last window's mean (µs).
    latest: Option<u64>,
    /// The share of the limit the previous update took off, if it lowered
    /// the limit.
    last_cut: Option<f64>,
    /// Windows since the limit last came down.
    calm: u32,
    /// Windows closed so far.
    windows: u64,
}

impl Estimator {
    /// A limit starting at `initial`, with no window measured.
    pub(super) fn new(initial: u32) -> Self {
        Self {
            limit: f64::from(initial),
            means: [0; BASELINE_WINDOWS],
            held: 0,
            next: 0,
            knee: None,
            last_mean: None,
            latest: None,
            last_cut: None,
            calm: 0,
            windows: 0,
        }
    }

    /// The limit in force, as a whole number of calls.
    pub(super) fn limit(&self) -> u32 {
        // In 1..=536870911 by the bounds every update keeps: exact.
        self.limit.floor() as u32
    }

    /// Keeps the limit and the latencies measured, within new bounds.
    pub(super) fn clamp(&mut self, bounds: Bounds) {
        self.limit = self
            .limit
            .clamp(f64::from(bounds.min), f64::from(bounds.max));
    }

    /// The lowest mean latency of the last windows (µs), if any closed.
    pub(super) fn baseline(&self) -> Option<u64> {
        self.means[..self.held].iter().copied().min()
    }

    /// The last window's mean latency (µs), if any closed.
    pub(super) fn latency(&self) -> Option<u64> {
        self.latest
    }

    /// Windows closed so far.
    pub(super) fn windows(&self) -> u64 {
        self.windows
    }

    /// The latency (µs) above which a call that did not succeed counts as
    /// a sample: none counts before the first window has closed.
    pub(super) fn slow(&self, tolerance: f64) -> u64 {
        match self.baseline() {
            // Saturating: `as` from f64 clamps.
            Some(b) => (b as f64 * tolerance) as u64,
            None => u64::MAX,
        }
    }

    fn push(&mut self, mean: u64) {
        self.means[self.next] = mean;
        self.next = (self.next + 1) % BASELINE_WINDOWS;
        self.held = (self.held + 1).min(BASELINE_WINDOWS);
    }

    /// Forgets every mean but `mean`.
    fn rebase(&mut self, mean: u64) {
        self.means = [0; BASELINE_WINDOWS];
        self.means[0] = mean;
        self.held = 1;
        self.next = 1;
    }

    /// Lowers the limit to `to` (not below `min`), remembering the share
    /// taken off.
    fn lower(&mut self, to: f64, bounds: Bounds) {
        let new = to.max(f64::from(bounds.min));
        if new < self.limit {
            self.last_cut = Some(1.0 - new / self.limit);
        }
        self.limit = new;
        self.calm = 0;
    }

    /// Takes in one window: its mean latency (µs), the most calls it held
    /// at once, and whether most of its samples were calls that failed or
    /// were dropped (their time is a lower bound of their latency, cut short
    /// by the failure or the caller).
    pub(super) fn update(&mut self, mean: u64, peak: u32, censored: bool, bounds: Bounds) -> Why {
        let mean = mean.max(1);
        self.push(mean);
        self.windows += 1;
        self.latest = Some(mean);
        // Whether latency answered a decrease is only read from two windows
        // of whole latencies: a caller's timeout makes a slow dependency
        // look equally slow at any concurrency.
        let last_mean = std::mem::replace(&mut self.last_mean, (!censored).then_some(mean));
        let last_cut = self.last_cut.take();
        let limit = self.limit;
        // A limit that was not used says nothing about itself, in either
        // direction; the window's latency still counts towards the
        // baseline (a lightly loaded dependency shows its best).
        if f64::from(peak) < limit / 2.0 {
            return Why::Idle;
        }
        let baseline = self.baseline().unwrap_or(mean) as f64;
        let mean_f = mean as f64;
        if mean_f > baseline * bounds.tolerance {
            let at_min = limit <= f64::from(bounds.min);
            let unanswered = match (last_cut, last_mean) {
                (Some(cut), Some(last)) => mean_f > last as f64 * (1.0 - cut / 2.0),
                _ => false,
            };
            if !censored && (at_min || unanswered) {
                // Lowering the limit did not lower latency (or cannot): the
                // latency is not this limiter's queue. Measure from here.
                self.rebase(mean);
                self.knee = Some(limit);
                self.calm = 0;
                return Why::Rebased;
            }
            // Aimed from the calls that ran (at most the limit): the
            // concurrency at which they would have taken the baseline.
            let used = f64::from(peak).min(limit);
            let gradient = baseline / mean_f;
            self.knee = Some(used * gradient);
            self.lower(used * gradient.max(GRADIENT_FLOOR) * UNDERSHOOT, bounds);
            return Why::Slower;
        }
        self.calm = self.calm.saturating_add(1);
        if self.calm >= PROBE_AFTER && f64::from(peak) >= limit.floor() && self.limit() > bounds.min
        {
            self.knee = Some(limit);
            self.lower(limit * PROBE, bounds);
            return Why::Probe;
        }
        let root = limit.sqrt().max(1.0);
        let step = match self.knee {
            // Back up to the knee last found, quickly.
            Some(knee) if limit < knee => root.min((knee - limit).max(1.0)),
            // Past it, as far as latency leaves room: calls beyond the knee
            // queue, so latency grows with them, and the calls in flight
            // times `tolerance · baseline / latency` is where it would
            // reach the tolerance. At least one call, so that a dependency
            // that grew is found.
            Some(_) => {
                let used = f64::from(peak).min(limit);
                let room = used * bounds.tolerance * baseline / mean_f - limit;
                room.clamp(1.0, root)
            }
            // Nothing learnt yet: Envoy's headroom, the square root.
            None => root,
        };
        self.limit = (limit + step).min(f64::from(bounds.max));
        Why::Grew
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: Bounds = Bounds {
        min: 1,
        max: 1000,
        tolerance: 1.1,
    };

    /// A dependency of `k` workers, 10 ms per call: beyond `k` calls at once
    /// they queue, and latency grows with the calls.
    fn latency(calls: u32, k: u32) -> u64 {
        10_000 * u64::from(calls.max(k)) / u64::from(k)
    }

    /// Runs `windows` saturated windows against `k` workers; the limits.
    fn run(e: &mut Estimator, k: u32, windows: usize) -> Vec<u32> {
        (0..windows)
            .map(|_| {
                let calls = e.limit();
                e.update(latency(calls, k), calls, false, BOUNDS);
                e.limit()
            })
            .collect()
    }

    #[test]
    fn from_below_settles_around_the_knee() {
        let mut e = Estimator::new(1);
        let limits = run(&mut e, 50, 100);
        let settled = &limits[50..];
        assert!(settled.iter().all(|l| (40..=60).contains(l)), "{limits:?}");
    }

    #[test]
    fn from_above_comes_down_to_the_knee() {
        let mut e = Estimator::new(200);
        let limits = run(&mut e, 50, 150);
        let settled = &limits[100..];
        assert!(settled.iter().all(|l| (40..=60).contains(l)), "{limits:?}");
    }

    #[test]
    fn a_latency_shift_is_rebased_not_driven_to_the_minimum() {
        let mut e = Estimator::new(1);
        run(&mut e, 50, 60);
        // Every call now takes three times as long, at any concurrency.
        let limits: Vec<u32> = (0..60)
            .map(|_| {
                let calls = e.limit();
                e.update(3 * latency(calls, 50), calls, false, BOUNDS);
                e.limit()
            })
            .collect();
        assert!(limits.iter().all(|l| *l >= 20), "{limits:?}");
        assert!(
            limits[40..].iter().all(|l| (40..=60).contains(l)),
            "{limits:?}"
        );
    }

    #[test]
    fn windows_cut_short_by_timeouts_keep_the_limit_coming_down() {
        let mut e = Estimator::new(1);
        run(&mut e, 50, 60);
        // The dependency now serves 5 at once, and callers give up after
        // 50 ms: every window reads 50 ms, whatever the limit, until the
        // limit is near 5. No new baseline is taken from such windows.
        let limits: Vec<u32> = (0..20)
            .map(|_| {
                let calls = e.limit();
                let whole = latency(calls, 5);
                let (mean, censored) = if whole > 50_000 {
                    (50_000, true)
                } else {
                    (whole, false)
                };
                e.update(mean, calls, censored, BOUNDS);
                e.limit()
            })
            .collect();
        assert!(
            limits[10..].iter().all(|l| (4..=7).contains(l)),
            "{limits:?}"
        );
        assert_eq!(e.baseline(), Some(10_000));
    }

    #[test]
    fn an_idle_window_changes_nothing() {
        let mut e = Estimator::new(40);
        assert_eq!(e.update(100_000, 3, false, BOUNDS), Why::Idle);
        assert_eq!(e.update(1_000, 3, false, BOUNDS), Why::Idle);
        assert_eq!(e.limit(), 40);
        assert_eq!(e.baseline(), Some(1_000));
    }

    #[test]
    fn a_decrease_takes_at_most_half_and_keeps_the_minimum() {
        let bounds = Bounds { min: 30, ..BOUNDS };
        let mut e = Estimator::new(100);
        assert_eq!(e.update(1_000, 100, false, bounds), Why::Grew);
        assert_eq!(e.limit(), 110, "the square root of 100");
        assert_eq!(e.update(100_000, 110, false, bounds), Why::Slower);
        assert_eq!(e.limit(), 49, "half of 110, then the undershoot");
        assert_eq!(e.update(1_000, 49, false, bounds), Why::Grew);
        let mut e = Estimator::new(40);
        e.update(1_000, 40, false, bounds);
        e.update(100_000, 40, false, bounds);
        assert_eq!(e.limit(), 30, "not below `min`");
    }

    #[test]
    fn growth_stops_at_max() {
        let bounds = Bounds { max: 7, ..BOUNDS };
        let mut e = Estimator::new(1);
        for _ in 0..20 {
            let calls = e.limit();
            e.update(1_000, calls, false, bounds);
        }
        assert!(e.limit() <= 7);
        assert!(e.limit() >= 5, "{}", e.limit());
    }

    #[test]
    fn huge_latencies_and_limits_stay_finite() {
        let bounds = Bounds {
            min: 1,
            max: 536_870_911,
            tolerance: 10.0,
        };
        let mut e = Estimator::new(536_870_911);
        for mean in [u64::MAX, 1, u64::MAX, 0, u64::MAX / 3] {
            e.update(mean, u32::MAX, false, bounds);
            assert!((1..=536_870_911).contains(&e.limit()));
        }
        assert!(e.slow(10.0) >= 1);
    }
}
