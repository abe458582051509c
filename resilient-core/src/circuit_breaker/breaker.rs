//! The breaker's state machine: one atomic word, no lock.
//!
//! The word's top two bits are the state. Every transition bumps a 30-bit
//! generation, so that a permit taken in one period cannot count, or give its
//! place back, in a later one. A half-open word counts the probes it let
//! through and the successes among them.
//!
//! The instant a period started (microseconds since the breaker was built,
//! rounded up, while "now" is rounded down, so that a wait never ends early)
//! sits in a word of its own, tagged with the low 16 bits of the period's
//! generation. "Now" can then fall before the stamp (both in the same
//! microsecond): the comparison is signed, so that reads as no time passed.
//! A reader that finds another period's tag treats the period as just begun.
//! A stamp only ever moves forward to a later generation, so a thread that
//! was descheduled between publishing a state and stamping it cannot
//! overwrite the stamp of a newer period.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::settings::CircuitBreakerSettings;
use super::window::{Counts, Record, Window};
use super::{Metrics, State};
use crate::telemetry::Telemetry;

const TAG_SHIFT: u32 = 62;
const CLOSED: u64 = 0b10;
const HALF_OPEN: u64 = 0b01;
const OPEN: u64 = 0b00;
const GEN_SHIFT: u32 = 32;
const GEN_MASK: u64 = (1 << 30) - 1;
const LOW48: u64 = (1 << 48) - 1;
const STAMP_SHIFT: u32 = 48;
const U16: u64 = 0xFFFF;

fn tag(w: u64) -> u64 {
    w >> TAG_SHIFT
}
fn generation(w: u64) -> u64 {
    (w >> GEN_SHIFT) & GEN_MASK
}
fn closed(gen: u64) -> u64 {
    (CLOSED << TAG_SHIFT) | ((gen & GEN_MASK) << GEN_SHIFT)
}
fn open(gen: u64) -> u64 {
    (OPEN << TAG_SHIFT) | ((gen & GEN_MASK) << GEN_SHIFT)
}
/// An instant (µs) tagged with the low 16 bits of a generation.
fn stamp(gen: u64, at_us: u64) -> u64 {
    ((gen & U16) << STAMP_SHIFT) | (at_us & LOW48)
}
/// The instant of `stamp` if it belongs to generation `gen`.
fn stamped(stamp: u64, gen: u64) -> Option<u64> {
    (stamp >> STAMP_SHIFT == gen & U16).then_some(stamp & LOW48)
}
/// Whether a stamp of generation `gen` may replace `stamp`: only a later
/// generation's (modulo 2^16, within half the range) may.
fn stamp_advances(stamp: u64, gen: u64) -> bool {
    let ahead = (gen & U16).wrapping_sub(stamp >> STAMP_SHIFT) & U16;
    ahead != 0 && ahead < 1 << 15
}
/// Whether `wait_us` microseconds have passed from `since` to `now`, on the
/// 48-bit clock (it wraps after 8.9 years): a `now` before `since` has
/// waited nothing.
fn waited(since: u64, now: u64, wait_us: u64) -> bool {
    wait_us == 0 || elapsed_us(since, now) >= wait_us
}
/// The µs from `since` to `now` on the 48-bit clock; 0 when `now` lies
/// before `since` (both in the microsecond the stamp was rounded up in).
fn elapsed_us(since: u64, now: u64) -> u64 {
    let elapsed = now.wrapping_sub(since) & LOW48;
    if elapsed < 1 << 47 {
        elapsed
    } else {
        0
    }
}
fn half_open(gen: u64, acquired: u64, successes: u64) -> u64 {
    (HALF_OPEN << TAG_SHIFT)
        | ((gen & GEN_MASK) << GEN_SHIFT)
        | (acquired & U16)
        | ((successes & U16) << 16)
}
fn acquired(w: u64) -> u64 {
    w & U16
}
fn successes(w: u64) -> u64 {
    (w >> 16) & U16
}

const NORMAL: u8 = 0;
const FORCED_OPEN: u8 = 1;
const DISABLED: u8 = 2;

/// What a permit was taken in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Taken {
    /// The closed period with this generation.
    Closed(u64),
    /// A probe of the half-open period with this generation.
    Probe(u64),
    /// The breaker is disabled: nothing is recorded.
    Free,
}

/// How a call ended, for the breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    Success,
    Failure,
    /// Neither: an ignored error, or a call dropped before it ended.
    Neither,
}

