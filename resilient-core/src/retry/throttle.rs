//! Client-side adaptive throttling of retries (Google SRE book, "Handling
//! Overload"): the counts of one retry spec's attempts over a trailing
//! window, and the probability that they refuse the next retry (and, with
//! `first_calls`, the next call's first attempt).
//!
//! The counts are a ring of [`BUCKETS`] buckets over the window, each one
//! `AtomicU64` holding the bucket's number and its two counts, so a count
//! and the bucket's turn over to a new period are one compare-and-swap: no
//! count is lost to a race, and nothing is locked. A bucket holds the
//! attempts of one period of `window / BUCKETS`; the window is the
//! bucket of now and the `BUCKETS − 1` before it, so it spans between
//! `window · (1 − 1/BUCKETS)` and `window`.
//!
//! A success, the common case, reads no clock: it adds one to a word of
//! pending accepts, which also holds the bucket number of the last time
//! the throttle read the clock. The pending accepts enter the window, in
//! that bucket, the next time the clock is read: at a failure, at a
//! decision on a retry or a first call, at a read of the counts, or once [`FOLD`] of them
//! are waiting. So an accept is dated at most [`FOLD`] − 1 accepts too
//! early, never too late: the window can hold fewer accepts than happened
//! in it (at most `FOLD − 1`, which makes a refusal slightly likelier, as
//! if the dependency had accepted less), and accepts of a quiet period
//! long ago never count as recent.

use std::sync::atomic::{AtomicU64, Ordering};
use tokio::time::Instant;

use super::settings::ThrottleSettings;

/// The buckets of a window.
pub(crate) const BUCKETS: usize = 16;

/// The pending accepts that make a success read the clock and put them
/// in the window.
pub(crate) const FOLD: u64 = 32;

/// The bits of the pending word's count, below its bucket number.
const PENDING_BITS: u32 = 40;
const PENDING_MASK: u64 = (1 << PENDING_BITS) - 1;

/// The bits of a bucket's number, its accepts and its rejects, in that
/// order from the top of the word.
const PERIOD_BITS: u32 = 24;
const COUNT_BITS: u32 = 20;
const COUNT_MAX: u64 = (1 << COUNT_BITS) - 1;
const PERIOD_MASK: u64 = (1 << PERIOD_BITS) - 1;

/// A throttle's settings, in the units it counts in: what a reload
/// compares.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ThrottleParams {
    pub(crate) k: f64,
    /// The length of one bucket, in nanoseconds (≥ 1).
    period: u64,
    /// `first_calls`: a call's first attempt is refused too.
    pub(crate) first_calls: bool,
}

impl ThrottleParams {
    pub(crate) fn of(s: &ThrottleSettings) -> Self {
        let window = u64::try_from(s.window.as_nanos()).unwrap_or(u64::MAX);
        Self {
            k: s.k,
            period: (window / BUCKETS as u64).max(1),
            first_calls: s.first_calls,
        }
    }
}

/// The counts of one retry spec's attempts over its window, which every
/// fn of the spec shares (a reload with the same window keeps them).
#[derive(Debug)]
pub(crate) struct Throttle {
    /// Where the bucket numbers count from.
    origin: Instant,
    buckets: [AtomicU64; BUCKETS],
    /// The bucket number of the last clock read, and the accepts counted
    /// since, which are not in a bucket yet.
    pending: AtomicU64,
    /// The bucket number of the last request not accepted, plus one; 0
    /// for none since the throttle was made or cleared. A first call asks
    /// it before the clock: a window with no such request refuses nothing.
    rejected: AtomicU64,
}

/// The attempts of a window: how many were made, how many were accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Counts {
    pub(crate) requests: u64,
    pub(crate) accepts: u64,
}

impl Counts {
    /// The probability that the next retry is refused:
    /// `max(0, (requests − k·accepts) / (requests + 1))`.
    pub(crate) fn refusal(self, k: f64) -> f64 {
        // Counts stay below 2^25 per bucket: exact in a double.
        let requests = self.requests as f64;
        let over = requests - k * self.accepts as f64;
        if over <= 0.0 {
            0.0
        } else {
            over / (requests + 1.0)
        }
    }
}

impl Throttle {
    pub(crate) fn new() -> Self {
        Self {
            origin: Instant::now(),
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            // Bucket 0, the bucket of `origin`: no accept pending.
            pending: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
        }
    }

