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
//! limiter to read that clock: a limiter built inside a current-thread
//! runtime whose clock is paused reads tokio's clock for its whole life.
//! A limiter built elsewhere and then used under a paused clock reads the
//! counter, which `advance` does not move: its first refusal that finds the
//! two clocks apart logs one warning naming the fix (build the registry
//! after the clock is paused).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::nanos;

/// A rate limiter's time source, fixed when it is built.
#[derive(Debug)]
pub(super) enum Clock {
    /// The time-stamp counter (or the monotonic clock, where quanta must).
    Counter {
        clock: quanta::Clock,
        origin: u64,
        /// tokio's clock at `origin`, read only on refusals: to notice a
        /// paused tokio clock that the counter does not follow.
        tokio_origin: tokio::time::Instant,
    },
    /// tokio's clock, paused when the limiter was built.
    Tokio { origin: tokio::time::Instant },
}

impl Clock {
    /// The clock for a limiter built here and now.
    pub(super) fn new() -> Self {
        if tokio_clock_is_paused() {
            Clock::Tokio {
                origin: tokio::time::Instant::now(),
            }
        } else {
            let clock = quanta::Clock::new();
            Clock::Counter {
                origin: clock.raw(),
                tokio_origin: tokio::time::Instant::now(),
                clock,
            }
        }
    }

    /// Nanoseconds since the limiter was built.
    #[inline(always)]
    pub(super) fn now_ns(&self) -> u64 {
        match self {
            Clock::Counter { clock, origin, .. } => clock.delta_as_nanos(*origin, clock.raw()),
            Clock::Tokio { origin } => {
                nanos(tokio::time::Instant::now().saturating_duration_since(*origin))
            }
        }
    }

    /// The tokio instant at which `at_ns` (nanoseconds since the limiter
    /// was built, on this clock) falls: what a reservation sleeps until.
    /// `None` when it lies beyond what an `Instant` holds.
    pub(super) fn deadline(&self, at_ns: u64, wait: Duration) -> Option<tokio::time::Instant> {
        let due = Duration::from_nanos(at_ns).checked_add(wait)?;
        match self {
            Clock::Tokio { origin } => origin.checked_add(due),
            // The counter's time maps to tokio's by the two clocks' readings
            // now: both run at the machine's pace.
            Clock::Counter { .. } => {
                let left = due.saturating_sub(Duration::from_nanos(self.now_ns()));
                tokio::time::Instant::now().checked_add(left)
            }
        }
    }

    /// Warns once per process when tokio's clock has moved apart from the
    /// counter this limiter reads (tokio's clock paused after the limiter
    /// was built): called on refusals only.
    pub(super) fn check_paused(&self, spec: &'static str) {
        static WARNED: AtomicBool = AtomicBool::new(false);
        let Clock::Counter { tokio_origin, .. } = self else {
            return;
        };
        if WARNED.load(Ordering::Relaxed) {
            return;
        }
        let counter = self.now_ns();
        let tokio = nanos(tokio::time::Instant::now().saturating_duration_since(*tokio_origin));
        // Apart by more than 1 ms and 1 %: more than the two clocks' pace
        // differs by on any machine (NTP slews the monotonic clock by at
        // most 0.05 %).
        let apart = counter.abs_diff(tokio);
        if apart > 1_000_000
            && apart > counter.max(tokio) / 100
            && !WARNED.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(
                target: "resilient::rate_limiter",
                spec,
                "tokio's clock is paused, but this rate limiter was built before it was and reads the machine's clock: `advance` does not refresh its permits; build the registry inside the paused runtime (`#[tokio::test(start_paused = true)]`)"
            );
        }
    }
}

/// Whether this thread is in a current-thread tokio runtime whose clock is
/// paused (only such a runtime can pause it): tokio's clock then stands
/// still while the machine's moves.
fn tokio_clock_is_paused() -> bool {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return false;
    };
    if handle.runtime_flavor() != tokio::runtime::RuntimeFlavor::CurrentThread {
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
