//! The breaker's state machine: one atomic word, no lock.
//!
//! The word's top two bits are the state. Every transition bumps a 30-bit
//! generation, so that a permit taken in one period cannot count, or give its
//! place back, in a later one. A half-open word counts the probes it let
//! through and the successes among them.
//!
//! When an open (or half-open) period must end sits in a word of its own: the
//! deadline in microseconds since the breaker was built (the period's start
//! rounded up, so that a wait never ends early, plus the wait the settings
//! gave it then), tagged with the low 16 bits of the period's generation. A
//! reload that changes the wait leaves a running period's deadline alone.
//! "Now" is rounded down and compared signed, so that a clock read in the
//! microsecond the period started has waited nothing. The thread that
//! publishes a state then stamps its deadline; a caller that finds the
//! state without its deadline (that thread descheduled between the two)
//! stamps it itself, so that a period never outlasts its wait by more than
//! the time to the next call. A stamp only ever moves forward to a later
//! generation, so a late writer cannot overwrite a newer period's.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use metrics::{Counter, Gauge};
use tokio::time::Instant;

use super::settings::{CircuitBreakerSettings, WAIT_MAX};
use super::window::{Counts, Record, Window};
use super::{Metrics, Opening};
use crate::error::State;
use crate::registry::{KeyShare, Tag, Versions};
use crate::telemetry::{LazyCounter, Telemetry};

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
/// A deadline (µs) tagged with the low 16 bits of a generation.
fn stamp(gen: u64, at_us: u64) -> u64 {
    ((gen & U16) << STAMP_SHIFT) | (at_us & LOW48)
}
/// The deadline of `stamp` if it belongs to generation `gen`.
fn stamped(stamp: u64, gen: u64) -> Option<u64> {
    (stamp >> STAMP_SHIFT == gen & U16).then_some(stamp & LOW48)
}
/// Whether a stamp of generation `gen` may replace `stamp`: only a later
/// generation's (modulo 2^16, within half the range) may.
fn stamp_advances(stamp: u64, gen: u64) -> bool {
    let ahead = (gen & U16).wrapping_sub(stamp >> STAMP_SHIFT) & U16;
    ahead != 0 && ahead < 1 << 15
}
/// Whether `deadline` has come at `now`, on the 48-bit clock (it wraps
/// after 8.9 years; deadlines lie at most 4 years ahead).
fn passed(deadline: u64, now: u64) -> bool {
    until(deadline, now) == 0
}
/// The µs from `now` to `deadline` on the 48-bit clock; 0 once it has come.
fn until(deadline: u64, now: u64) -> u64 {
    let ahead = deadline.wrapping_sub(now) & LOW48;
    if ahead < 1 << 47 {
        ahead
    } else {
        0
    }
}
/// Whether generation `a` came after `b` (both masked; modulo 2^30,
/// within half the range).
fn later(a: u64, b: u64) -> bool {
    let ahead = a.wrapping_sub(b) & GEN_MASK;
    ahead != 0 && ahead < 1 << 29
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

/// The shared instance of one circuit breaker spec: its state machine, its
/// window, its settings and its telemetry. Reached through a
/// [`CircuitBreakerHandle`](super::CircuitBreakerHandle).
#[derive(Debug)]
pub struct Breaker {
    pub(crate) telemetry: Telemetry,
    config: Versions<Config>,
    /// The window the settings' shape calls for; one per shape it ever
    /// ran with (a reload back to an earlier shape takes its window again).
    window: Versions<Window>,
    state: AtomicU64,
    mode: AtomicU8,
    /// The current open period's deadline, stamped with its generation.
    opened_at: AtomicU64,
    /// The current half-open period's deadline (`max_wait_in_half_open`),
    /// stamped with its generation.
    half_open_since: AtomicU64,
    origin: Instant,
    opened: AtomicU64,
    half_opened: AtomicU64,
    closed: AtomicU64,
    rejected: AtomicU64,
    meters: OnceLock<BreakerMeters>,
    /// A keyed breaker's share with the other keys of its spec: opening on
    /// its own takes one of the ejections `keys.max_open_percent` allows.
    share: OnceLock<Arc<KeyShare>>,
    /// Whether this breaker holds an ejection now.
    ejected: AtomicBool,
    /// The window that opened the breaker, for its status until it closes:
    /// written at the transitions, never by a call that changes no state.
    opening: Mutex<Openings>,
}

/// What opened a breaker from closed, and when it last closed, in
/// generations: the window shown is the one of the open period begun after
/// the last close. A thread that opened the breaker and was descheduled
/// before it wrote what opened it (meanwhile the breaker closed, and maybe
/// opened again) finds a later close, or a later opening, and writes
/// nothing.
#[derive(Debug, Default)]
struct Openings {
    /// The generation of the open period the window began, and its counts.
    by: Option<(u64, Counts)>,
    /// The generation of the last closed period begun by a transition.
    closed: u64,
}

/// The settings a breaker runs with, and their waits in its clock's units.
#[derive(Debug)]
pub(crate) struct Config {
    pub(crate) settings: CircuitBreakerSettings,
    wait_us: u64,
    /// `max_wait_in_half_open`, or the longest wait a stamp can hold.
    max_wait_us: u64,
}

/// The tag of a breaker's settings: whether calls are timed against a
/// slow-call threshold (a call reads the clock only then, or for metrics).
const SLOW_CALL: usize = 0b1;

impl Tag for Config {
    fn tag(&self) -> usize {
        if self.settings.slow_call.is_some() {
            SLOW_CALL
        } else {
            0
        }
    }
}

impl Tag for Window {}

impl Config {
    fn of(settings: CircuitBreakerSettings) -> Self {
        Self {
            wait_us: ceil_us(settings.wait_duration_in_open_state),
            max_wait_us: ceil_us(settings.max_wait_in_half_open.unwrap_or(WAIT_MAX)),
            settings,
        }
    }
}

/// The metric handles only a breaker records: its transitions to `open`
/// registered at once, the others when they first happen (see
/// `LazyCounter`).
#[derive(Debug)]
struct BreakerMeters {
    transitions: [LazyCounter; 5],
    state: Gauge,
}

fn ceil_us(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000)).unwrap_or(u64::MAX)
}

