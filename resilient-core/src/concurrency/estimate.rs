//! The arithmetic of an adaptive limit: from one window's mean latency and
//! the most calls it held at once, the limit for the next window.
//!
//! Nothing here reads a clock or an atomic: [`Estimator::update`] is called
//! by the one thread that closes a window, under the estimator's lock, and
//! the unit tests below drive it window by window.

/// What a probe step keeps of the calls at once: half. A queue that
/// doubles with the calls shows in the mean latency even when it adds
/// little per call (2.5 % per call beyond 15 workers: 37.5 % from 15 to
/// 30 calls), so that a step that does not make latency fall shows the
/// dependency's latency without a queue, not a gentle queue.
const PROBE_STEP: f64 = 0.5;

/// How many times the calls a baseline was measured from the limit must
/// hold, saturated, for a probe to measure it again, if that window held
/// fewer than [`STEADY_SAMPLES`]: a limit that started low measured its
/// baseline from windows of one or two calls; from four times as many
/// calls, a probe window at half holds twice as many samples.
const REMEASURE: f64 = 4.0;

/// Samples from which a window's mean is taken as steady: the mean of 100
/// calls varies by a tenth of their own spread.
const STEADY_SAMPLES: u64 = 100;

/// What a decrease keeps of the calls at once, at most: a fifth fewer
/// calls, enough to tell from the next window whether the latency was
/// this limiter's queue.
const STEP: f64 = 0.8;

/// What a decrease keeps of the limit it aims at, so that the window after
/// it runs just under the knee.
const UNDERSHOOT: f64 = 0.9;

/// The most of the limit one decrease keeps at least: a window twice as slow
/// as the baseline or worse halves the limit, no more.
const GRADIENT_FLOOR: f64 = 0.5;

/// The most by which a probe step may leave latency lower and still show no
/// queue: half the tolerance, at most this (5 %). Under it, so that the
/// window above is within the tolerance of the baseline found; small, so
/// that a queue is not taken for noise.
const FLAT_MAX: f64 = 0.05;

/// A window whose calls shared the dependency with calls admitted under a
/// higher limit for more than this share of it (about one latency) is not
/// read: the next one is.
const SETTLE_SHARE: u64 = 10;

/// The bounds and the tolerance an update works within.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bounds {
    pub(super) min: u32,
    pub(super) max: u32,
    pub(super) tolerance: f64,
}

impl Bounds {
    /// How much lower latency may be a probe step down and still show that
    /// the calls taken off were not queueing.
    fn flat(&self) -> f64 {
        ((self.tolerance - 1.0) / 2.0).min(FLAT_MAX)
    }

    /// `limit` within `min..=max`.
    fn clamp(&self, limit: f64) -> f64 {
        limit.clamp(f64::from(self.min), f64::from(self.max))
    }
}

/// One window, as it closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Window {
    /// The mean latency of its samples (µs).
    pub(super) mean: u64,
    /// The most calls held at once: from the calls held when it began.
    pub(super) peak: u32,
    /// Whether most of its samples were calls that failed or were dropped
    /// (their time is a lower bound of their latency, cut short by the
    /// failure or the caller).
    pub(super) censored: bool,
    /// How long it lasted (µs).
    pub(super) span: u64,
    /// Its samples.
    pub(super) samples: u64,
}

/// What one window did to the limit, for the log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Why {
    /// Fewer than half the places were used: nothing learnt.
    Idle,
    /// The first window, or one whose calls ran beside calls admitted under
    /// a higher limit for much of it: nothing learnt yet.
    Settling,
    /// Latency above the baseline times the tolerance: lowered.
    Slower,
    /// Latency above the tolerance at `min`, where the limit cannot come
    /// down: the baseline was taken again from this window.
    Rebased,
    /// A step down in search of the baseline (none yet, one that a
    /// decrease did not answer, one a faster window puts in doubt, or one
    /// measured from few calls).
    Probe,
    /// The probe found the baseline (a step down no longer made latency
    /// fall): the limit set from it.
    Measured,
    /// Latency within the tolerance and the limit used: raised.
    Grew,
}