#[derive(Debug)]
pub(crate) struct Breaker {
    pub(crate) telemetry: Telemetry,
    settings: CircuitBreakerSettings,
    state: AtomicU64,
    mode: AtomicU8,
    /// The current open period's start, stamped with its generation.
    opened_at: AtomicU64,
    /// The current half-open period's start, stamped with its generation.
    half_open_since: AtomicU64,
    window: Window,
    origin: Instant,
    wait_us: u64,
    max_wait_us: Option<u64>,
    opened: AtomicU64,
    half_opened: AtomicU64,
    closed: AtomicU64,
    rejected: AtomicU64,
}

fn ceil_us(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000)).unwrap_or(u64::MAX)
}

impl Breaker {
    pub(crate) fn new(settings: CircuitBreakerSettings, telemetry: Telemetry) -> Self {
        let mode = if settings.enabled { NORMAL } else { DISABLED };
        telemetry.initial_state(if settings.enabled {
            State::Closed
        } else {
            State::Disabled
        });
        Self {
            telemetry,
            window: Window::new(&settings.window),
            wait_us: ceil_us(settings.wait_duration_in_open_state),
            max_wait_us: settings.max_wait_in_half_open.map(ceil_us),
            settings,
            state: AtomicU64::new(closed(0)),
            mode: AtomicU8::new(mode),
            opened_at: AtomicU64::new(0),
            half_open_since: AtomicU64::new(0),
            origin: Instant::now(),
            opened: AtomicU64::new(0),
            half_opened: AtomicU64::new(0),
            closed: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
        }
    }

    pub(crate) fn settings(&self) -> &CircuitBreakerSettings {
        &self.settings
    }

    #[inline]
    pub(crate) fn slow_threshold(&self) -> Option<Duration> {
        self.settings.slow_call.map(|s| s.duration_threshold)
    }

