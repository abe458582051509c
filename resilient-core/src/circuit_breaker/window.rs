//! The windows a breaker counts outcomes in.
//!
//! All three record a completed call with a few atomic operations and no lock;
//! none reads the clock except the time-based one. A success that replaces a
//! success in a count-based window changes no counter, and one that finds a
//! full stripe of successes writes nothing at all: it only reads.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use super::settings::WindowSettings;

/// The counts a failure rate is computed from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Counts {
    /// Calls counted (successes and failures; ignored calls are not counted).
    pub total: u64,
    /// Failed calls among them.
    pub failures: u64,
    /// Slow calls among them (failed or not).
    pub slow: u64,
}

impl Counts {
    /// `part` of `total`, in whole percent (rounded down), as the thresholds
    /// are compared.
    pub(crate) fn percent(part: u64, total: u64) -> u64 {
        if total == 0 {
            0
        } else {
            // u128: part·100 cannot overflow.
            u64::try_from(u128::from(part) * 100 / u128::from(total)).unwrap_or(100)
        }
    }
}

/// One completed call, as a window records it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Record {
    pub(crate) failed: bool,
    pub(crate) slow: bool,
}

impl Record {
    /// Whether this outcome can open the breaker (only those trigger an
    /// evaluation of the rates).
    pub(crate) fn is_bad(self) -> bool {
        self.failed || self.slow
    }
}

/// A window, and the shape of settings it was built for.
#[derive(Debug)]
pub(crate) struct Window {
    shape: WindowSettings,
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    Fixed(Fixed),
    Slots(Slots),
    Time(Time),
}

impl Window {
    pub(crate) fn new(settings: &WindowSettings) -> Self {
        let inner = match *settings {
            WindowSettings::FixedWindow { window_size } => Inner::Fixed(Fixed {
                counts: AtomicU64::new(0),
                size: u64::from(window_size),
            }),
            WindowSettings::RingBuffer { window_size } => Inner::Slots(Slots::new(window_size, 1)),
            WindowSettings::StripedApprox {
                window_size,
                stripes,
            } => Inner::Slots(Slots::new(window_size, stripes.min(window_size))),
            WindowSettings::TimeBased {
                window_duration,
                sample_count,
                counter_stripes,
            } => Inner::Time(Time::new(
                u64::try_from(window_duration.as_nanos()).unwrap_or(u64::MAX),
                sample_count,
                counter_stripes,
            )),
        };
        Self {
            shape: *settings,
            inner,
        }
    }

    /// The settings it was built for.
    pub(crate) fn shape(&self) -> WindowSettings {
        self.shape
    }

    /// Whether recording needs the current time.
    #[inline]
    pub(crate) fn needs_clock(&self) -> bool {
        matches!(self.inner, Inner::Time(_))
    }

    /// Records a call of the closed period `generation`; for an outcome that
    /// can open the breaker, returns the counts to evaluate. `now`
    /// (nanoseconds since the breaker's start) is read only by the time-based
    /// window.
    #[inline(always)]
    pub(crate) fn record(&self, record: Record, generation: u64, now: u64) -> Option<Counts> {
        match &self.inner {
            Inner::Fixed(w) => w.record(record),
            Inner::Slots(w) => {
                loop {
                    match w.record(record, generation) {
                        Ok(()) => break,
                        Err(NotRecorded::Unstarted) => w.start(generation),
                        Err(NotRecorded::Stale) => return None,
                    }
                }
                if record.is_bad() {
                    w.snapshot(generation)
                } else {
                    None
                }
            }
            Inner::Time(w) => {
                w.record(record, now);
                record.is_bad().then(|| w.snapshot(now))
            }
        }
    }

    /// The counts of the closed period `generation`.
    pub(crate) fn snapshot(&self, generation: u64, now: u64) -> Counts {
        match &self.inner {
            Inner::Fixed(w) => unpack(w.counts.load(Ordering::Acquire)),
            Inner::Slots(w) => w.snapshot(generation).unwrap_or_default(),
            Inner::Time(w) => w.snapshot(now),
        }
    }