    /// Forgets every count (a reload that changed the window).
    pub(crate) fn clear(&self) {
        for b in &self.buckets {
            b.store(0, Ordering::Relaxed);
        }
        self.pending.store(0, Ordering::Relaxed);
        self.rejected.store(0, Ordering::Relaxed);
    }

    /// The number of the bucket of `now`, modulo `2^PERIOD_BITS`.
    #[inline(always)]
    fn period(&self, p: &ThrottleParams, now: Instant) -> u64 {
        let since = now.saturating_duration_since(self.origin);
        let nanos = u64::try_from(since.as_nanos()).unwrap_or(u64::MAX);
        (nanos / p.period) & PERIOD_MASK
    }

    /// Counts a successful attempt, without reading the clock: pending
    /// until the next clock read (see the module docs).
    #[inline(always)]
    pub(crate) fn accept(&self, p: &ThrottleParams) {
        let before = self.pending.fetch_add(1, Ordering::Relaxed);
        if (before & PENDING_MASK) + 1 >= FOLD {
            self.fold(self.period(p, Instant::now()));
        }
    }

    /// Counts an attempt made now that did not succeed: accepted (a
    /// failure the spec does not retry), or not.
    pub(crate) fn record(&self, p: &ThrottleParams, accepted: bool) {
        let period = self.period(p, Instant::now());
        self.fold(period);
        let (accepts, rejects) = if accepted { (1, 0) } else { (0, 1) };
        self.add(period, accepts, rejects);
        if !accepted {
            self.rejected.store(period + 1, Ordering::Relaxed);
        }
    }

    /// Puts the pending accepts in the bucket of the last clock read, and
    /// starts counting them again from `now`, the bucket number of this
    /// one. Accepts whose bucket has left the window are dropped.
    #[inline(never)]
    fn fold(&self, now: u64) {
        let word = self.pending.swap(now << PENDING_BITS, Ordering::Relaxed);
        let (then, accepts) = (word >> PENDING_BITS, word & PENDING_MASK);
        let age = now.wrapping_sub(then) & PERIOD_MASK;
        if accepts > 0 && (age as usize) < BUCKETS {
            self.add(then, accepts, 0);
        }
    }

    /// Adds `accepts` and `rejects` to the bucket of `period`: one
    /// compare-and-swap, which also turns the bucket over to `period` if it
    /// held an older one.
    fn add(&self, period: u64, accepts: u64, rejects: u64) {
        let slot = &self.buckets[(period as usize) % BUCKETS];
        let mut word = slot.load(Ordering::Relaxed);
        loop {
            let (mut a, mut r) = if word >> (2 * COUNT_BITS) == period {
                ((word >> COUNT_BITS) & COUNT_MAX, word & COUNT_MAX)
            } else {
                // The bucket held an older period: it starts again.
                (0, 0)
            };
            // Full: halve both counts, which keeps their ratio (and so the
            // refusal, but for the `+ 1`).
            while a + accepts > COUNT_MAX || r + rejects > COUNT_MAX {
                if a == 0 && r == 0 {
                    break;
                }
                a /= 2;
                r /= 2;
            }
            let a = (a + accepts).min(COUNT_MAX);
            let r = (r + rejects).min(COUNT_MAX);
            let new = (period << (2 * COUNT_BITS)) | (a << COUNT_BITS) | r;
            match slot.compare_exchange_weak(word, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return,
                Err(now) => word = now,
            }
        }
    }

    /// The counts of the window that ends now, the pending accepts
    /// included.
    pub(crate) fn counts(&self, p: &ThrottleParams) -> Counts {
        let period = self.period(p, Instant::now());
        self.fold(period);
        self.counts_at(period)
    }

    /// The counts of the window whose last bucket is `period`, the pending
    /// accepts folded in already.
    fn counts_at(&self, period: u64) -> Counts {
        let mut counts = Counts::default();
        for slot in &self.buckets {
            let word = slot.load(Ordering::Relaxed);
            let age = period.wrapping_sub(word >> (2 * COUNT_BITS)) & PERIOD_MASK;
            // A bucket of the last `BUCKETS` periods. One left untouched
            // for exactly 2^24 periods would be taken as recent: a count
            // that old is never read by a spec in use, which turns its
            // bucket over each period it is called.
            if (age as usize) < BUCKETS {
                let accepts = (word >> COUNT_BITS) & COUNT_MAX;
                let rejects = word & COUNT_MAX;
                counts.accepts += accepts;
                counts.requests += accepts + rejects;
            }
        }
        counts
    }