const STATES: [State; 5] = [
    State::Closed,
    State::Open,
    State::HalfOpen,
    State::ForcedOpen,
    State::Disabled,
];

fn state_index(state: State) -> usize {
    match state {
        State::Closed => 0,
        State::Open => 1,
        State::HalfOpen => 2,
        State::ForcedOpen => 3,
        State::Disabled => 4,
    }
}

fn state_label(state: State) -> &'static str {
    match state {
        State::Closed => "closed",
        State::Open => "open",
        State::HalfOpen => "half_open",
        State::ForcedOpen => "forced_open",
        State::Disabled => "disabled",
    }
}

/// The gauge value of a breaker state.
fn state_value(state: State) -> f64 {
    match state {
        State::Closed => 0.0,
        State::HalfOpen => 1.0,
        State::Open => 2.0,
        State::ForcedOpen => 3.0,
        State::Disabled => 4.0,
    }
}

impl Breaker {
    pub(crate) fn new(settings: CircuitBreakerSettings, telemetry: Telemetry) -> Self {
        let mode = if settings.enabled { NORMAL } else { DISABLED };
        let window = Window::new(&settings.window);
        let breaker = Self {
            telemetry,
            config: Versions::new(Config::of(settings)),
            window: Versions::new(window),
            state: AtomicU64::new(closed(0)),
            mode: AtomicU8::new(mode),
            opened_at: AtomicU64::new(0),
            half_open_since: AtomicU64::new(0),
            origin: Instant::now(),
            opened: AtomicU64::new(0),
            half_opened: AtomicU64::new(0),
            closed: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            meters: OnceLock::new(),
            share: OnceLock::new(),
            ejected: AtomicBool::new(false),
            opening: Mutex::new(Openings::default()),
        };
        breaker.register_meters();
        breaker
    }

    /// Registers the breaker's own metrics once they are switched on, with
    /// the state gauge set.
    pub(crate) fn register_meters(&self) {
        if !self.telemetry.metrics_on() {
            return;
        }
        let meters = self.meters.get_or_init(|| BreakerMeters {
            transitions: STATES.map(|s| {
                if s == State::Open {
                    LazyCounter::now(self.transitions_counter(s))
                } else {
                    LazyCounter::later()
                }
            }),
            state: self.telemetry.gauge("resilient_circuit_breaker_state"),
        });
        meters.state.set(state_value(self.state()));
    }