    /// Forgets every call: a new closed period begins. The slot windows need
    /// nothing (each word carries its period's tag), the fixed window one
    /// store, the time-based one a store per bucket.
    pub(crate) fn clear(&self) {
        match &self.inner {
            Inner::Fixed(w) => w.counts.store(0, Ordering::Release),
            Inner::Slots(_) => {}
            Inner::Time(w) => w.clear(),
        }
    }
}

// ------------------------------------------------------------------ fixed

/// Tumbling windows: three 21-bit counters packed in one word, reset when the
/// window is full.
#[derive(Debug)]
pub(crate) struct Fixed {
    counts: AtomicU64,
    size: u64,
}

const BITS: u32 = 21;
const MASK: u64 = (1 << BITS) - 1;

fn unpack(w: u64) -> Counts {
    Counts {
        total: w & MASK,
        failures: (w >> BITS) & MASK,
        slow: (w >> (2 * BITS)) & MASK,
    }
}

fn pack(c: Counts) -> u64 {
    c.total | (c.failures << BITS) | (c.slow << (2 * BITS))
}

impl Fixed {
    fn record(&self, record: Record) -> Option<Counts> {
        let mut after = Counts::default();
        let _ = self
            .counts
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                let c = unpack(w);
                after = Counts {
                    total: c.total + 1,
                    failures: c.failures + u64::from(record.failed),
                    slow: c.slow + u64::from(record.slow),
                };
                // A full window starts over; validation keeps `size` within
                // the counters' 21 bits.
                Some(if after.total >= self.size {
                    0
                } else {
                    pack(after)
                })
            });
        // Only a failed or slow call is judged: a success never opens the
        // breaker, even the one that fills the window.
        record.is_bad().then_some(after)
    }
}

// ------------------------------------------------------------------ slots

const FAILED: u8 = 0b010;
const SLOW: u8 = 0b100;
const FILLED: u8 = 0b001;

// Every word of a stripe carries the 24-bit tag of the closed period it
// belongs to (the low bits of the breaker's generation). A transition touches
// no slot: a word of an older period reads as empty, and the first call of a
// new period starts its stripe afresh (`Slots::start`).
const TAG_BITS: u32 = 24;
const TAG_MASK: u64 = (1 << TAG_BITS) - 1;
const TAG_SHIFT: u32 = 64 - TAG_BITS;
// The cursor: tag | full (1) | lap (16) | position (23).
const POS_BITS: u32 = 23;
const POS_MASK: u64 = (1 << POS_BITS) - 1;
const LAP_BITS: u32 = 16;
const LAP_MASK: u64 = (1 << LAP_BITS) - 1;
const FULL_BIT: u64 = 1 << (POS_BITS + LAP_BITS);
// A slot: tag | lap (16) | code (3). A counter: tag | value (40, two's
// complement: it can dip below zero while two writers of one slot are between
// their slot write and their counter update).
const CODE_BITS: u32 = 3;
const VALUE_BITS: u32 = 40;
const VALUE_MASK: u64 = (1 << VALUE_BITS) - 1;

fn tag_of(word: u64) -> u64 {
    word >> TAG_SHIFT
}

fn with_tag(tag: u64, rest: u64) -> u64 {
    ((tag & TAG_MASK) << TAG_SHIFT) | rest
}

/// How the tag of a word compares with `mine` (modulo 2^24: a word is older
/// when it lies less than half the tag space behind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Age {
    Older,
    Same,
    Newer,
}

fn age(word_tag: u64, mine: u64) -> Age {
    let behind = mine.wrapping_sub(word_tag) & TAG_MASK;
    if behind == 0 {
        Age::Same
    } else if behind < 1 << (TAG_BITS - 1) {
        Age::Older
    } else {
        Age::Newer
    }
}

/// Whether lap `a` is after lap `b` (modulo 2^16).
fn lap_after(a: u64, b: u64) -> bool {
    let ahead = a.wrapping_sub(b) & LAP_MASK;
    ahead != 0 && ahead < 1 << (LAP_BITS - 1)
}

fn value(word: u64) -> i64 {
    // Sign-extend the 40-bit field.
    ((word & VALUE_MASK) << (64 - VALUE_BITS)) as i64 >> (64 - VALUE_BITS)
}