impl Why {
    /// The reason, in words.
    pub(super) fn words(self) -> &'static str {
        match self {
            Why::Idle => "the limit was not used",
            Why::Settling => "the window's calls did not all run under this limit",
            Why::Slower => "latency above the baseline times `tolerance`",
            Why::Rebased => {
                "latency above `tolerance` at `min`: the baseline is taken again from this window"
            }
            Why::Probe => "probing below the limit for the baseline",
            Why::Measured => {
                "latency did not fall with a step down: the baseline is measured there"
            }
            Why::Grew => "latency within `tolerance` of the baseline",
        }
    }

    /// Whether the window measured the baseline again: worth a log line
    /// even if the limit stays.
    pub(super) fn measured(self) -> bool {
        matches!(self, Why::Rebased | Why::Measured)
    }
}

/// A probe under way: where it started, to go back there if the window it
/// started from was within the tolerance of the baseline it finds.
#[derive(Debug, Clone, Copy)]
struct Probe {
    /// The limit before the probe.
    top: f64,
    /// The mean latency (µs) of the window at that limit.
    top_mean: u64,
}

/// An adaptive limit's state between windows.
#[derive(Debug, Clone)]
pub(super) struct Estimator {
    /// The limit, unrounded: [`limit`](Self::limit) publishes it rounded
    /// down.
    limit: f64,
    /// The dependency's latency without a queue (µs): measured by the last
    /// probe (or at `min`, where no probe can step down). `None` before
    /// any window.
    baseline: Option<u64>,
    /// Whether the baseline was measured by a probe (or at the lowest
    /// limit): until then it may hold a queue (the first windows run at
    /// `initial`, which may be above the knee).
    measured: bool,
    /// The calls at once from which the baseline is measured again: a
    /// baseline measured from a window of few samples (a noisy mean) is,
    /// once the limit is [`REMEASURE`] times as high; infinite otherwise.
    remeasure_at: f64,
    /// The previous window, unless it was idle or censored: the calls it
    /// held at once, and its mean latency (µs).
    last: Option<(f64, u64)>,
    /// The probe under way, if any.
    probe: Option<Probe>,
    /// Where the last decrease found the knee (the limit at which latency
    /// would have been the baseline): growth is quick below it and careful
    /// above it. `None` before any decrease.
    knee: Option<f64>,
    /// The last window's mean latency (µs).
    latest: Option<u64>,
    /// Windows closed so far.
    windows: u64,
}

