//! An adaptive concurrency limit (`type = "adaptive"`): the limit is found
//! from the latency of the calls it lets through, between `min` and `max`.
//!
//! ```toml
//! [resilient.concurrency.reviews]
//! type = "adaptive"
//! max = 200             # never more calls at once than this
//! min = 4               # never fewer places than this (default 1)
//! initial = 20          # the limit before anything is measured (default `min`)
//! window = "1s"         # how long latency is sampled between two updates
//! tolerance = 1.1       # how much slower than the baseline still counts as uncongested
//! ```
//!
//! # The algorithm, and why this one
//!
//! The peers this follows are Netflix's concurrency-limits (Vegas, its
//! default Gradient2, and AIMD, which it advises for clients) and Envoy's
//! adaptive concurrency filter (a gradient with a headroom of the square
//! root of the limit). All compare the latency of recent calls with a
//! latency taken as the dependency's best (the baseline, their "minRTT" or
//! "long RTT"), and differ in where that baseline comes from. That is also
//! where their users' complaints come from:
//!
//! - Vegas keeps the lowest latency seen (reset only now and then). One
//!   unusually fast window
//!   (a burst of cache hits, an error page) leaves every later window
//!   looking congested, and the limit goes to its minimum and stays there
//!   after the load is gone ("stuck at 1").
//! - Gradient2 uses a long exponential average instead. Under sustained
//!   overload that average climbs to the overloaded latency, the gradient
//!   returns to 1, and the limit grows again while the dependency is still
//!   queueing (a drift fixed more than once in its history).
//! - Envoy measures its minimum by pinning concurrency to a few calls
//!   (3 by default) for a while, periodically: the calls beyond those are
//!   rejected meanwhile (503s), and the instances of a fleet must be
//!   jittered apart.
//! - AIMD needs an explicit drop signal (a timeout, a 429), which a
//!   function's latency alone does not give; it suits clients that see
//!   their dependency's rejections.
//!
//! This limit is a gradient, as Gradient2 and Envoy (a latency ratio, not a
//! step per window as Vegas or AIMD). Its baseline is the dependency's
//! latency *without a queue*, and it is only ever taken where a step down
//! in concurrency showed that no queue was left: never from a window that
//! merely ran at the limit in force, which may be queueing already (a
//! baseline learnt there would let the limit rest higher the higher it
//! started).
//!
//! - **A probe measures the baseline**, as Envoy's pinned windows do, but
//!   by halving: the limit is set to half the calls the window before held
//!   (not below `min`), for one window. If that window is faster (by more
//!   than the noise margin, half the tolerance and at most 5 %), the calls
//!   taken off were queueing, and maybe these too: another half. When a
//!   step no longer makes latency fall (or the latency is that of the
//!   baseline measured before, or no step is left above `min`), that
//!   window's latency is the baseline, and the limit goes back to where
//!   the probe started if that window was within the tolerance of it, or
//!   else to the calls a step above, the most seen within it. Halving,
//!   because a gentle queue (2.5 % per call beyond 15 workers) changes
//!   latency by only a few percent over a step of a fifth, which noise
//!   could pass for none; over a step of half it changes by much more.
//! - **A probe runs when the baseline is in doubt**: after the first
//!   window (the limit starts at `initial`, maybe far above the knee); when
//!   a decrease did not lower latency by half the share it took off (the
//!   dependency became slower for everyone: the Vegas complaint is a limit
//!   driven to `min` by decreases that cannot answer); when a window is
//!   faster than the baseline by more than the noise margin (the dependency
//!   got faster, or the window was fast by chance: a probe tells, where
//!   keeping the lowest latency seen would keep the luckiest window); and
//!   when the baseline was measured from a window of fewer than 100 calls
//!   (a limit that started at 1 measured it from windows of one call at a
//!   time, whose mean is noisy) and the limit, saturated, now holds four
//!   times the calls of that window. At `min`, where nothing lower can be
//!   measured, a slow window is taken as the baseline.
//! - **A window slower than `baseline × tolerance` lowers the limit** by the
//!   gradient `baseline / latency` (at most by half, at least by a fifth),
//!   aiming at the knee: the calls it held at once times the gradient,
//!   where latency would be the baseline again, and 10 % under it. Not so
//!   when most of a window's samples were cut short (see below): a
//!   caller's timeout makes a queueing dependency look equally slow at any
//!   concurrency, and such windows keep lowering the limit, as AIMD backs
//!   off on drops, without a probe.
//! - **Growth**: a window within the tolerance whose calls used at least
//!   half the limit raises it. Below the knee last found, by up to the
//!   square root of the limit (Envoy's headroom), back to the knee; above
//!   it, as far as latency leaves room: calls beyond the knee queue, so the
//!   calls in flight times `tolerance × baseline / latency` is where latency
//!   would reach the tolerance. At least one call, so that a dependency
//!   that grew is found; at most the square root. Before any decrease, by
//!   the square root. A limit that was not half used neither grows nor
//!   shrinks (Gradient2's rule): a lightly loaded limit learns nothing
//!   about itself, nor about the baseline. So a limit set at twice the
//!   calls in flight or more never binds and never learns that the
//!   dependency queues: set `initial` no higher than the load expected.
//! - **A window is read only when its calls ran under its limit**: the
//!   first one (its calls arrive over it) is not, nor one after a decrease
//!   whose calls shared the dependency for more than a tenth of it with
//!   calls admitted under the higher limit (each runs about one latency):
//!   the window after it is read instead.
//!
//! So the limit rests where the latency reaches `tolerance` times the
//! latency without a queue, whatever it started from: against 15 workers
//! answering in 20 ms, with 2.5 % more per call beyond (a gentle queue) it
//! cycles between 15 and 20 (mean 17.8), with 20 % more per call (a steep
//! one) between 12 and 17 (mean 14.8), started at 2 or at 60 alike, its
//! baseline 20 ms (`tests/adaptive_limit_start.rs`). With a dependency
//! whose latency grows as the calls beyond K, it cycles between about
//! 0.8·K and `tolerance`·K plus a call (`tests/adaptive_limit.rs`).
//!
//! # What a call contributes
//!
//! The latency of a call is measured from when it took its place (a call
//! that waited for one, under `policy = "block"`, does not count its wait)
//! to its outcome, on tokio's clock. Only calls that took their place in the
//! current window are its samples: a call admitted under the previous
//! limit says nothing about this one (Envoy's filter came to discard such
//! samples too).
//!
//! - A success is a sample.
//! - A failure (the body's error, or a resilience error inside the limit
//!   such as a timeout) and a call dropped before its outcome (cancelled)
//!   are samples only when they took longer than `baseline × tolerance`:
//!   such a call shows the dependency is slow, and its time is a lower
//!   bound of its latency (a window where most samples are such calls is
//!   *censored*). A fast failure or an early cancellation shows nothing
//!   about its speed, and is never taken as a fast success. Before the
//!   first window has closed there is no baseline, and none counts.
//! - A permit taken through the handle (`try_acquire`, `acquire`) holds a
//!   place but is no sample: its outcome is unknown.
//!
//! A window closes on the first sample after it has lasted `window` and
//! holds at least 10 samples (or as soon as it holds 32768). The call that
//! closes it computes the next limit; the others never wait for it. A
//! latency is counted in microseconds, at most about 71 minutes per call.
//!
//! # Cost
//!
//! An adaptive limit reads tokio's clock when a call enters (before it
//! takes its place, as the metrics' timing does) and when it ends, and adds
//! its sample to one shared word; a fixed limit does neither (the guide's
//! [benchmarks](crate::guide::benchmarks) has the figures).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::estimate::{Bounds, Estimator, Window};
use super::LIMIT_MAX;
use crate::settings::{Section, Value};