thread_local! {
    /// Each thread walks the stripes in turn from its own starting point,
    /// staying on a stripe for as many calls as it holds: a single caller
    /// fills the window in order, as a ring buffer would, and concurrent
    /// callers mostly write to stripes (cache lines) of their own. Holds the
    /// stripe and the calls left to make in it.
    static NEXT_STRIPE: Cell<(usize, usize)> = Cell::new((thread_seed(), 0));
}

fn thread_seed() -> usize {
    static SEED: AtomicUsize = AtomicUsize::new(0);
    SEED.fetch_add(7, Ordering::Relaxed)
}

/// The stripe of the calling thread's next call: the current one until the
/// thread has made `len(stripe)` calls in it, then the next.
#[inline]
fn next_stripe(count: usize, len: impl Fn(usize) -> usize) -> usize {
    if count == 1 {
        return 0;
    }
    NEXT_STRIPE.with(|next| {
        let (mut stripe, left) = next.get();
        if stripe >= count {
            // Set by a window with more stripes.
            stripe %= count;
        }
        if left == 0 {
            stripe = if stripe + 1 == count { 0 } else { stripe + 1 };
            next.set((stripe, len(stripe).saturating_sub(1)));
        } else {
            next.set((stripe, left - 1));
        }
        stripe
    })
}

/// The last calls, one slot each, in one stripe (`ring_buffer`) or several
/// (`striped_approx`).
///
/// Each stripe hands out its slots in turn from a cursor, and a slot keeps a
/// call until the cursor comes round again: a call leaves its stripe only
/// after the stripe's length of newer calls, whatever the threads. A slot is
/// written only by a call from a later lap than the one it holds, so a thread
/// that was descheduled between taking its slot and writing it cannot
/// overwrite a newer call. The failure and slow counters follow the slots:
/// every change of a slot adds its difference.
///
/// A success that finds its stripe full, both counters at zero and no failed
/// or slow call being recorded takes no slot: it would replace a success,
/// and the stripe's outcomes would be the same. No success is skipped while
/// the stripe holds, or is recording, a failed or slow call, so such a call
/// still leaves only after the stripe's length of newer calls; a skipped
/// success read the stripe before any such call began, and counts as ending
/// before it. This keeps the common path (a healthy dependency) to reads of
/// one cache line that no thread writes.
#[derive(Debug)]
pub(crate) struct Slots {
    stripes: Box<[Stripe]>,
}

#[derive(Debug)]
#[repr(align(64))]
struct Stripe {
    cursor: AtomicU64,
    failures: AtomicU64,
    slow: AtomicU64,
    /// Failed or slow calls being recorded: from before they take their slot
    /// until their counter is updated. A success skips its slot only when
    /// none is, so that no skipped success can come after a failure that is
    /// not counted yet.
    pending: AtomicU64,
    slots: Box<[AtomicU64]>,
}

/// A failed or slow call being recorded in `stripe`, until dropped.
struct Pending<'a>(&'a AtomicU64);

impl<'a> Pending<'a> {
    fn new(pending: &'a AtomicU64) -> Self {
        // SeqCst: a success that starts after this call took its slot (in
        // real time, on any thread) must see it.
        pending.fetch_add(1, Ordering::SeqCst);
        Self(pending)
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Stripe {
    /// Whether every slot of the stripe holds a success of period `tag`.
    #[inline]
    fn holds_only_successes(&self, tag: u64) -> bool {
        let none = with_tag(tag, 0);
        self.pending.load(Ordering::SeqCst) == 0
            && self.failures.load(Ordering::Acquire) == none
            && self.slow.load(Ordering::Acquire) == none
            && self.cursor.load(Ordering::Acquire) & !(LAP_MASK << POS_BITS | POS_MASK)
                == with_tag(tag, FULL_BIT)
    }
}

/// Why a call was not recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotRecorded {
    /// The stripe still holds an older period: start it, then record again.
    Unstarted,
    /// The call belongs to a period that has ended.
    Stale,
}

impl Slots {
    /// `size` slots split as evenly as possible over `stripes` stripes, so
    /// that the window holds exactly `size` calls.
    pub(crate) fn new(size: u32, stripes: u32) -> Self {
        let stripes = stripes.clamp(1, size.max(1));
        let (base, extra) = (size / stripes, size % stripes);
        let stripes = (0..stripes)
            .map(|i| {
                let len = base + u32::from(i < extra);
                // Every word starts in the period before the first one.
                let unused = || AtomicU64::new(with_tag(TAG_MASK, 0));
                Stripe {
                    cursor: unused(),
                    failures: unused(),
                    slow: unused(),
                    pending: AtomicU64::new(0),
                    slots: (0..len.max(1)).map(|_| unused()).collect(),
                }
            })
            .collect();
        Self { stripes }
    }