    fn transitions_counter(&self, to: State) -> Counter {
        self.telemetry.counter(
            "resilient_circuit_breaker_transitions_total",
            &[("to", state_label(to))],
        )
    }

    fn meters(&self) -> Option<&BreakerMeters> {
        if self.telemetry.metrics_on() {
            self.meters.get()
        } else {
            None
        }
    }

    /// The settings running now.
    #[inline]
    pub(crate) fn config(&self) -> &Config {
        self.config.get()
    }

    pub(crate) fn settings(&self) -> &CircuitBreakerSettings {
        &self.config().settings
    }

    /// The slow-call threshold; read through the settings only when the
    /// tag says there is one.
    #[inline]
    pub(crate) fn slow_threshold(&self) -> Option<Duration> {
        let (config, tag) = self.config.get_tagged();
        if tag & SLOW_CALL == 0 {
            return None;
        }
        config.settings.slow_call.map(|s| s.duration_threshold)
    }

    pub(crate) fn now_ns(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Now in whole µs, rounded down (for "has it been long enough").
    fn now_us(&self) -> u64 {
        self.now_ns() / 1_000
    }

    /// Stamps the deadline of period `gen`, `wait_us` from now, into
    /// `word`, unless a stamp of that period or a later one is already
    /// there.
    fn stamp_period(&self, word: &AtomicU64, gen: u64, wait_us: u64) {
        // The start rounded up: the period may start up to 1 µs late, never
        // early. Without a wait, the period is over at once.
        let deadline = match wait_us {
            0 => self.now_us(),
            wait_us => self.now_ns().div_ceil(1_000).saturating_add(wait_us),
        };
        let at = stamp(gen, deadline);
        let _ = word.fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
            stamp_advances(s, gen).then_some(at)
        });
    }

    /// Whether the period `gen` stamped in `word` has reached its deadline.
    /// A period whose deadline is not stamped yet (the thread that began it
    /// has not got there) is stamped now, `wait_us` from now: it has only
    /// just begun for this caller, and the next caller finds its deadline.
    fn period_over(&self, word: &AtomicU64, gen: u64, wait_us: u64) -> bool {
        // The stamp first, then the clock: a clock read before the stamp was
        // written could lie before it.
        match stamped(word.load(Ordering::Acquire), gen) {
            Some(deadline) => passed(deadline, self.now_us()),
            None => {
                self.stamp_period(word, gen, wait_us);
                false
            }
        }
    }

    /// A permit, or the state that refused it: a closed breaker's in line,
    /// every other state's out of line, so that the call it lets in at once
    /// stays small wherever it is inlined.
    #[inline(always)]
    pub(crate) fn try_acquire(&self) -> Result<Taken, State> {
        if self.mode.load(Ordering::Acquire) == NORMAL {
            let w = self.state.load(Ordering::Acquire);
            if tag(w) == CLOSED {
                return Ok(Taken::Closed(generation(w)));
            }
        }
        self.try_acquire_rest()
    }

    /// [`try_acquire`](Self::try_acquire) in every state but a normal
    /// closed one.
    #[cold]
    #[inline(never)]
    fn try_acquire_rest(&self) -> Result<Taken, State> {
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
                    let c = self.config();
                    if !self.period_over(&self.opened_at, gen, c.wait_us) {
                        return Err(self.reject(State::Open));
                    }
                    let next = gen + 1;
                    // The call that moves the breaker to half-open takes the
                    // first probe.
                    if self.cas(w, half_open(next, 1, 0)) {
                        self.stamp_period(&self.half_open_since, next, c.max_wait_us);
                        self.half_opened.fetch_add(1, Ordering::Relaxed);
                        self.transition(State::Open, State::HalfOpen);
                        return Ok(Taken::Probe(next & GEN_MASK));
                    }
                }
                _ => {
                    let c = self.config();
                    let taken = acquired(w);
                    if taken < u64::from(c.settings.permitted_calls_in_half_open_state) {
                        if self.cas(w, half_open(gen, taken + 1, successes(w))) {
                            return Ok(Taken::Probe(gen));
                        }
                        continue;
                    }
                    if self.period_over(&self.half_open_since, gen, c.max_wait_us) {
                        self.open_from(w, State::HalfOpen, None);
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
        // clock.
        let left = match stamped(self.opened_at.load(Ordering::Acquire), generation(w)) {
            Some(deadline) => until(deadline, self.now_us()),
            None => self.config().wait_us,
        };
        Some(Duration::from_micros(left))
    }

    /// Moves the breaker from word `w` (in state `from`) to a new open
    /// period; `false` if another thread changed the state first. `by`:
    /// the window's counts that opened it from closed, kept for its status
    /// until it closes (a probe that opens it again keeps them).
    fn open_from(&self, w: u64, from: State, by: Option<Counts>) -> bool {
        let next = generation(w) + 1;
        if !self.cas(w, open(next)) {
            return false;
        }
        if let Some(counts) = by {
            self.opened_by(next & GEN_MASK, counts);
        }
        self.stamp_period(&self.opened_at, next, self.config().wait_us);
        self.window.get().clear();
        self.opened.fetch_add(1, Ordering::Relaxed);
        self.transition(from, State::Open);
        true
    }

    /// The window says open (the state word was `w`, its counts `counts`):
    /// opens, unless this is a keyed breaker and `keys.max_open_percent` of
    /// its spec's keys are open already, in which case it stays closed and
    /// keeps counting.
    fn open_on_failures(&self, w: u64, counts: Counts) {
        let Some(share) = self.share.get() else {
            self.open_from(w, State::Closed, Some(counts));
            return;
        };
        if !share.try_eject() {
            if self.telemetry.logging() {
                let t = &self.telemetry;
                let (spec, path, key) = (t.spec, t.path, t.key());
                tracing::debug!(
                    target: "resilient::circuit_breaker",
                    spec, path, key,
                    "circuit breaker stays closed: `keys.max_open_percent` of the keys are open already"
                );
            }
            return;
        }
        // Marked before the state moves: a transition back to closed on
        // another thread gives the ejection back. One mark per breaker: a
        // call that finds it set (another call is opening the breaker, or
        // a close has not given its ejection back yet) gives back the one
        // it just took.
        if self
            .ejected
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            share.release();
            return;
        }
        if !self.open_from(w, State::Closed, Some(counts))
            && self.ejected.swap(false, Ordering::AcqRel)
        {
            share.release();
        }
    }

    /// Joins the keys of a keyed spec (see [`KeyShare`]).
    pub(crate) fn join(&self, share: &Arc<KeyShare>) {
        let _ = self.share.set(Arc::clone(share));
    }

    fn reject(&self, state: State) -> State {
        self.rejected.fetch_add(1, Ordering::Relaxed);
        crate::telemetry::log_rejection!(
            "resilient::circuit_breaker",
            &self.telemetry,
            self.until_half_open(),
            "circuit breaker {state}"
        );
        state
    }

    fn cas(&self, from: u64, to: u64) -> bool {
        self.state
            .compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The breaker moved from `from` to `to`: metrics, listeners, logs, and
    /// a keyed breaker's ejection given back when it no longer opened on
    /// its own.
    fn transition(&self, from: State, to: State) {
        if matches!(to, State::Closed | State::Disabled | State::ForcedOpen) {
            self.give_back_ejection();
        }
        if let Some(m) = self.meters() {
            m.transitions[state_index(to)].increment(1, || self.transitions_counter(to));
            m.state.set(state_value(to));
        }
        let t = &self.telemetry;
        t.emit(|| {
            if t.kind == crate::spec::SpecKind::BACKEND {
                // A shared backend's own breaker: no spec's.
                crate::telemetry::Event::BackendTransition {
                    backend: t.spec,
                    path: t.path,
                    from,
                    to,
                }
            } else {
                crate::telemetry::Event::StateTransition {
                    spec: t.spec,
                    path: t.path,
                    from,
                    to,
                    key: t.event_key(),
                }
            }
        });
        if !t.logging() {
            return;
        }
        let (spec, path, key) = (t.spec, t.path, t.key());
        match to {
            State::Open | State::ForcedOpen => tracing::warn!(
                target: "resilient::circuit_breaker",
                spec, path, key, %from, %to,
                "circuit breaker {from} -> {to}"
            ),
            _ => tracing::info!(
                target: "resilient::circuit_breaker",
                spec, path, key, %from, %to,
                "circuit breaker {from} -> {to}"
            ),
        }
    }

    /// Records how a call that held a permit `taken` ended; `slow` when it
    /// took longer than the slow-call threshold.
    ///
    /// A closed breaker's outcome is recorded in line; every other case
    /// (a probe, an outcome that counts nothing) out of line.
    #[inline(always)]
    pub(crate) fn release(&self, taken: Taken, end: End, slow: bool) {
        if let (Taken::Closed(g), End::Success | End::Failure) = (taken, end) {
            let w = self.state.load(Ordering::Acquire);
            if tag(w) == CLOSED
                && generation(w) == g
                && self.mode.load(Ordering::Acquire) != DISABLED
            {
                let record = Record {
                    failed: end == End::Failure,
                    slow,
                };
                self.record_closed(w, g, record);
                return;
            }
        }
        self.release_rest(taken, end, slow);
    }

    /// Records `record` in the window of closed period `gen` (state word
    /// `w`), opening the breaker if the window says so.
    #[inline(always)]
    fn record_closed(&self, w: u64, gen: u64, record: Record) {
        let window = self.window.get();
        let now = if window.needs_clock() {
            self.now_ns()
        } else {
            0
        };
        if let Some(counts) = window.record(record, gen, now) {
            if self.should_open(counts) {
                self.open_on_failures(w, counts);
            }
        }
    }

    /// [`release`](Self::release) of anything but a closed period's
    /// success or failure.
    #[cold]
    #[inline(never)]
    fn release_rest(&self, taken: Taken, end: End, slow: bool) {
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
                    self.record_closed(w, gen, record);
                    return;
                }
                HALF_OPEN => {
                    if record.is_bad() {
                        // Any failed (or slow) probe opens the breaker again.
                        if self.open_from(w, State::HalfOpen, None) {
                            return;
                        }
                        continue;
                    }
                    let done = successes(w) + 1;
                    let permitted = self.config().settings.permitted_calls_in_half_open_state;
                    if done >= u64::from(permitted) {
                        if self.cas(w, closed(gen + 1)) {
                            self.closed_at(gen + 1);
                            self.window.get().clear();
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
        let s = &self.config().settings;
        if c.total < u64::from(s.minimum_required_calls) {
            return false;
        }
        let failing = Counts::percent(c.failures, c.total) >= u64::from(s.failure_rate_threshold);
        let slow = s
            .slow_call
            .is_some_and(|s| Counts::percent(c.slow, c.total) >= u64::from(s.rate_threshold));
        failing || slow
    }

    /// Whether a keyed breaker may be dropped: closed (or disabled) as a
    /// fresh one would start under its settings, or past its open wait (the
    /// next call would be a probe; a key nobody called since is a host
    /// gone, which must not hold its place forever), or half-open (a
    /// running probe holds the instance, which keeps it). Never while its
    /// open wait lasts, and never forced open, or closed or disabled by hand
    /// against its settings.
    pub(crate) fn evictable(&self) -> bool {
        let enabled = self.settings().enabled;
        match self.state() {
            State::Closed => enabled,
            State::Disabled => !enabled,
            State::Open => self.until_half_open().is_some_and(|left| left.is_zero()),
            State::HalfOpen => true,
            State::ForcedOpen => false,
        }
    }

    /// Gives back the ejection this breaker holds, if any: it closed, was
    /// disabled or forced open by hand, or its key was dropped.
    pub(crate) fn give_back_ejection(&self) {
        if self.ejected.swap(false, Ordering::AcqRel) {
            if let Some(share) = self.share.get() {
                share.release();
            }
        }
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
            self.window.get().snapshot(generation(w), self.now_ns())
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
            opened_by: if tag(w) != CLOSED && self.mode.load(Ordering::Acquire) == NORMAL {
                self.opening()
            } else {
                None
            },
        }
    }

    /// Keeps `counts` as what opened the open period `gen` (masked), unless
    /// the breaker closed or opened again since.
    fn opened_by(&self, gen: u64, counts: Counts) {
        let mut o = self.opening.lock().unwrap_or_else(PoisonError::into_inner);
        if later(gen, o.closed) && o.by.is_none_or(|(was, _)| later(gen, was)) {
            o.by = Some((gen, counts));
        }
    }

    /// The closed period `gen` began: what opened the breaker before is
    /// no longer shown.
    fn closed_at(&self, gen: u64) {
        let mut o = self.opening.lock().unwrap_or_else(PoisonError::into_inner);
        o.closed = gen & GEN_MASK;
    }

    /// What opened the breaker, if it opened from closed since it last
    /// closed.
    fn opening(&self) -> Option<Opening> {
        let o = self.opening.lock().unwrap_or_else(PoisonError::into_inner);
        let (gen, window) = o.by?;
        later(gen, o.closed).then(|| Opening {
            window,
            failure_rate: Counts::percent(window.failures, window.total).min(100) as u8,
            slow_rate: Counts::percent(window.slow, window.total).min(100) as u8,
        })
    }

    /// Sets the mode, and tells of the transition if the state changed.
    fn set_mode(&self, mode: u8, to: State) {
        // The state left, read before it changes.
        let from = self.state();
        self.mode.store(mode, Ordering::Release);
        if from != to {
            self.transition(from, to);
        }
    }

    pub(crate) fn force_open(&self) {
        self.set_mode(FORCED_OPEN, State::ForcedOpen);
    }

    pub(crate) fn disable(&self) {
        self.set_mode(DISABLED, State::Disabled);
    }

    pub(crate) fn reset(&self) {
        let from = self.state();
        if let Ok(w) = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                Some(closed(generation(w) + 1))
            })
        {
            self.closed_at(generation(w) + 1);
        }
        self.window.get().clear();
        self.mode.store(NORMAL, Ordering::Release);
        self.transition(from, State::Closed);
    }

    /// Forgets its counts (transitions, rejections) and what opened it, as
    /// a breaker just built; its state is left as it is.
    pub(crate) fn forget_counts(&self) {
        for count in [
            &self.opened,
            &self.half_opened,
            &self.closed,
            &self.rejected,
        ] {
            count.store(0, Ordering::Relaxed);
        }
        self.opening
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .by = None;
    }

    /// Runs `settings` from now on (see the module docs of
    /// [`circuit_breaker`](super)); returns what of the state did not carry
    /// over.
    pub(crate) fn reconfigure(&self, settings: CircuitBreakerSettings) -> Vec<String> {
        let mut notes = Vec::new();
        let was = &self.config().settings;
        let (shape, enabled, was_enabled) = (settings.window, settings.enabled, was.enabled);
        if shape != was.window {
            let (window, new) = self
                .window
                .publish(|w| w.shape() == shape, || Window::new(&shape));
            if !new {
                window.clear();
            }
            // A closed breaker starts a new closed period, in the same state:
            // its window starts empty, and permits taken before count nothing.
            let _ = self
                .state
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                    (tag(w) == CLOSED).then(|| closed(generation(w) + 1))
                });
            notes.push("a new window: the calls counted so far are forgotten".to_owned());
        }
        let running = settings.clone();
        self.config
            .publish(|c| c.settings == running, || Config::of(settings));
        match (was_enabled, enabled) {
            (true, false) => self.disable(),
            (false, true) => self.reset(),
            _ => {}
        }
        notes
    }
}