/// The settings of an adaptive limit (`type = "adaptive"`).
///
/// | key | default | rule |
/// |---|---|---|
/// | `max` | required | whole number in 1..=536870911: never more calls at once than this, whatever latency says |
/// | `min` | `1` | whole number in 1..=536870911, ≤ `max`: never fewer places than this |
/// | `initial` | `min` | whole number in `min`..=`max`: the limit before any window is measured |
/// | `window` | `"1s"` | duration > 0: how long latency is sampled before the limit is updated (longer while it holds fewer than 10 samples) |
/// | `tolerance` | `1.1` | number > 1 and ≤ 10 with a decimal point (`1.1`, `2.0`): how many times its baseline a window's mean latency may be and still count as uncongested; a whole number (`10`) reads as a percent and is refused, with the ratio it stands for |
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct AdaptiveSettings {
    /// Never fewer places than this.
    pub min: u32,
    /// Never more calls at once than this.
    pub max: u32,
    /// The limit before any window is measured.
    pub initial: u32,
    /// How long latency is sampled between two updates.
    #[cfg_attr(
        feature = "serde",
        serde(serialize_with = "crate::settings::ser::duration")
    )]
    pub window: Duration,
    /// How many times its baseline a window's mean latency may be and
    /// still count as uncongested: a ratio, written with a decimal point
    /// (`1.1` for 10 %; a whole number is refused as the percent it most
    /// likely is).
    pub tolerance: f64,
}