impl Estimator {
    /// A limit starting at `initial`, with no window measured.
    pub(super) fn new(initial: u32) -> Self {
        Self {
            limit: f64::from(initial),
            baseline: None,
            measured: false,
            remeasure_at: f64::INFINITY,
            last: None,
            probe: None,
            knee: None,
            latest: None,
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
        self.limit = bounds.clamp(self.limit);
    }

    /// The dependency's latency without a queue (µs), if a window closed.
    pub(super) fn baseline(&self) -> Option<u64> {
        self.baseline
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
        match self.baseline {
            // Saturating: `as` from f64 clamps.
            Some(b) => (b as f64 * tolerance) as u64,
            None => u64::MAX,
        }
    }

    /// Lowers the limit to `keep` of `level` calls at once, rounded down,
    /// and not below `min`, for the window to come; `false` if that is no
    /// lower.
    fn step_down(&mut self, level: f64, keep: f64, bounds: Bounds) -> bool {
        let to = (level * keep).floor().max(f64::from(bounds.min)).max(1.0);
        if to >= level {
            return false;
        }
        self.limit = to;
        true
    }

    /// Starts a probe from the window just closed, which held `level`
    /// calls at once with a mean of `mean` µs: its first step. `false` if
    /// no lower limit is allowed.
    fn start_probe(&mut self, level: f64, mean: u64, bounds: Bounds) -> bool {
        let top = self.limit;
        if !self.step_down(level, PROBE_STEP, bounds) {
            return false;
        }
        self.probe = Some(Probe {
            top,
            top_mean: mean,
        });
        true
    }

    /// Takes `mean` (µs), from a window of `level` calls at once and
    /// `samples` samples, as the baseline.
    fn measure(&mut self, mean: u64, level: f64, samples: u64) {
        self.baseline = Some(mean);
        self.measured = true;
        self.remeasure_at = if samples < STEADY_SAMPLES {
            level * REMEASURE
        } else {
            f64::INFINITY
        };
    }

    /// Ends the probe under way, its last step down from `above` calls at
    /// once: back to the limit it started from if that limit's latency was
    /// within the tolerance of the baseline, or else to `above`, the most
    /// calls seen within it.
    fn end_probe(&mut self, above: f64, bounds: Bounds) -> Why {
        self.measured = true;
        let Some(probe) = self.probe.take() else {
            return Why::Measured;
        };
        let within = self
            .baseline
            .is_some_and(|b| probe.top_mean as f64 <= b as f64 * bounds.tolerance);
        if within {
            self.limit = bounds.clamp(probe.top);
        } else {
            self.limit = bounds.clamp(above);
            self.knee = Some(self.limit);
        }
        Why::Measured
    }

    /// Takes in one window and sets the limit for the next.
    pub(super) fn update(&mut self, window: Window, bounds: Bounds) -> Why {
        let Window {
            mean,
            peak,
            censored,
            span,
            samples,
        } = window;
        let mean = mean.max(1);
        self.windows += 1;
        self.latest = Some(mean);
        let last = self.last.take();
        let limit = self.limit;
        if self.windows == 1 {
            // The first window: the calls arrive over it, so its latency is
            // not yet that of its peak. Only a baseline to start from.
            if !censored {
                self.baseline = Some(mean);
            }
            return Why::Settling;
        }
        // A limit that was not used says nothing about itself, in either
        // direction, nor about the baseline (a few calls' mean is noisy,
        // and would be compared with many calls'); a probe whose window was
        // not used measured nothing: the limit goes back.
        if f64::from(peak) < limit / 2.0 {
            if let Some(probe) = self.probe.take() {
                self.limit = bounds.clamp(probe.top);
            }
            return Why::Idle;
        }
        if peak > self.limit() && mean.saturating_mul(SETTLE_SHARE) > span {
            // Calls admitted under a higher limit still ran for much of
            // this window (each runs about one latency), and its calls took
            // their latency at both limits: the next window is this
            // limit's.
            self.last = last;
            return Why::Settling;
        }
        // The calls held at once (for all but the first moments, if calls
        // admitted under a higher limit were still running).
        let level = f64::from(peak).min(limit.floor());
        let mean_f = mean as f64;
        if !censored {
            self.last = Some((level, mean));
        }
        // Compared with the window before only after a step down, and only
        // from two windows of whole latencies: a caller's timeout makes a
        // slow dependency look equally slow at any concurrency.
        let step = last.filter(|(above, _)| !censored && level <= above * STEP);
        if self.probe.is_some() {
            let noise = 1.0 + bounds.flat();
            let above = step.map_or(level, |(above, _)| above);
            // Within the noise of the baseline measured before: it holds
            // (and is measured again here).
            if let Some(was) = self.baseline.filter(|_| self.measured && !censored) {
                let ratio = mean_f / was as f64;
                if ratio <= noise && ratio * noise >= 1.0 {
                    self.measure(mean, level, samples);
                    return self.end_probe(above, bounds);
                }
            }
            // A step down that left latency where it was, within the noise
            // (or made it slower: the dependency slowed for everyone): the
            // calls taken off were not queueing, so this window's latency
            // is the dependency's own.
            if let Some((above, above_mean)) = step {
                if above_mean as f64 <= mean_f * noise {
                    self.measure(mean, level, samples);
                    return self.end_probe(above, bounds);
                }
            }
            // Faster a step down (or not comparable): the calls taken off
            // were queueing, and maybe these too. Another step.
            if self.step_down(level, PROBE_STEP, bounds) {
                return Why::Probe;
            }
            // At the lowest limit allowed: measured as low as it goes
            // (unless cut short).
            if !censored {
                self.measure(mean, level, samples);
            }
            return self.end_probe(level, bounds);
        }
        if !self.measured {
            // No baseline yet, or one that may hold a queue: probe for it
            // before any decision rests on it; at the lowest limit, there
            // is nothing lower to measure.
            self.baseline = Some(self.baseline.map_or(mean, |b| b.min(mean)));
            if self.start_probe(level, mean, bounds) {
                return Why::Probe;
            }
            self.measure(self.baseline.unwrap_or(mean), level, samples);
        }
        let baseline_us = self.baseline.unwrap_or(mean);
        let baseline = baseline_us as f64;
        if mean_f > baseline * bounds.tolerance {
            if !censored && limit <= f64::from(bounds.min) {
                // At `min`, the limit cannot come down: the latency is
                // measured here.
                self.measure(mean, level, samples);
                self.knee = Some(limit);
                return Why::Rebased;
            }
            // A decrease that took less than half its share off the
            // latency: most of the latency is not this limiter's queue (the
            // dependency slowed for everyone, maybe beside a queue). A
            // probe measures the baseline again, rather than decreases that
            // would not answer either.
            let unanswered = step.is_some_and(|(above, above_mean)| {
                mean_f > above_mean as f64 * (1.0 - (1.0 - level / above) / 2.0)
            });
            if unanswered && self.start_probe(level, mean, bounds) {
                return Why::Probe;
            }
            // Aimed from the calls that ran: the concurrency at which they
            // would have taken the baseline, and at least a fifth lower,
            // so that the next window tells whether the latency was a
            // queue.
            let gradient = baseline / mean_f;
            self.knee = Some(level * gradient);
            let keep = (gradient.max(GRADIENT_FLOOR) * UNDERSHOOT).min(STEP);
            self.limit = bounds.clamp(level * keep);
            return Why::Slower;
        }
        if !censored && mean_f * (1.0 + bounds.flat()) < baseline {
            // Faster than the baseline by more than the noise: the
            // dependency got faster, or the baseline held a little queue.
            // Measured again (not taken from this window, which may hold a
            // queue too, nor from the fastest of many, which noise alone
            // makes too fast); at the lowest limit, from this window.
            if self.start_probe(level, mean, bounds) {
                return Why::Probe;
            }
            self.measure(mean, level, samples);
        }
        if level >= self.remeasure_at
            && f64::from(peak) >= limit.floor()
            && self.start_probe(level, mean, bounds)
        {
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
                let room = level * bounds.tolerance * baseline / mean_f - limit;
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

    /// A window of `mean` µs holding `peak` calls, whole latencies, long
    /// enough (10 s) for calls of an earlier limit not to matter.
    fn window(mean: u64, peak: u32) -> Window {
        Window {
            mean,
            peak,
            censored: false,
            span: 10_000_000,
            samples: 1_000,
        }
    }

    /// A dependency of `k` workers, 10 ms per call: beyond `k` calls at once
    /// they queue, and latency grows with the calls.
    fn latency(calls: u32, k: u32) -> u64 {
        10_000 * u64::from(calls.max(k)) / u64::from(k)
    }

    /// A dependency of `k` workers, 10 ms per call, and `permille` ‰ more
    /// for each call beyond `k`.
    fn growing(calls: u32, k: u32, permille: u64) -> u64 {
        10_000 + 10 * permille * u64::from(calls.saturating_sub(k))
    }

    /// Runs `windows` saturated windows whose latency `of` the calls held
    /// gives; the limits.
    fn run_with(e: &mut Estimator, windows: usize, of: impl Fn(u32) -> u64) -> Vec<u32> {
        (0..windows)
            .map(|_| {
                let calls = e.limit();
                e.update(window(of(calls), calls), BOUNDS);
                e.limit()
            })
            .collect()
    }

    /// Runs `windows` saturated windows against `k` workers; the limits.
    fn run(e: &mut Estimator, k: u32, windows: usize) -> Vec<u32> {
        run_with(e, windows, |calls| latency(calls, k))
    }

    #[test]
    fn from_below_settles_around_the_knee() {
        let mut e = Estimator::new(1);
        let limits = run(&mut e, 50, 100);
        let settled = &limits[50..];
        assert!(settled.iter().all(|l| (40..=60).contains(l)), "{limits:?}");
        assert_eq!(e.baseline(), Some(10_000));
    }

    #[test]
    fn from_above_comes_down_to_the_knee() {
        let mut e = Estimator::new(200);
        let limits = run(&mut e, 50, 150);
        let settled = &limits[100..];
        assert!(settled.iter().all(|l| (40..=60).contains(l)), "{limits:?}");
        assert_eq!(e.baseline(), Some(10_000));
    }

    #[test]
    fn a_gentle_queue_rests_where_it_does_from_below_and_from_above() {
        // 2.5 % per call beyond 15: at 60 calls, latency is 2.1 times the
        // baseline, and a step of half from there is 1.5 times faster.
        let rests: Vec<((u32, u32, u32), Option<u64>)> = [2, 60]
            .into_iter()
            .map(|initial| {
                let mut e = Estimator::new(initial);
                let limits = run_with(&mut e, 100, |calls| growing(calls, 15, 25));
                let rest = &limits[60..];
                let lo = rest.iter().min().copied().unwrap_or(0);
                let hi = rest.iter().max().copied().unwrap_or(0);
                let sum: u32 = rest.iter().sum();
                ((lo, hi, sum), e.baseline())
            })
            .collect();
        assert_eq!(rests[0].1, Some(10_000), "the latency without a queue");
        assert_eq!(rests[1].1, Some(10_000), "the latency without a queue");
        assert_eq!(rests[0].0 .0, rests[1].0 .0, "{rests:?}");
        assert_eq!(rests[0].0 .1, rests[1].0 .1, "{rests:?}");
        assert!((15..=20).contains(&rests[0].0 .1), "{rests:?}");
        // The same cycle, maybe at another phase: sums of 40 windows
        // within one cycle's worth.
        assert!(rests[0].0 .2.abs_diff(rests[1].0 .2) <= 20, "{rests:?}");
    }

    #[test]
    fn the_first_window_starts_the_baseline_and_a_probe_follows() {
        let mut e = Estimator::new(40);
        assert_eq!(e.update(window(30_000, 40), BOUNDS), Why::Settling);
        assert_eq!((e.limit(), e.baseline()), (40, Some(30_000)));
        // Not yet trusted: the first windows run at `initial`, maybe above
        // the knee.
        assert_eq!(e.update(window(30_000, 40), BOUNDS), Why::Probe);
        assert_eq!(e.limit(), 20, "half the calls");
        // Faster at half: those 20 calls were queueing. Another step.
        assert_eq!(e.update(window(15_000, 20), BOUNDS), Why::Probe);
        assert_eq!(e.limit(), 10);
        // Not faster: no queue at 10 calls; 20 were within the tolerance of
        // what 10 take, 40 were not.
        assert_eq!(e.update(window(15_000, 10), BOUNDS), Why::Measured);
        assert_eq!((e.limit(), e.baseline()), (20, Some(15_000)));
    }

    #[test]
    fn a_probe_goes_back_to_its_start_when_that_was_within_the_tolerance() {
        let mut e = Estimator::new(40);
        e.update(window(10_500, 40), BOUNDS);
        assert_eq!(e.update(window(10_500, 40), BOUNDS), Why::Probe);
        assert_eq!(e.update(window(10_000, 20), BOUNDS), Why::Measured);
        assert_eq!((e.limit(), e.baseline()), (40, Some(10_000)));
    }

    #[test]
    fn at_the_lowest_limit_there_is_nothing_to_probe() {
        let bounds = Bounds { min: 5, ..BOUNDS };
        let mut e = Estimator::new(5);
        e.update(window(10_000, 5), bounds);
        assert_eq!(e.update(window(10_000, 5), bounds), Why::Grew);
        assert_eq!(e.baseline(), Some(10_000));
    }

    #[test]
    fn a_probe_steps_down_to_min_at_most() {
        let bounds = Bounds { min: 30, ..BOUNDS };
        let mut e = Estimator::new(40);
        e.update(window(10_000, 40), bounds);
        assert_eq!(e.update(window(10_000, 40), bounds), Why::Probe);
        assert_eq!(e.limit(), 30, "not half: `min`");
        // A step of a quarter, as low as it goes: measured there.
        assert_eq!(e.update(window(10_000, 30), bounds), Why::Measured);
        assert_eq!((e.limit(), e.baseline()), (40, Some(10_000)));
        let mut e = Estimator::new(36);
        e.update(window(10_000, 36), bounds);
        assert_eq!(e.update(window(10_000, 36), bounds), Why::Probe);
        // A step of a sixth tells nothing, and there is no lower one.
        assert_eq!(e.update(window(9_500, 30), bounds), Why::Measured);
        assert_eq!((e.limit(), e.baseline()), (36, Some(9_500)));
    }

    #[test]
    fn a_baseline_from_few_calls_is_measured_again_from_more() {
        let mut e = Estimator::new(2);
        e.update(window(9_600, 2), BOUNDS);
        assert_eq!(e.update(window(9_600, 2), BOUNDS), Why::Probe);
        // One call's window of 10 samples, 4 % fast by chance: the
        // baseline it gives.
        let few = Window {
            samples: 10,
            ..window(9_600, 1)
        };
        assert_eq!(e.update(few, BOUNDS), Why::Measured);
        assert_eq!((e.limit(), e.baseline()), (2, Some(9_600)));
        // The dependency answers in 10 ms, within the tolerance of 9.6:
        // the limit grows, and from 4 calls on its baseline is measured
        // again from a window of half as many.
        let whys: Vec<(u32, Why)> = (0..8)
            .map(|_| {
                let calls = e.limit();
                (calls, e.update(window(10_000, calls), BOUNDS))
            })
            .collect();
        let probed = whys.iter().position(|w| w.1 == Why::Probe);
        assert!(probed.is_some_and(|i| whys[i].0 >= 4), "{whys:?}");
        assert!(whys.contains(&(2, Why::Measured)), "{whys:?}");
        assert_eq!(e.baseline(), Some(10_000), "{whys:?}");
        // Measured from 1 000 samples: not again.
        let later: Vec<Why> = (0..20)
            .map(|_| {
                let calls = e.limit();
                e.update(window(10_000, calls), BOUNDS)
            })
            .collect();
        assert!(!later.contains(&Why::Probe), "{later:?}");
    }

    #[test]
    fn a_window_beside_calls_of_a_higher_limit_is_not_read() {
        let mut e = Estimator::new(40);
        e.update(window(100_000, 40), BOUNDS);
        assert_eq!(e.update(window(100_000, 40), BOUNDS), Why::Probe);
        // The calls of 40 ran for 100 ms of a 500 ms window: a fifth.
        let beside = Window {
            span: 500_000,
            ..window(100_000, 40)
        };
        assert_eq!(e.update(beside, BOUNDS), Why::Settling);
        assert_eq!(e.limit(), 20, "held");
        // The next window is compared with the one at 40.
        assert_eq!(e.update(window(50_000, 20), BOUNDS), Why::Probe);
        assert_eq!(e.limit(), 10);
        // Beside them for a tenth of the window or less: read.
        let brief = Window {
            span: 500_000,
            ..window(50_000, 20)
        };
        assert_eq!(e.update(brief, BOUNDS), Why::Measured);
    }

    #[test]
    fn a_faster_window_is_probed_not_taken_as_the_baseline() {
        let mut e = Estimator::new(1);
        run(&mut e, 50, 60);
        assert_eq!(e.baseline(), Some(10_000));
        let at = e.limit();
        // A burst of cache hits: one window at a tenth of the latency.
        assert_eq!(e.update(window(1_000, at), BOUNDS), Why::Probe);
        assert_eq!(e.baseline(), Some(10_000), "not from one fast window");
        // The probe finds the dependency as it was.
        let half = e.limit();
        assert_eq!(half, at / 2);
        assert_eq!(e.update(window(10_000, half), BOUNDS), Why::Measured);
        assert_eq!((e.limit(), e.baseline()), (at, Some(10_000)));
    }

    #[test]
    fn a_latency_shift_is_measured_not_driven_to_the_minimum() {
        let mut e = Estimator::new(1);
        run(&mut e, 50, 60);
        // Every call now takes three times as long, at any concurrency.
        let limits = run_with(&mut e, 60, |calls| 3 * latency(calls, 50));
        // One decrease (by half at most) and one probe step of half.
        assert!(limits.iter().all(|l| *l >= 10), "{limits:?}");
        assert_eq!(e.baseline(), Some(30_000));
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
                let w = if whole > 50_000 {
                    Window {
                        censored: true,
                        ..window(50_000, calls)
                    }
                } else {
                    window(whole, calls)
                };
                e.update(w, BOUNDS);
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
        e.update(window(10_000, 40), BOUNDS);
        assert_eq!(e.update(window(100_000, 3), BOUNDS), Why::Idle);
        assert_eq!(e.update(window(1_000, 3), BOUNDS), Why::Idle);
        assert_eq!((e.limit(), e.baseline()), (40, Some(10_000)));
    }

    #[test]
    fn a_decrease_takes_at_most_half_and_keeps_the_minimum() {
        let bounds = Bounds { min: 30, ..BOUNDS };
        let mut e = Estimator::new(100);
        e.update(window(1_000, 100), bounds);
        assert_eq!(e.update(window(1_000, 100), bounds), Why::Probe);
        assert_eq!(e.update(window(1_000, 50), bounds), Why::Measured);
        assert_eq!(e.limit(), 100);
        assert_eq!(e.update(window(1_000, 100), bounds), Why::Grew);
        assert_eq!(e.limit(), 110, "the square root of 100");
        assert_eq!(e.update(window(100_000, 110), bounds), Why::Slower);
        assert_eq!(e.limit(), 49, "half of 110, then the undershoot");
        // Latency fell with the calls: it was this limiter's queue.
        assert_eq!(e.update(window(1_000, 49), bounds), Why::Grew);
        // At most a fifth fewer calls is still a decrease of a fifth.
        let mut e = Estimator::new(100);
        e.update(window(1_000, 100), bounds);
        e.update(window(1_000, 100), bounds);
        e.update(window(1_000, 50), bounds);
        assert_eq!(e.update(window(1_120, 100), bounds), Why::Slower);
        assert_eq!(e.limit(), 80);
        let mut e = Estimator::new(40);
        e.update(window(1_000, 40), bounds);
        assert_eq!(e.update(window(1_000, 40), bounds), Why::Probe);
        assert_eq!(e.update(window(1_000, 30), bounds), Why::Measured);
        assert_eq!(e.update(window(100_000, 40), bounds), Why::Slower);
        assert_eq!(e.limit(), 30, "not below `min`");
    }

    #[test]
    fn growth_stops_at_max() {
        let bounds = Bounds { max: 7, ..BOUNDS };
        let mut e = Estimator::new(1);
        for _ in 0..20 {
            let calls = e.limit();
            e.update(window(1_000, calls), bounds);
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
        for mean in [u64::MAX, 1, u64::MAX, 0, u64::MAX / 3, 7, u64::MAX] {
            for span in [0, u64::MAX] {
                let w = Window {
                    mean,
                    peak: u32::MAX,
                    censored: false,
                    span,
                    samples: 10,
                };
                e.update(w, bounds);
                assert!((1..=536_870_911).contains(&e.limit()));
            }
        }
        assert!(e.slow(10.0) >= 1);
    }
}