    pub(crate) fn now_ns(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Now in whole µs, rounded down (for "has it been long enough").
    fn now_us(&self) -> u64 {
        self.now_ns() / 1_000
    }

    /// Stamps the start of period `gen` into `word`, unless a later period's
    /// stamp is already there.
    fn stamp_period(&self, word: &AtomicU64, gen: u64) {
        // Rounded up: the period may start up to 1 µs late, never early.
        let at = stamp(gen, self.now_ns().div_ceil(1_000));
        let _ = word.fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
            stamp_advances(s, gen).then_some(at)
        });
    }

    /// Whether the period `gen` stamped in `word` has lasted `wait_us`.
    fn period_lasted(&self, word: &AtomicU64, gen: u64, wait_us: u64) -> bool {
        // The stamp first, then the clock: a clock read before the stamp was
        // written could lie before it.
        let Some(since) = stamped(word.load(Ordering::Acquire), gen) else {
            // No stamp yet: the period has only just begun.
            return false;
        };
        waited(since, self.now_us(), wait_us)
    }

    /// A permit, or the state that refused it.
    #[inline]
    pub(crate) fn try_acquire(&self) -> Result<Taken, State> {
        match self.mode.load(Ordering::Acquire) {
            DISABLED => return Ok(Taken::Free),
            FORCED_OPEN => return Err(self.reject(State::ForcedOpen)),
            _ => {}
        }
        loop {
            let w = self.state.load(Ordering::Acquire);
            let gen = generation(w);
            match tag(w) {
                CLOSED => return Ok(Taken::Closed(gen)),
                OPEN => {
                    if !self.period_lasted(&self.opened_at, gen, self.wait_us) {
                        return Err(self.reject(State::Open));
                    }
                    let next = gen + 1;
                    // The call that moves the breaker to half-open takes the
                    // first probe.
                    if self.cas(w, half_open(next, 1, 0)) {
                        self.stamp_period(&self.half_open_since, next);
                        self.half_opened.fetch_add(1, Ordering::Relaxed);
                        self.transition(State::Open, State::HalfOpen);
                        return Ok(Taken::Probe(next & GEN_MASK));
                    }
                }
                _ => {
                    let taken = acquired(w);
                    if taken < u64::from(self.settings.permitted_calls_in_half_open_state) {
                        if self.cas(w, half_open(gen, taken + 1, successes(w))) {
                            return Ok(Taken::Probe(gen));
                        }
                        continue;
                    }
                    if self.probes_overdue(gen) {
                        self.open_from(w, State::HalfOpen);
                        continue;
                    }
                    return Err(self.reject(State::HalfOpen));
                }
            }
        }
    }

    /// The rest of the open period, or `None` unless the breaker is open
    /// (a delay hint for a retry outside the breaker).
    pub(crate) fn until_half_open(&self) -> Option<Duration> {
        let w = self.state.load(Ordering::Acquire);
        if self.mode.load(Ordering::Acquire) != NORMAL || tag(w) != OPEN {
            return None;
        }
        // No stamp yet: the period has only just begun. The stamp before the
        // clock, and a clock in the stamped microsecond has waited nothing.
        let waited = stamped(self.opened_at.load(Ordering::Acquire), generation(w))
            .map_or(0, |at| elapsed_us(at, self.now_us()));
        Some(Duration::from_micros(self.wait_us.saturating_sub(waited)))
    }

    /// Whether the half-open period `gen` has waited `max_wait_in_half_open`.
    fn probes_overdue(&self, gen: u64) -> bool {
        self.max_wait_us
            .is_some_and(|max_wait| self.period_lasted(&self.half_open_since, gen, max_wait))
    }

    /// Moves the breaker from word `w` (in state `from`) to a new open
    /// period; `false` if another thread changed the state first.
    fn open_from(&self, w: u64, from: State) -> bool {
        let next = generation(w) + 1;
        if !self.cas(w, open(next)) {
            return false;
        }
        self.stamp_period(&self.opened_at, next);
        self.window.clear();
        self.opened.fetch_add(1, Ordering::Relaxed);
        self.transition(from, State::Open);
        true
    }

    fn reject(&self, state: State) -> State {
        self.rejected.fetch_add(1, Ordering::Relaxed);
        self.telemetry
            .rejected(format_args!("circuit breaker {state}"), || {
                self.until_half_open()
            });
        state
    }

    fn cas(&self, from: u64, to: u64) -> bool {
        self.state
            .compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    fn transition(&self, from: State, to: State) {
        self.telemetry.transition(from, to);
    }

    /// Records how a call that held a permit `taken` ended; `slow` when it
    /// took longer than the slow-call threshold.
    #[inline]
    pub(crate) fn release(&self, taken: Taken, end: End, slow: bool) {
        if taken == Taken::Free || self.mode.load(Ordering::Acquire) == DISABLED {
            return;
        }
        let record = match end {
            End::Neither => {
                if let Taken::Probe(gen) = taken {
                    self.give_back(gen);
                }
                return;
            }
            End::Success => Record {
                failed: false,
                slow,
            },
            End::Failure => Record { failed: true, slow },
        };
        loop {
            let w = self.state.load(Ordering::Acquire);
            let gen = generation(w);
            // A probe counts only in its own half-open period; a closed-period
            // permit does not count as a probe.
            match (tag(w), taken) {
                (HALF_OPEN, Taken::Probe(g)) if g == gen => {}
                (CLOSED, Taken::Closed(g)) if g == gen => {}
                _ => return,
            }
            match tag(w) {
                CLOSED => {
                    let now = if self.window.needs_clock() {
                        self.now_ns()
                    } else {
                        0
                    };
                    if let Some(counts) = self.window.record(record, gen, now) {
                        if self.should_open(counts) {
                            self.open_from(w, State::Closed);
                        }
                    }
                    return;
                }
                HALF_OPEN => {
                    if record.is_bad() {
                        // Any failed (or slow) probe opens the breaker again.
                        if self.open_from(w, State::HalfOpen) {
                            return;
                        }
                        continue;
                    }
                    let done = successes(w) + 1;
                    if done >= u64::from(self.settings.permitted_calls_in_half_open_state) {
                        if self.cas(w, closed(gen + 1)) {
                            self.window.clear();
                            self.closed.fetch_add(1, Ordering::Relaxed);
                            self.transition(State::HalfOpen, State::Closed);
                            return;
                        }
                        continue;
                    }
                    if self.cas(w, half_open(gen, acquired(w), done)) {
                        return;
                    }
                }
                // Open: an outcome that arrives late changes nothing.
                _ => return,
            }
        }
    }

    /// A probe of period `gen` that ended with no outcome frees its place.
    fn give_back(&self, gen: u64) {
        let _ = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                (tag(w) == HALF_OPEN && generation(w) == gen && acquired(w) > 0)
                    .then(|| half_open(gen, acquired(w) - 1, successes(w)))
            });
    }

    fn should_open(&self, c: Counts) -> bool {
        if c.total < u64::from(self.settings.minimum_required_calls) {
            return false;
        }
        let failing =
            Counts::percent(c.failures, c.total) >= u64::from(self.settings.failure_rate_threshold);
        let slow = self
            .settings
            .slow_call
            .is_some_and(|s| Counts::percent(c.slow, c.total) >= u64::from(s.rate_threshold));
        failing || slow
    }

    pub(crate) fn state(&self) -> State {
        match self.mode.load(Ordering::Acquire) {
            DISABLED => return State::Disabled,
            FORCED_OPEN => return State::ForcedOpen,
            _ => {}
        }
        match tag(self.state.load(Ordering::Acquire)) {
            CLOSED => State::Closed,
            HALF_OPEN => State::HalfOpen,
            _ => State::Open,
        }
    }

    pub(crate) fn metrics(&self) -> Metrics {
        let w = self.state.load(Ordering::Acquire);
        let counts = if tag(w) == CLOSED && self.mode.load(Ordering::Acquire) == NORMAL {
            self.window.snapshot(generation(w), self.now_ns())
        } else {
            Counts::default()
        };
        Metrics {
            state: self.state(),
            window: counts,
            failure_rate: (counts.total > 0)
                .then(|| Counts::percent(counts.failures, counts.total) as u8),
            slow_rate: (counts.total > 0).then(|| Counts::percent(counts.slow, counts.total) as u8),
            probes_in_flight: if tag(w) == HALF_OPEN {
                acquired(w).saturating_sub(successes(w)) as u16
            } else {
                0
            },
            opened: self.opened.load(Ordering::Relaxed),
            half_opened: self.half_opened.load(Ordering::Relaxed),
            closed: self.closed.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn force_open(&self) {
        self.mode.store(FORCED_OPEN, Ordering::Release);
        self.transition(self.state(), State::ForcedOpen);
    }

    pub(crate) fn disable(&self) {
        self.mode.store(DISABLED, Ordering::Release);
        self.transition(self.state(), State::Disabled);
    }

    pub(crate) fn reset(&self) {
        let from = self.state();
        let _ = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                Some(closed(generation(w) + 1))
            });
        self.window.clear();
        self.mode.store(NORMAL, Ordering::Release);
        self.transition(from, State::Closed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::circuit_breaker::WindowSettings;

    fn breaker(wait: Duration) -> Breaker {
        Breaker::new(
            CircuitBreakerSettings {
                enabled: true,
                window: WindowSettings::RingBuffer { window_size: 1 },
                failure_rate_threshold: 100,
                minimum_required_calls: 1,
                wait_duration_in_open_state: wait,
                permitted_calls_in_half_open_state: 1,
                slow_call: None,
                max_wait_in_half_open: None,
            },
            Telemetry::detached("B", "test.breaker", crate::spec::SpecKind::CircuitBreaker),
        )
    }

    fn fail(b: &Breaker) {
        let taken = b.try_acquire().unwrap_or(Taken::Free);
        b.release(taken, End::Failure, false);
    }

    /// Thread A opens the breaker and is descheduled before it stamps the
    /// period; meanwhile a reset and a new failure open a newer period. A's
    /// late stamp must not replace the newer one, or the breaker would
    /// reject every call until the next reset.
    #[tokio::test(start_paused = true)]
    async fn a_late_stamp_of_an_older_period_is_not_written() {
        let b = breaker(Duration::from_secs(1));
        let w = b.state.load(Ordering::Acquire);
        let late = generation(w) + 1;
        assert!(b.cas(w, open(late)), "A publishes its open period");
        b.reset();
        fail(&b);
        assert_eq!(b.state(), State::Open, "a newer open period");
        // A wakes up and stamps its own period.
        b.stamp_period(&b.opened_at, late);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(
            matches!(b.try_acquire(), Ok(Taken::Probe(_))),
            "the newer period's wait is over"
        );
    }

    #[test]
    fn a_clock_read_in_the_stamped_microsecond_has_waited_nothing() {
        // Stamped at 10 µs (rounded up), read at 9 µs (rounded down).
        assert!(!waited(10, 9, 1_000_000));
        assert!(waited(10, 9, 0));
        assert!(waited(10, 10 + 1_000_000, 1_000_000));
        // Across the 48-bit wrap.
        assert!(waited(LOW48 - 5, 4, 10));
        assert!(!waited(LOW48 - 5, 3, 10));
    }
}