/// The keys of an adaptive limit, which a fixed one does not take.
pub(super) const KEYS: [&str; 5] = ["max", "min", "initial", "window", "tolerance"];

/// The rule of `tolerance`.
const TOLERANCE: &str = "must be a number > 1 and ≤ 10 with a decimal point (1.1: a window may be 10 % slower than the baseline before the limit comes down)";

/// `x` with at most `decimals` decimals, and at least one.
fn decimal(x: f64, decimals: usize) -> String {
    let text = format!("{x:.decimals$}");
    let text = text.trim_end_matches('0');
    if let Some(whole) = text.strip_suffix('.') {
        format!("{whole}.0")
    } else {
        text.to_owned()
    }
}

/// The number `value` holds, and whether it was written as a whole number
/// (an integer, or the text of one, as the environment gives it): `None`
/// if it holds none.
fn written_number(value: &Value) -> Option<(f64, bool)> {
    match value {
        Value::Int(i) => Some((*i as f64, true)),
        Value::Float(x) => Some((*x, false)),
        Value::Str(t) => {
            let t = t.trim();
            match t.parse::<i128>() {
                Ok(i) => Some((i as f64, true)),
                Err(_) => t.parse::<f64>().ok().map(|x| (x, false)),
            }
        }
        _ => None,
    }
}

/// What a `tolerance` of `x` (written as a whole number or not) most
/// likely meant, if it reads as another unit: a whole number is a percent
/// (`10` for 10 %, as Envoy's minRTT `buffer` is written), a number above
/// 10 is a percent too, and a number below 1 is the share over the
/// baseline (`0.1` for 10 %). `None` if no such reading gives a tolerance
/// in range.
fn tolerance_meant(x: f64, whole: bool) -> Option<String> {
    let (reads, percent) = if whole {
        ("a whole number reads as a percent", x)
    } else if x > 10.0 {
        ("a number above 10 reads as a percent", x)
    } else if x > 0.0 && x < 1.0 {
        (
            "a number below 1 reads as the share over the baseline",
            x * 100.0,
        )
    } else {
        return None;
    };
    let ratio = 1.0 + percent / 100.0;
    if !(ratio > 1.0 && ratio <= 10.0) {
        return None;
    }
    let mut meant = format!(
        "{reads}: `tolerance = {}` is {} %",
        decimal(ratio, 4),
        decimal(percent, 2).trim_end_matches(".0")
    );
    if whole && (2.0..=10.0).contains(&x) {
        meant.push_str(&format!(
            ", and `tolerance = {}` lets latency reach {x} times the baseline",
            decimal(x, 1)
        ));
    }
    Some(meant)
}