    /// Whether the next retry goes ahead: `draw` gives a uniform number in
    /// `0..1`, and is called only when the refusal's probability is above
    /// 0 (nothing failed in the window: no draw).
    pub(crate) fn admits(&self, p: &ThrottleParams, draw: impl FnOnce() -> f64) -> bool {
        let refusal = self.counts(p).refusal(p.k);
        refusal <= 0.0 || draw() >= refusal
    }
}

/// A first attempt refused by the throttle: the counts of the window that
/// refused it (before it was counted in).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Refused {
    pub(crate) counts: Counts,
    pub(crate) refusal: f64,
}

impl Throttle {
    /// Whether a call's first attempt goes ahead (`first_calls`): as
    /// [`admits`](Self::admits), with one clock read for the decision and
    /// the count. A refused first attempt is counted in the window as a
    /// request that was not accepted: the SRE book counts the requests the
    /// application attempted, those the client refused included, so that
    /// the refusals rise while the application keeps asking more than the
    /// dependency accepts.
    pub(crate) fn first_call(
        &self,
        p: &ThrottleParams,
        draw: impl FnOnce() -> f64,
    ) -> Result<(), Refused> {
        if !self.may_refuse() {
            return Ok(());
        }
        let period = self.period(p, Instant::now());
        self.fold(period);
        let counts = self.counts_at(period);
        let refusal = counts.refusal(p.k);
        if refusal <= 0.0 || draw() >= refusal {
            return Ok(());
        }
        self.add(period, 0, 1);
        self.rejected.store(period + 1, Ordering::Relaxed);
        Err(Refused { counts, refusal })
    }

    /// Whether the window may hold a request not accepted, read without
    /// the clock: the last one is less than a window older than the last
    /// clock read, which is never later than now (a window with none has
    /// at most as many requests as accepts, and `k > 1` refuses nothing
    /// then). A last clock read seen before the last rejection (a race
    /// between two folds) counts as recent.
    #[inline]
    fn may_refuse(&self) -> bool {
        let last = self.rejected.load(Ordering::Relaxed);
        if last == 0 {
            return false;
        }
        let read = self.pending.load(Ordering::Relaxed) >> PENDING_BITS;
        let age = read.wrapping_sub(last - 1) & PERIOD_MASK;
        (age as usize) < BUCKETS || age > PERIOD_MASK / 2
    }
}