    /// Records a call of the closed period tagged `tag` (the breaker's
    /// generation).
    #[inline(always)]
    pub(crate) fn record(&self, record: Record, tag: u64) -> Result<(), NotRecorded> {
        let stripes = &self.stripes;
        let stripe = &stripes[next_stripe(stripes.len(), |i| stripes[i].slots.len())];
        let tag = tag & TAG_MASK;
        if !record.is_bad() && stripe.holds_only_successes(tag) {
            // The success would replace a success: the window's outcomes stay
            // the same whichever slot it took. Reading three words that no
            // one writes lets concurrent successes share the cache line.
            return Ok(());
        }
        Self::record_in(stripe, record, tag)
    }

    /// [`record`](Self::record) of a call that takes a slot of `stripe`
    /// (period `tag`, masked): out of line, so that a success the window
    /// already holds stays small wherever it is inlined.
    #[inline(never)]
    fn record_in(stripe: &Stripe, record: Record, tag: u64) -> Result<(), NotRecorded> {
        let _pending = record.is_bad().then(|| Pending::new(&stripe.pending));
        let len = stripe.slots.len() as u64;
        // Take the next slot of the stripe.
        let mut ticket = (0, 0);
        let mut unstarted = false;
        let taken = stripe
            .cursor
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                match age(tag_of(c), tag) {
                    Age::Same => {}
                    Age::Older => {
                        unstarted = true;
                        return None;
                    }
                    Age::Newer => return None,
                }
                let (full, lap, pos) = (c & FULL_BIT, (c >> POS_BITS) & LAP_MASK, c & POS_MASK);
                ticket = (lap, pos);
                Some(if pos + 1 == len {
                    with_tag(tag, FULL_BIT | (((lap + 1) & LAP_MASK) << POS_BITS))
                } else {
                    with_tag(tag, full | (lap << POS_BITS) | (pos + 1))
                })
            });
        if taken.is_err() {
            return Err(if unstarted {
                NotRecorded::Unstarted
            } else {
                NotRecorded::Stale
            });
        }
        let (lap, pos) = ticket;
        let code =
            FILLED | if record.failed { FAILED } else { 0 } | if record.slow { SLOW } else { 0 };
        let mine = with_tag(tag, (lap << CODE_BITS) | u64::from(code));
        let mut old = 0u8;
        let written =
            stripe.slots[pos as usize].fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                match age(tag_of(s), tag) {
                    // A slot of an earlier period is empty for this one.
                    Age::Older => {
                        old = 0;
                        Some(mine)
                    }
                    Age::Same if lap_after(lap, (s >> CODE_BITS) & LAP_MASK) => {
                        old = (s & 0b111) as u8;
                        Some(mine)
                    }
                    // A later call already holds the slot (this thread was
                    // descheduled for a whole lap), or a later period began.
                    _ => None,
                }
            });
        if written.is_err() || old == code {
            return Ok(());
        }
        let delta = |flag: u8| i64::from(code & flag != 0) - i64::from(old & flag != 0);
        for (counter, flag) in [(&stripe.failures, FAILED), (&stripe.slow, SLOW)] {
            let d = delta(flag);
            if d != 0 {
                let _ = counter.fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                    (age(tag_of(w), tag) == Age::Same)
                        .then(|| with_tag(tag, (w as i64).wrapping_add(d) as u64 & VALUE_MASK))
                });
            }
        }
        Ok(())
    }

    /// Starts period `tag` in every stripe that still holds an older one:
    /// counters first, then the cursor that lets calls in.
    pub(crate) fn start(&self, tag: u64) {
        let tag = tag & TAG_MASK;
        let fresh = |word: &AtomicU64| {
            let _ = word.fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                (age(tag_of(w), tag) == Age::Older).then_some(with_tag(tag, 0))
            });
        };
        for stripe in self.stripes.iter() {
            fresh(&stripe.failures);
            fresh(&stripe.slow);
            fresh(&stripe.cursor);
        }
    }

    /// The counts of period `tag`; `None` if a later period has begun.
    pub(crate) fn snapshot(&self, tag: u64) -> Option<Counts> {
        let tag = tag & TAG_MASK;
        let mut c = Counts::default();
        for stripe in self.stripes.iter() {
            // Counters before the cursor: every call they count took its
            // slot before, so failures never exceed the calls.
            let failures = stripe.failures.load(Ordering::Acquire);
            let slow = stripe.slow.load(Ordering::Acquire);
            let cursor = stripe.cursor.load(Ordering::Acquire);
            let total = match age(tag_of(cursor), tag) {
                Age::Older => continue,
                Age::Newer => return None,
                Age::Same if cursor & FULL_BIT != 0 => stripe.slots.len() as u64,
                Age::Same => cursor & POS_MASK,
            };
            let count = |w: u64| match age(tag_of(w), tag) {
                Age::Same => u64::try_from(value(w)).unwrap_or(0).min(total),
                _ => 0,
            };
            c.total += total;
            c.failures += count(failures);
            c.slow += count(slow);
        }
        Some(c)
    }
}