/// Reads `tolerance`: a ratio in (1, 10] written with a decimal point.
///
/// A whole number is refused even in range, as the percent it most likely
/// is (`tolerance = 10` for 10 %): taken as a ratio, it would let latency
/// grow tenfold before the limit comes down, leaving the limit all but
/// idle, in silence. A problem rather than a WARN, since a ratio of 2 or
/// more that is meant costs only a decimal point (`10.0`). Every refusal
/// that reads as another unit says what it stands for.
fn read_tolerance(s: &mut Section<'_>) -> Option<f64> {
    let written = s.value("tolerance").and_then(written_number);
    let whole = written.is_some_and(|(_, whole)| whole);
    let rule = match written.and_then(|(x, whole)| tolerance_meant(x, whole)) {
        Some(meant) => format!("{TOLERANCE}; {meant}"),
        None => TOLERANCE.to_owned(),
    };
    let tolerance = s.float("tolerance", Some(1.1), &rule, |t| t > 1.0 && t <= 10.0)?;
    if whole {
        s.invalid("tolerance", rule);
        return None;
    }
    Some(tolerance)
}

impl AdaptiveSettings {
    /// Reads and validates the keys of `type = "adaptive"`, recording
    /// every problem found.
    pub fn read(s: &mut Section<'_>) -> Option<Self> {
        s.alias("max_concurrent_calls", "max", |_| {
            "with `type = \"adaptive\"`, the cap on calls at once is `max`".into()
        });
        s.alias("max_limit", "max", |_| {
            "the same cap under this project's name".into()
        });
        s.alias("max_concurrency", "max", |_| {
            "the same cap under this project's name".into()
        });
        s.alias("min_limit", "min", |_| {
            "the same floor under this project's name".into()
        });
        s.alias("initial_limit", "initial", |_| {
            "the same start under this project's name".into()
        });
        let max = s.int("max", None, 1, LIMIT_MAX);
        let min = s.int("min", Some(1), 1, LIMIT_MAX);
        let initial = s.int("initial", Some(min.unwrap_or(1)), 1, LIMIT_MAX);
        let window = match s.duration("window", false) {
            Some(Some(d)) if d.is_zero() => {
                s.invalid("window", "must be > 0");
                None
            }
            Some(other) => other,
            None => Some(Duration::from_secs(1)),
        };
        let tolerance = read_tolerance(s);
        let (max, min, initial) = (max?, min?, initial?);
        if min > max {
            s.invalid("min", format!("must be ≤ `max` ({max})"));
            return None;
        }
        if initial < min {
            s.invalid("initial", format!("must be ≥ `min` ({min})"));
            return None;
        }
        if initial > max {
            s.invalid("initial", format!("must be ≤ `max` ({max})"));
            return None;
        }
        Some(Self {
            min: u32::try_from(min).ok()?,
            max: u32::try_from(max).ok()?,
            initial: u32::try_from(initial).ok()?,
            window: window?,
            tolerance: tolerance?,
        })
    }

    pub(super) fn bounds(&self) -> Bounds {
        Bounds {
            min: self.min,
            max: self.max,
            tolerance: self.tolerance,
        }
    }
}

/// An adaptive limit's measurements, in its part of the
/// [`Snapshot`](crate::Snapshot): what the limit was last computed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Measured {
    /// The dependency's latency without a queue, as last measured.
    #[cfg_attr(
        feature = "serde",
        serde(serialize_with = "crate::settings::ser::duration")
    )]
    pub baseline: Duration,
    /// The mean latency of the last window.
    #[cfg_attr(
        feature = "serde",
        serde(serialize_with = "crate::settings::ser::duration")
    )]
    pub latency: Duration,
    /// Windows measured since the limit became adaptive.
    pub windows: u64,
}