impl Drop for Breaker {
    /// A keyed breaker evicted (or its registry dropped) while it holds an
    /// ejection gives it back.
    fn drop(&mut self) {
        self.give_back_ejection();
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
            Telemetry::detached("B", "test.breaker", crate::spec::SpecKind::CIRCUIT_BREAKER),
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
        b.stamp_period(&b.opened_at, late, b.config().wait_us);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(
            matches!(b.try_acquire(), Ok(Taken::Probe(_))),
            "the newer period's wait is over"
        );
    }

    /// Thread A opens the breaker and is descheduled before it writes the
    /// window that opened it; meanwhile a reset closes it and a failure
    /// opens it again. A's late write must not replace the newer opening,
    /// nor show in an open period begun after a close without a window of
    /// its own.
    #[tokio::test(start_paused = true)]
    async fn a_late_window_of_an_older_opening_is_not_shown() {
        let b = breaker(Duration::from_secs(1));
        let w = b.state.load(Ordering::Acquire);
        let late = (generation(w) + 1) & GEN_MASK;
        assert!(b.cas(w, open(late)), "A publishes its open period");
        b.reset();
        fail(&b);
        let newer = b.metrics().opened_by;
        assert_eq!(newer.map(|o| o.window.total), Some(1));
        let stale = Counts {
            total: 9,
            failures: 9,
            slow: 0,
        };
        b.opened_by(late, stale);
        assert_eq!(b.metrics().opened_by, newer, "the newer opening stands");
        b.reset();
        let w = b.state.load(Ordering::Acquire);
        assert!(
            b.cas(w, open(generation(w) + 1)),
            "opened, window not written yet"
        );
        b.opened_by(late, stale);
        assert_eq!(
            b.metrics().opened_by,
            None,
            "A's window is of a closed episode"
        );
    }

