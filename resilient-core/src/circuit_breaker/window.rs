//! The windows a breaker counts outcomes in.
//!
//! All three record a completed call with a few atomic operations and no lock;
//! none reads the clock except the time-based one. A success that replaces a
//! success in a count-based window changes no counter at all.

use std::cell::Cell;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicU8, AtomicUsize, Ordering};

use super::settings::WindowSettings;

/// The counts a failure rate is computed from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
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

#[derive(Debug)]
pub(crate) enum Window {
    Fixed(Fixed),
    Slots(Slots),
    Time(Time),
}

impl Window {
    pub(crate) fn new(settings: &WindowSettings) -> Self {
        match *settings {
            WindowSettings::FixedWindow { window_size } => Window::Fixed(Fixed {
                counts: AtomicU64::new(0),
                size: u64::from(window_size),
            }),
            WindowSettings::RingBuffer { window_size } => Window::Slots(Slots::new(window_size, 1)),
            WindowSettings::StripedApprox {
                window_size,
                stripes,
            } => Window::Slots(Slots::new(window_size, stripes.min(window_size))),
            WindowSettings::TimeBased {
                window_duration,
                sample_count,
                counter_stripes,
            } => Window::Time(Time::new(
                u64::try_from(window_duration.as_nanos()).unwrap_or(u64::MAX),
                sample_count,
                counter_stripes,
            )),
        }
    }

    /// Whether recording needs the current time.
    pub(crate) fn needs_clock(&self) -> bool {
        matches!(self, Window::Time(_))
    }

    /// Records a call; for an outcome that can open the breaker, returns the
    /// counts to evaluate. `now` (nanoseconds since the breaker's start) is
    /// read only by the time-based window.
    pub(crate) fn record(&self, record: Record, now: u64) -> Option<Counts> {
        match self {
            Window::Fixed(w) => w.record(record),
            Window::Slots(w) => {
                w.record(record);
                record.is_bad().then(|| w.snapshot())
            }
            Window::Time(w) => {
                w.record(record, now);
                record.is_bad().then(|| w.snapshot(now))
            }
        }
    }

    pub(crate) fn snapshot(&self, now: u64) -> Counts {
        match self {
            Window::Fixed(w) => unpack(w.counts.load(Ordering::Acquire)),
            Window::Slots(w) => w.snapshot(),
            Window::Time(w) => w.snapshot(now),
        }
    }

    pub(crate) fn clear(&self) {
        match self {
            Window::Fixed(w) => w.counts.store(0, Ordering::Release),
            Window::Slots(w) => w.clear(),
            Window::Time(w) => w.clear(),
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
        (record.is_bad() || after.total >= self.size).then_some(after)
    }
}

// ------------------------------------------------------------------ slots

const FAILED: u8 = 0b010;
const SLOW: u8 = 0b100;
const FILLED: u8 = 0b001;

/// The last calls, one slot each, in one stripe (`ring_buffer`) or several
/// (`striped_approx`). Counters follow the slots exactly: every change of a
/// slot is a swap whose difference is added to its stripe's counters.
#[derive(Debug)]
pub(crate) struct Slots {
    stripes: Box<[Stripe]>,
}

#[derive(Debug)]
#[repr(align(64))]
struct Stripe {
    slots: Box<[AtomicU8]>,
    cursor: AtomicUsize,
    total: AtomicI64,
    failures: AtomicI64,
    slow: AtomicI64,
}

thread_local! {
    /// Each thread walks the stripes in turn from its own starting point, so a
    /// single caller fills the whole window and concurrent callers mostly
    /// touch different stripes.
    static NEXT_STRIPE: Cell<usize> = Cell::new(thread_seed());
}

fn thread_seed() -> usize {
    static SEED: AtomicUsize = AtomicUsize::new(0);
    SEED.fetch_add(0x9E37_79B9, Ordering::Relaxed)
}

fn next_stripe(count: usize) -> usize {
    if count == 1 {
        return 0;
    }
    NEXT_STRIPE.with(|next| {
        let n = next.get();
        next.set(n.wrapping_add(1));
        n % count
    })
}

impl Slots {
    /// `size` slots split as evenly as possible over `stripes` stripes, so
    /// that the window holds exactly `size` calls.
    fn new(size: u32, stripes: u32) -> Self {
        let stripes = stripes.max(1);
        let (base, extra) = (size / stripes, size % stripes);
        let stripes = (0..stripes)
            .map(|i| {
                let len = base + u32::from(i < extra);
                Stripe {
                    slots: (0..len).map(|_| AtomicU8::new(0)).collect(),
                    cursor: AtomicUsize::new(0),
                    total: AtomicI64::new(0),
                    failures: AtomicI64::new(0),
                    slow: AtomicI64::new(0),
                }
            })
            .collect();
        Self { stripes }
    }

    fn record(&self, record: Record) {
        let stripe = &self.stripes[next_stripe(self.stripes.len())];
        let len = stripe.slots.len();
        let at = stripe.cursor.fetch_add(1, Ordering::Relaxed) % len;
        let code =
            FILLED | if record.failed { FAILED } else { 0 } | if record.slow { SLOW } else { 0 };
        let slot = &stripe.slots[at];
        // The common case, a success replacing a success, changes nothing:
        // skip the write.
        if slot.load(Ordering::Acquire) == code {
            return;
        }
        let old = slot.swap(code, Ordering::AcqRel);
        stripe.apply(old, code);
    }

    fn snapshot(&self) -> Counts {
        let mut c = Counts::default();
        for s in self.stripes.iter() {
            // A counter can be negative for an instant while another thread
            // is between its swap and its update.
            c.total += clamp(s.total.load(Ordering::Acquire));
            c.failures += clamp(s.failures.load(Ordering::Acquire));
            c.slow += clamp(s.slow.load(Ordering::Acquire));
        }
        c
    }

    fn clear(&self) {
        for stripe in self.stripes.iter() {
            for slot in stripe.slots.iter() {
                let old = slot.swap(0, Ordering::AcqRel);
                stripe.apply(old, 0);
            }
        }
    }
}

fn clamp(x: i64) -> u64 {
    u64::try_from(x).unwrap_or(0)
}

impl Stripe {
    fn apply(&self, old: u8, new: u8) {
        let bit = |code: u8, bit: u8| i64::from(code & bit != 0);
        for (counter, flag) in [
            (&self.total, FILLED),
            (&self.failures, FAILED),
            (&self.slow, SLOW),
        ] {
            let delta = bit(new, flag) - bit(old, flag);
            if delta != 0 {
                counter.fetch_add(delta, Ordering::AcqRel);
            }
        }
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
        let c = &bucket.counters[next_stripe(bucket.counters.len())];
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
                out.total += c.total.load(Ordering::Acquire);
                out.failures += c.failures.load(Ordering::Acquire);
                out.slow += c.slow.load(Ordering::Acquire);
            }
        }
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
        for _ in 0..100 {
            w.record(OK);
        }
        assert_eq!(w.snapshot().total, 10);
        for _ in 0..10 {
            w.record(FAIL);
        }
        assert_eq!(
            w.snapshot(),
            Counts {
                total: 10,
                failures: 10,
                slow: 0
            }
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
    fn clearing_slots_zeroes_the_counters() {
        let w = Slots::new(8, 2);
        for _ in 0..5 {
            w.record(FAIL);
        }
        w.clear();
        assert_eq!(w.snapshot(), Counts::default());
    }
}