/// Samples a window needs before it may close.
const WINDOW_MIN_SAMPLES: u64 = 10;
/// Samples at which a window closes whatever its age.
const WINDOW_MAX_SAMPLES: u64 = 1 << 15;
/// Samples beyond which a sample is dropped rather than risk the count
/// overflowing its bits (only reachable if thousands of calls end in the
/// instant a full window closes).
const WINDOW_SAFE_SAMPLES: u64 = 60_000;
/// The bits of the window word that count its samples; the rest sum their
/// latencies, in µs. With at most 65535 samples of at most `u32::MAX` µs
/// each, the sum fits the 48 bits above.
const COUNT_BITS: u32 = 16;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;

/// One atomic on a cache line of its own: written by every call's end, read
/// by none of the others' admissions.
#[derive(Debug, Default)]
#[repr(align(64))]
struct Line<T>(T);

/// The running state of an adaptive limit. Present in every limiter (a
/// reload may switch the type); touched by calls only while the type is
/// adaptive.
#[derive(Debug)]
pub(super) struct Adaptive {
    /// The limit in force: what admissions compare with.
    current: Line<AtomicU32>,
    /// The current window's samples: their count in the low
    /// [`COUNT_BITS`], the sum of their latencies (µs) above.
    samples: Line<AtomicU64>,
    /// The most calls held at once in the current window.
    peak: Line<AtomicU32>,
    /// When the current window started, in ns since `origin`: a call that
    /// took its place before is no sample of it.
    window_start: AtomicU64,
    /// When the current window may close, in ns since `origin`.
    closes_at: AtomicU64,
    /// The latency (µs) above which a call that did not succeed counts.
    slow: AtomicU64,
    /// The current window's samples that were calls which did not succeed.
    censored: AtomicU64,
    origin: Instant,
    estimator: Mutex<Estimator>,
}

/// `d` in whole ns, saturated.
fn nanos(d: Duration) -> u64 {
    d.as_secs()
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::from(d.subsec_nanos()))
}

impl Adaptive {
    /// The state of a limit starting at `initial`, its first window
    /// `window` long from now.
    pub(super) fn new(initial: u32, window: Duration) -> Self {
        Self {
            current: Line(AtomicU32::new(initial)),
            samples: Line(AtomicU64::new(0)),
            peak: Line(AtomicU32::new(0)),
            window_start: AtomicU64::new(0),
            closes_at: AtomicU64::new(nanos(window)),
            slow: AtomicU64::new(u64::MAX),
            censored: AtomicU64::new(0),
            origin: Instant::now(),
            estimator: Mutex::new(Estimator::new(initial)),
        }
    }