    /// Two calls fail at once on a keyed breaker's closed period: both load
    /// the same closed word, both find the window past its threshold, both
    /// take an ejection. The breaker holds one mark: the second call gives
    /// its own back, so that once the breaker closes none stays counted
    /// (with one leaked, under the default `max_open_percent = 100`, two
    /// keys could never be open at once).
    #[tokio::test]
    async fn two_calls_opening_a_keyed_breaker_at_once_leak_no_ejection() {
        use crate::keyed::{KeyRef, KeySettings};
        let base = Arc::new(breaker(Duration::from_secs(30)));
        let settings = base.settings().clone();
        let keyed = Arc::new_cyclic(|this| {
            crate::registry::Keyed::new(
                std::sync::Weak::clone(this),
                base,
                settings,
                KeySettings::default(),
            )
        });
        let (host, other) = (
            keyed.get(KeyRef::Text("host")),
            keyed.get(KeyRef::Text("other")),
        );
        let w = host.state.load(Ordering::Acquire);
        let counts = Counts {
            total: 1,
            failures: 1,
            slow: 0,
        };
        host.open_on_failures(w, counts); // A
        host.open_on_failures(w, counts); // B, with the word it read before A's CAS
        assert_eq!(host.state(), State::Open);
        host.reset();
        assert_eq!(keyed.snapshot().ejected, 0, "no key is open");
        fail(&other);
        fail(&host);
        assert_eq!(
            (other.state(), host.state()),
            (State::Open, State::Open),
            "both keys fail: both open (100 %)"
        );
    }