// ------------------------------------------------------------------ time

/// The calls of the last `window` nanoseconds in `sample_count` buckets, each
/// with `counter_stripes` sets of counters.
#[derive(Debug)]
pub(crate) struct Time {
    buckets: Box<[Bucket]>,
    bucket_len: u64,
    window: u64,
}

const NEVER: u64 = u64::MAX;

#[derive(Debug)]
struct Bucket {
    start: AtomicU64,
    counters: Box<[Counters]>,
}

#[derive(Debug, Default)]
#[repr(align(64))]
struct Counters {
    total: AtomicU64,
    failures: AtomicU64,
    slow: AtomicU64,
}

impl Time {
    fn new(window: u64, samples: u32, stripes: u32) -> Self {
        let samples = u64::from(samples.max(1));
        let bucket_len = window.div_ceil(samples).max(1);
        let stripes = stripes.max(1).next_power_of_two() as usize;
        let buckets = (0..samples)
            .map(|_| Bucket {
                start: AtomicU64::new(NEVER),
                counters: (0..stripes).map(|_| Counters::default()).collect(),
            })
            .collect();
        Self {
            buckets,
            bucket_len,
            window,
        }
    }

    fn record(&self, record: Record, now: u64) {
        let start = now - now % self.bucket_len;
        let index =
            usize::try_from((start / self.bucket_len) % self.buckets.len() as u64).unwrap_or(0);
        let bucket = &self.buckets[index];
        loop {
            let seen = bucket.start.load(Ordering::Acquire);
            if seen == start {
                break;
            }
            if seen != NEVER && seen > start {
                // A later bucket already took the place: this call is too old
                // to count.
                return;
            }
            if bucket
                .start
                .compare_exchange(seen, start, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                for c in bucket.counters.iter() {
                    c.total.store(0, Ordering::Release);
                    c.failures.store(0, Ordering::Release);
                    c.slow.store(0, Ordering::Release);
                }
                break;
            }
        }
        let c = &bucket.counters[next_stripe(bucket.counters.len(), |_| 1)];
        c.total.fetch_add(1, Ordering::AcqRel);
        if record.failed {
            c.failures.fetch_add(1, Ordering::AcqRel);
        }
        if record.slow {
            c.slow.fetch_add(1, Ordering::AcqRel);
        }
    }