    /// The estimator, for the one thread that updates the limit (or a
    /// reload, or the snapshot).
    pub(super) fn lock(&self) -> MutexGuard<'_, Estimator> {
        self.estimator
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The estimator if no other thread holds it.
    pub(super) fn try_lock(&self) -> Option<MutexGuard<'_, Estimator>> {
        match self.estimator.try_lock() {
            Ok(guard) => Some(guard),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// The limit in force.
    #[inline]
    pub(super) fn current(&self) -> u32 {
        self.current.0.load(Ordering::Acquire)
    }

    /// Puts `limit` in force, for the admissions from now on.
    pub(super) fn set_current(&self, limit: u32) {
        self.current.0.store(limit, Ordering::Release);
    }

    /// `at`, in ns since the origin: what a call's times are compared in,
    /// as plain numbers.
    #[inline]
    pub(super) fn since_origin(&self, at: Instant) -> u64 {
        nanos(at.saturating_duration_since(self.origin))
    }

    /// A call holds a place, with `held` places held in all (its own
    /// included).
    #[inline]
    pub(super) fn held(&self, held: u32) {
        // A load first: the common case writes nothing.
        if held > self.peak.0.load(Ordering::Relaxed) {
            self.peak.0.fetch_max(held, Ordering::Relaxed);
        }
    }

    /// A call that took its place at `from` ended at `now` (both in ns
    /// since the origin; its outcome a success or not): whether the window
    /// is due to close.
    #[inline]
    pub(super) fn sample(&self, from: u64, now: u64, success: bool) -> bool {
        if from < self.window_start.load(Ordering::Acquire) {
            // Admitted under the previous window's limit.
            return false;
        }
        let micros = (now.saturating_sub(from) / 1_000).min(u64::from(u32::MAX));
        if !success && micros <= self.slow.load(Ordering::Relaxed) {
            return false;
        }
        let add = (micros << COUNT_BITS) | 1;
        // Refused rather than added and taken back: a window closed between
        // the two would swap the sum out and the take-back would wrap it,
        // leaving a count no sample can pass and the limit frozen.
        let mut count = 0;
        let added = self
            .samples
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                count = (w & COUNT_MASK) + 1;
                (count <= WINDOW_SAFE_SAMPLES).then(|| w.wrapping_add(add))
            });
        if added.is_err() {
            return false;
        }
        if !success {
            self.censored.fetch_add(1, Ordering::Relaxed);
        }
        count >= WINDOW_MAX_SAMPLES
            || (count >= WINDOW_MIN_SAMPLES && now >= self.closes_at.load(Ordering::Acquire))
    }

    /// Closes the window at `now` if it is still due (another thread may
    /// have closed it meanwhile): what it measured, with the next window
    /// started, `window` long, its peak from `held` places.
    /// Called with the estimator locked, which keeps closes apart.
    pub(super) fn close(
        &self,
        _locked: &mut Estimator,
        now: Instant,
        window: Duration,
        held: u32,
    ) -> Option<Window> {
        let now = self.since_origin(now);
        let count = self.samples.0.load(Ordering::Acquire) & COUNT_MASK;
        let due = count >= WINDOW_MAX_SAMPLES
            || (count >= WINDOW_MIN_SAMPLES && now >= self.closes_at.load(Ordering::Acquire));
        if !due {
            return None;
        }
        // Started first: a call that ends from now on and took its place
        // before is no sample of the next window.
        let started = self.window_start.swap(now, Ordering::AcqRel);
        self.closes_at
            .store(now.saturating_add(nanos(window)), Ordering::Release);
        let word = self.samples.0.swap(0, Ordering::AcqRel);
        let peak = self.peak.0.swap(held, Ordering::Relaxed);
        let censored = self.censored.swap(0, Ordering::Relaxed);
        let count = word & COUNT_MASK;
        let sum = word >> COUNT_BITS;
        (count > 0).then(|| Window {
            mean: sum / count,
            peak,
            censored: censored * 2 > count,
            span: now.saturating_sub(started) / 1_000,
            samples: count,
        })
    }

    /// After an update: the latency above which a failure counts.
    pub(super) fn set_slow(&self, slow: u64) {
        self.slow.store(slow, Ordering::Relaxed);
    }

    /// Starts measuring afresh at `now`, from `initial` (a reload switched
    /// the type to adaptive).
    pub(super) fn restart(
        &self,
        estimator: &mut Estimator,
        initial: u32,
        window: Duration,
        held: u32,
    ) {
        *estimator = Estimator::new(initial);
        let now = self.since_origin(Instant::now());
        self.window_start.store(now, Ordering::Release);
        self.closes_at
            .store(now.saturating_add(nanos(window)), Ordering::Release);
        self.samples.0.store(0, Ordering::Release);
        self.censored.store(0, Ordering::Relaxed);
        self.peak.0.store(held, Ordering::Relaxed);
        self.slow.store(u64::MAX, Ordering::Relaxed);
    }

    /// What the limit was last computed from, if a window closed.
    pub(super) fn measured(&self) -> Option<Measured> {
        let e = self.lock();
        Some(Measured {
            baseline: Duration::from_micros(e.baseline()?),
            latency: Duration::from_micros(e.latency()?),
            windows: e.windows(),
        })
    }
}
