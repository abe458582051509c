//! The clock a rate limiter reads once per call.
//!
//! A permit needs the time: the token bucket compares it with its
//! theoretical arrival time, the fixed window with its start. The operating
//! system's monotonic clock (what `std::time::Instant` and tokio's clock
//! read) costs about as much as the rest of a permit together, so a limiter
//! reads the CPU's time-stamp counter instead, through [`quanta`]: one
//! instruction and a multiply, calibrated against the monotonic clock when
//! the process first builds one. quanta reads the monotonic clock itself
//! where the counter is not invariant (or on another architecture), so the
//! time never stands still or runs at another pace than the machine's.
//!
//! Tests on tokio's paused clock (`start_paused`, `advance`) need the
//! limiter to read that clock. A limiter reads it for its whole life when
//! it is built inside a current-thread runtime whose clock is paused, or
//! after [`use_tokio_clock`](super::use_tokio_clock) was called (for a
//! registry that tests share, built by whichever test comes first). Any
//! other limiter reads the counter, which `advance` does not move: a
//! refusal or a reservation that finds the two clocks moving apart since
//! the last such look logs one warning naming the fix.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use super::nanos;

/// A rate limiter's time source, fixed when it is built.
#[derive(Debug)]
pub(super) enum Clock {
    /// The time-stamp counter (or the monotonic clock, where quanta must).
    Counter {
        clock: quanta::Clock,
        origin: u64,
        /// tokio's clock at `origin`, read only on refusals and
        /// reservations: to notice a paused tokio clock that the counter
        /// does not follow.
        tokio_origin: tokio::time::Instant,
        /// At the last look: tokio's reading minus the counter's (ns since
        /// their origins, wrapping), one word so that two threads' looks
        /// never mix their readings; and the counter's reading, for the
        /// tolerance only.
        looked: [AtomicU64; 2],
    },
    /// tokio's clock: the limiter was built while it was paused, or after
    /// `use_tokio_clock`.
    Tokio {
        origin: tokio::time::Instant,
        /// The latest reading (ns since `origin`): a reading never goes
        /// back, though tokio's clock may (a shared limiter used under a
        /// second paused runtime whose clock is behind the first's).
        seen: AtomicU64,
    },
}

impl Clock {
    /// The clock for a limiter built here and now.
    pub(super) fn new() -> Self {
        if TOKIO_CLOCK.load(Ordering::Relaxed) || tokio_clock_is_paused() {
            return Clock::Tokio {
                origin: tokio::time::Instant::now(),
                seen: AtomicU64::new(0),
            };
        }
        // One calibrated clock per process, cloned: making one runs CPUID
        // (microseconds each in a virtual machine), and a keyed spec makes a
        // limiter per new key.
        static COUNTER: OnceLock<quanta::Clock> = OnceLock::new();
        let clock = COUNTER.get_or_init(quanta::Clock::new).clone();
        Clock::Counter {
            origin: clock.raw(),
            tokio_origin: tokio::time::Instant::now(),
            looked: [AtomicU64::new(0), AtomicU64::new(0)],
            clock,
        }
    }

    /// Nanoseconds since the limiter was built.
    #[inline(always)]
    pub(super) fn now_ns(&self) -> u64 {
        match self {
            Clock::Counter { clock, origin, .. } => clock.delta_as_nanos(*origin, clock.raw()),
            Clock::Tokio { origin, seen } => {
                let read = nanos(tokio::time::Instant::now().saturating_duration_since(*origin));
                seen.fetch_max(read, Ordering::Relaxed).max(read)
            }
        }
    }

    /// The tokio instant at which `at_ns` (nanoseconds since the limiter
    /// was built, on this clock) falls: what a reservation sleeps until.
    /// `None` when it lies beyond what an `Instant` holds.
    pub(super) fn deadline(&self, at_ns: u64, wait: Duration) -> Option<tokio::time::Instant> {
        let due = Duration::from_nanos(at_ns).checked_add(wait)?;
        // Relative to the two clocks' readings now: the counter runs at the
        // machine's pace as tokio's clock does, and tokio's own reading may
        // be behind the limiter's (see `seen`).
        let left = due.saturating_sub(Duration::from_nanos(self.now_ns()));
        tokio::time::Instant::now().checked_add(left)
    }

    /// Warns once per process when tokio's clock moved apart from the
    /// counter this limiter reads since the last look (tokio's clock paused
    /// or advanced): called on refusals and reservations only.
    pub(super) fn check_paused(&self, spec: &'static str) {
        static WARNED: AtomicBool = AtomicBool::new(false);
        let Clock::Counter {
            tokio_origin,
            looked,
            ..
        } = self
        else {
            return;
        };
        if WARNED.load(Ordering::Relaxed) || !in_current_thread_runtime() {
            return;
        }
        // The counter on both sides of tokio's reading: a thread preempted
        // between them would see the clocks apart by the preemption.
        let before = self.now_ns();
        let tokio = nanos(tokio::time::Instant::now().saturating_duration_since(*tokio_origin));
        let counter = self.now_ns();
        if counter.saturating_sub(before) > 100_000 {
            return;
        }
        // Since the last look (at the first, since the limiter was built):
        // how far tokio's clock moved from the counter, from one word.
        let offset = tokio.wrapping_sub(counter);
        let last_offset = looked[0].swap(offset, Ordering::Relaxed);
        let last_counter = looked[1].swap(counter, Ordering::Relaxed);
        let apart = (offset.wrapping_sub(last_offset) as i64).unsigned_abs();
        let moved = counter.saturating_sub(last_counter).max(apart);
        // Apart by more than 1 ms and 1 % of what the counter moved by
        // meanwhile: more than the two clocks' paces differ by on any
        // machine (NTP slews the monotonic clock by at most 0.05 %).
        if apart > 1_000_000 && apart > moved / 100 && !WARNED.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                target: "resilient::rate_limiter",
                spec,
                "tokio's clock is paused, but this rate limiter reads the machine's clock: `advance` does not refresh its permits; build the registry inside the paused runtime (`#[tokio::test(start_paused = true)]`), or call `resilient_core::rate_limiter::use_tokio_clock()` before building it"
            );
        }
    }
}

/// Set by [`use_tokio_clock`](super::use_tokio_clock).
static TOKIO_CLOCK: AtomicBool = AtomicBool::new(false);

/// Every rate limiter built from now on reads tokio's clock.
pub(super) fn use_tokio_clock() {
    TOKIO_CLOCK.store(true, Ordering::Relaxed);
}

/// Whether this thread is in a current-thread tokio runtime: only such a
/// runtime can pause its clock, so a refusal anywhere else (a server's
/// multi-thread runtime, a plain thread) looks at no clock for it.
fn in_current_thread_runtime() -> bool {
    tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread)
}

/// Whether this thread is in a current-thread tokio runtime whose clock is
/// paused: tokio's clock then stands still while the machine's moves.
fn tokio_clock_is_paused() -> bool {
    if !in_current_thread_runtime() {
        return false;
    }
    let before = tokio::time::Instant::now();
    let start = std::time::Instant::now();
    // Long enough for any monotonic clock to tick.
    while start.elapsed() < Duration::from_micros(2) {
        std::hint::spin_loop();
    }
    tokio::time::Instant::now() == before
}