    fn snapshot(&self, now: u64) -> Counts {
        let mut out = Counts::default();
        for bucket in self.buckets.iter() {
            let start = bucket.start.load(Ordering::Acquire);
            if start == NEVER || start > now || now - start >= self.window {
                continue;
            }
            for c in bucket.counters.iter() {
                // Failures before the total: a call adds its total first, so
                // the failures read never exceed it.
                let failures = c.failures.load(Ordering::Acquire);
                let slow = c.slow.load(Ordering::Acquire);
                out.total += c.total.load(Ordering::Acquire);
                out.failures += failures;
                out.slow += slow;
            }
        }
        // A bucket restarted between the reads can still leave more failures
        // than calls: a rate never exceeds 100 %.
        out.failures = out.failures.min(out.total);
        out.slow = out.slow.min(out.total);
        out
    }

    fn clear(&self) {
        for bucket in self.buckets.iter() {
            bucket.start.store(NEVER, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: Record = Record {
        failed: false,
        slow: false,
    };
    const FAIL: Record = Record {
        failed: true,
        slow: false,
    };

    #[test]
    fn striped_window_holds_exactly_its_size_for_one_caller() {
        // 16 stripes asked for a window of 10: one slot per stripe.
        let w = Slots::new(10, 10);
        w.start(0);
        for _ in 0..100 {
            assert_eq!(w.record(OK, 0), Ok(()));
        }
        assert_eq!(w.snapshot(0).map(|c| c.total), Some(10));
        for _ in 0..10 {
            assert_eq!(w.record(FAIL, 0), Ok(()));
        }
        assert_eq!(
            w.snapshot(0),
            Some(Counts {
                total: 10,
                failures: 10,
                slow: 0
            })
        );
    }

    #[test]
    fn fixed_window_restarts_when_full() {
        let w = Fixed {
            counts: AtomicU64::new(0),
            size: 3,
        };
        assert_eq!(w.record(FAIL).map(|c| c.total), Some(1));
        w.record(OK);
        w.record(OK);
        assert_eq!(unpack(w.counts.load(Ordering::Acquire)), Counts::default());
    }

    #[test]
    fn time_window_forgets_buckets_older_than_the_window() {
        let w = Time::new(1_000, 10, 1);
        w.record(FAIL, 50);
        w.record(OK, 950);
        assert_eq!(
            w.snapshot(999),
            Counts {
                total: 2,
                failures: 1,
                slow: 0
            }
        );
        // At 1000 the bucket [0, 100) has left the window.
        assert_eq!(
            w.snapshot(1_000),
            Counts {
                total: 1,
                failures: 0,
                slow: 0
            }
        );
        // Reusing a bucket's place resets it.
        w.record(OK, 1_020);
        assert_eq!(
            w.snapshot(1_020),
            Counts {
                total: 2,
                failures: 0,
                slow: 0
            }
        );
    }

    #[test]
    fn a_single_caller_keeps_exactly_the_last_calls_in_uneven_stripes() {
        // 100 slots in 16 stripes: four of 7, twelve of 6.
        let w = Slots::new(100, 16);
        w.start(0);
        for _ in 0..100 {
            assert_eq!(w.record(FAIL, 0), Ok(()));
        }
        for _ in 0..99 {
            assert_eq!(w.record(OK, 0), Ok(()));
        }
        assert_eq!(
            w.snapshot(0),
            Some(Counts {
                total: 100,
                failures: 1,
                slow: 0
            }),
            "the last 100 calls: one failure, 99 successes"
        );
    }

    #[test]
    fn a_new_period_starts_with_an_empty_window() {
        let w = Slots::new(8, 2);
        assert_eq!(w.record(FAIL, 0), Err(NotRecorded::Unstarted));
        w.start(0);
        for _ in 0..5 {
            assert_eq!(w.record(FAIL, 0), Ok(()));
        }
        assert_eq!(w.snapshot(0).map(|c| c.failures), Some(5));
        // Period 1 sees nothing of period 0, without a slot being touched.
        assert_eq!(w.snapshot(1), Some(Counts::default()));
        w.start(1);
        assert_eq!(w.record(FAIL, 1), Ok(()));
        assert_eq!(
            w.snapshot(1),
            Some(Counts {
                total: 1,
                failures: 1,
                slow: 0
            })
        );
        // A call of period 0 that ends now changes nothing.
        assert_eq!(w.record(FAIL, 0), Err(NotRecorded::Stale));
        assert_eq!(w.snapshot(0), None);
    }

    #[test]
    fn a_slot_keeps_a_newer_call_against_a_writer_late_by_a_lap() {
        // One slot: tickets of laps 0 and 1 land on it. The lap-1 call writes
        // first; the lap-0 writer, descheduled meanwhile, must not replace it.
        let w = Slots::new(1, 1);
        w.start(0);
        let slot = &w.stripes[0].slots[0];
        let lap1 = with_tag(0, (1 << CODE_BITS) | u64::from(FILLED));
        slot.store(lap1, Ordering::Release);
        w.stripes[0].cursor.store(with_tag(0, 0), Ordering::Release);
        // The late writer takes lap 0 again (the cursor was rewound above to
        // stand for its ticket) and finds the lap-1 call in place.
        assert_eq!(w.record(FAIL, 0), Ok(()));
        assert_eq!(slot.load(Ordering::Acquire), lap1);
        assert_eq!(w.snapshot(0).map(|c| c.failures), Some(0));
    }

    #[test]
    fn a_success_into_a_full_window_of_successes_writes_nothing() {
        let w = Slots::new(4, 1);
        w.start(0);
        let cursor = || w.stripes[0].cursor.load(Ordering::Acquire);
        for _ in 0..3 {
            assert_eq!(w.record(OK, 0), Ok(()));
        }
        let before_full = cursor();
        assert_eq!(w.record(OK, 0), Ok(()));
        assert_ne!(
            cursor(),
            before_full,
            "the call that fills the window takes a slot"
        );
        let full = cursor();
        for _ in 0..100 {
            assert_eq!(w.record(OK, 0), Ok(()));
        }
        assert_eq!(cursor(), full, "successes into all successes take no slot");
        // A failure takes a slot again, and then every call does, until the
        // failure has left the window: the last four calls, exactly.
        assert_eq!(w.record(FAIL, 0), Ok(()));
        for expected in [1, 1, 1, 0] {
            assert_eq!(w.record(OK, 0), Ok(()));
            assert_eq!(
                w.snapshot(0).map(|c| (c.total, c.failures)),
                Some((4, expected))
            );
        }
        let clean = cursor();
        assert_ne!(clean, full);
        assert_eq!(w.record(OK, 0), Ok(()));
        assert_eq!(cursor(), clean);
        // A slow success is not skipped.
        let slow = Record {
            failed: false,
            slow: true,
        };
        assert_eq!(w.record(slow, 0), Ok(()));
        assert_eq!(w.snapshot(0).map(|c| c.slow), Some(1));
    }

    #[test]
    fn a_success_takes_its_slot_while_a_failure_is_being_recorded() {
        let w = Slots::new(4, 1);
        w.start(0);
        for _ in 0..4 {
            assert_eq!(w.record(OK, 0), Ok(()));
        }
        let cursor = || w.stripes[0].cursor.load(Ordering::Acquire);
        let full = cursor();
        // A failure on another thread has taken its slot (or is about to)
        // and has not counted itself yet.
        let in_flight = Pending::new(&w.stripes[0].pending);
        assert_eq!(w.record(OK, 0), Ok(()));
        assert_ne!(cursor(), full, "the success took a slot");
        drop(in_flight);
        let after = cursor();
        assert_eq!(w.record(OK, 0), Ok(()));
        assert_eq!(cursor(), after, "nothing pending: skipped again");
        assert_eq!(w.stripes[0].pending.load(Ordering::SeqCst), 0);
        assert_eq!(w.record(FAIL, 0), Ok(()));
        assert_eq!(
            w.stripes[0].pending.load(Ordering::SeqCst),
            0,
            "a recorded failure is no longer pending"
        );
    }

    #[test]
    fn counters_survive_a_dip_below_zero() {
        let w = Slots::new(4, 1);
        w.start(3);
        let f = &w.stripes[0].failures;
        let _ = f.fetch_update(Ordering::AcqRel, Ordering::Acquire, |x| {
            Some(with_tag(3, (x as i64).wrapping_add(-1) as u64 & VALUE_MASK))
        });
        assert_eq!(value(f.load(Ordering::Acquire)), -1);
        assert_eq!(w.snapshot(3).map(|c| c.failures), Some(0));
    }
}