    #[test]
    fn a_deadline_has_come_once_now_reaches_it() {
        assert!(!passed(10, 9));
        assert!(passed(10, 10));
        assert!(passed(10, 11));
        // Across the 48-bit wrap.
        assert!(passed(4, 4));
        assert!(!passed(4, LOW48 - 5));
        assert_eq!(until(4, LOW48 - 5), 10);
    }

    /// Thread A opens the breaker and is descheduled before it stamps the
    /// period's deadline. The next caller stamps it: the breaker stays open
    /// for its wait from then, not until A wakes up.
    #[tokio::test(start_paused = true)]
    async fn a_period_left_unstamped_is_stamped_by_the_next_caller() {
        let wait = Duration::from_millis(100);
        let b = breaker(wait);
        let w = b.state.load(Ordering::Acquire);
        assert!(
            b.cas(w, open(generation(w) + 1)),
            "A publishes its open period"
        );
        // A never stamps it. A caller 1 µs later is rejected and stamps it.
        tokio::time::advance(Duration::from_micros(1)).await;
        assert_eq!(b.try_acquire(), Err(State::Open));
        let mut rejected_past_the_wait = 0;
        let mut admitted_at = None;
        for step in 1..=200u64 {
            tokio::time::advance(Duration::from_millis(1)).await;
            match b.try_acquire() {
                Err(_) if step > 100 => rejected_past_the_wait += 1,
                Err(_) => {}
                Ok(_) => {
                    admitted_at = Some(step);
                    break;
                }
            }
        }
        assert_eq!(
            rejected_past_the_wait, 0,
            "no call is rejected past the wait"
        );
        assert_eq!(admitted_at, Some(100), "the probe comes at the wait");
    }
}