/// Whether counts kept under `a` still mean the same under `b`: their
/// buckets are as long.
pub(crate) fn same_window(a: &ThrottleParams, b: &ThrottleParams) -> bool {
    a.period == b.period
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn params(k: f64) -> ThrottleParams {
        ThrottleParams::of(&ThrottleSettings {
            k,
            window: Duration::from_secs(16),
            first_calls: true,
        })
    }

    #[test]
    fn refusal_is_the_sre_formula() {
        let c = Counts {
            requests: 10,
            accepts: 2,
        };
        // (10 − 2·2) / 11
        assert!((c.refusal(2.0) - 6.0 / 11.0).abs() < 1e-12);
        let c = Counts {
            requests: 10,
            accepts: 5,
        };
        assert_eq!(c.refusal(2.0), 0.0);
    }

    #[tokio::test(start_paused = true)]
    async fn counts_leave_the_window_bucket_by_bucket() {
        let (t, p) = (Throttle::new(), params(2.0));
        t.record(&p, true);
        t.record(&p, false);
        assert_eq!(
            t.counts(&p),
            Counts {
                requests: 2,
                accepts: 1
            }
        );
        tokio::time::advance(Duration::from_secs(15)).await;
        t.record(&p, false);
        assert_eq!(t.counts(&p).requests, 3);
        // The first bucket is now 16 periods old: out of the window.
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(
            t.counts(&p),
            Counts {
                requests: 1,
                accepts: 0
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_bucket_halves_both_counts() {
        let (t, p) = (Throttle::new(), params(2.0));
        let period = 0u64;
        t.buckets[0].store(
            (period << (2 * COUNT_BITS)) | (COUNT_MAX << COUNT_BITS) | 1000,
            Ordering::Relaxed,
        );
        t.record(&p, true);
        let c = t.counts(&p);
        assert_eq!(c.accepts, COUNT_MAX / 2 + 1);
        assert_eq!(c.requests, COUNT_MAX / 2 + 1 + 500);
    }

    #[tokio::test(start_paused = true)]
    async fn successes_are_counted_without_a_clock_read_dated_at_the_last_one() {
        let (t, p) = (Throttle::new(), params(2.0));
        for _ in 0..5 {
            t.accept(&p);
        }
        // Pending: in no bucket yet.
        assert!(t.buckets.iter().all(|b| b.load(Ordering::Relaxed) == 0));
        // 15 s later they are read, dated at the last clock read (bucket
        // 0): still in the 16 s window, and gone a second later.
        tokio::time::advance(Duration::from_secs(15)).await;
        assert_eq!(
            t.counts(&p),
            Counts {
                requests: 5,
                accepts: 5
            }
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(t.counts(&p), Counts::default());
    }

    #[tokio::test(start_paused = true)]
    async fn accepts_of_a_quiet_period_long_ago_are_not_recent() {
        let (t, p) = (Throttle::new(), params(2.0));
        for _ in 0..10 {
            t.accept(&p);
        }
        // An hour without a clock read, then a failure.
        tokio::time::advance(Duration::from_secs(3600)).await;
        t.record(&p, false);
        assert_eq!(
            t.counts(&p),
            Counts {
                requests: 1,
                accepts: 0
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_fold_th_success_puts_the_pending_in_the_window() {
        let (t, p) = (Throttle::new(), params(2.0));
        for _ in 0..FOLD - 1 {
            t.accept(&p);
        }
        assert!(t.buckets.iter().all(|b| b.load(Ordering::Relaxed) == 0));
        t.accept(&p);
        let in_buckets: u64 = t
            .buckets
            .iter()
            .map(|b| (b.load(Ordering::Relaxed) >> COUNT_BITS) & COUNT_MAX)
            .sum();
        assert_eq!(in_buckets, FOLD);
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_first_call_counts_as_a_request_not_accepted() {
        let (t, p) = (Throttle::new(), params(2.0));
        // Nothing in the window: admitted, no draw, nothing counted.
        assert_eq!(t.first_call(&p, || unreachable!("no draw")), Ok(()));
        assert_eq!(t.counts(&p), Counts::default());
        t.record(&p, false);
        // 1 request, 0 accepts: refused with probability ½; a draw below.
        assert_eq!(
            t.first_call(&p, || 0.25),
            Err(Refused {
                counts: Counts {
                    requests: 1,
                    accepts: 0
                },
                refusal: 0.5,
            })
        );
        assert_eq!(
            t.counts(&p),
            Counts {
                requests: 2,
                accepts: 0
            }
        );
        // A draw at or above the refusal admits, and counts nothing yet.
        assert_eq!(t.first_call(&p, || 0.9), Ok(()));
        assert_eq!(t.counts(&p).requests, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_first_call_reads_no_clock_while_the_window_holds_no_rejection() {
        let (t, p) = (Throttle::new(), params(2.0));
        let in_buckets = |t: &Throttle| {
            t.buckets
                .iter()
                .map(|b| (b.load(Ordering::Relaxed) >> COUNT_BITS) & COUNT_MAX)
                .sum::<u64>()
        };
        for _ in 0..5 {
            t.accept(&p);
        }
        // No rejection ever: admitted without a clock read, so without
        // folding the pending accepts.
        assert_eq!(t.first_call(&p, || unreachable!("no draw")), Ok(()));
        assert_eq!(in_buckets(&t), 0);
        // A rejection: the next first call reads the clock (and folds).
        t.record(&p, false);
        assert_eq!(t.first_call(&p, || 0.99), Ok(()));
        // A window later, a clock read (an accepted failure) leaves the
        // rejection behind: no clock read again, the accept stays pending.
        tokio::time::advance(Duration::from_secs(16)).await;
        t.record(&p, true);
        t.accept(&p);
        let before = t.pending.load(Ordering::Relaxed);
        assert_eq!(t.first_call(&p, || unreachable!("no draw")), Ok(()));
        assert_eq!(t.pending.load(Ordering::Relaxed), before);
        // Cleared: no rejection known.
        t.record(&p, false);
        t.clear();
        assert!(!t.may_refuse());
    }

    #[test]
    fn nothing_failed_draws_nothing() {
        let (t, p) = (Throttle::new(), params(2.0));
        for _ in 0..100 {
            t.record(&p, true);
        }
        assert!(t.admits(&p, || unreachable!("a draw with nothing failed")));
    }
}
