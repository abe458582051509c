//! Typed events, and the listeners a registry hands them to.

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use crate::error::State;
use crate::spec::SpecKind;

/// Something a spec did that a listener may want to know; see
/// [`Registry::subscribe`](crate::Registry::subscribe).
///
/// Events are published off the success path only (a retry, a rejection, a
/// transition, a timeout, a fallback). Each is handed to the listeners and
/// kept among its spec's recent events (see
/// [`Registry::recent_events`](crate::Registry::recent_events)); a run of
/// rejections by one instance is counted into one entry there.
///
/// With the `serde` feature it serializes as a table whose `type` is the
/// variant's name in `snake_case` (`"state_transition"`), durations as the
/// config writes them (`"100ms"`), and a `key` only when there is one.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize),
    serde(tag = "type", rename_all = "snake_case")
)]
#[non_exhaustive]
pub enum Event {
    /// A call failed and retry will call again after `delay`.
    RetryScheduled {
        /// The retry spec's name.
        spec: &'static str,
        /// Its config path.
        path: &'static str,
        /// Which retry this is: 1 for the first.
        retry: u64,
        /// The wait before it.
        #[cfg_attr(
            feature = "serde",
            serde(serialize_with = "crate::settings::ser::duration")
        )]
        delay: Duration,
    },
    /// Retry gave up.
    RetryExhausted {
        /// The retry spec's name.
        spec: &'static str,
        /// Its config path.
        path: &'static str,
        /// Calls made, the first one included.
        calls: u64,
        /// Why it stopped.
        reason: StoppedBy,
    },
    /// A chaos spec injected a fault into a call.
    Injected {
        /// The chaos spec's name.
        spec: &'static str,
        /// Its config path.
        path: &'static str,
        /// What it injected.
        fault: Fault,
        /// The call's index among the calls the spec drew for.
        call: u64,
    },
    /// A hedging spec started another attempt of a call beside the ones
    /// running.
    Hedged {
        /// The hedging spec's name.
        spec: &'static str,
        /// Its config path.
        path: &'static str,
        /// The attempt's number in its call: 2 for the first hedge.
        attempt: u32,
        /// `true` when a failed attempt started it at once, `false` when the
        /// delay did.
        after_failure: bool,
    },
    /// A circuit breaker changed state.
    StateTransition {
        /// The breaker spec's name.
        spec: &'static str,
        /// Its config path.
        path: &'static str,
        /// The state it left.
        from: State,
        /// The state it entered.
        to: State,
        /// The key of a keyed breaker (see [`keyed`](crate::keyed)); `None`
        /// for the spec's own.
        #[cfg_attr(
            feature = "serde",
            serde(serialize_with = "some_key", skip_serializing_if = "Option::is_none")
        )]
        key: Option<Arc<str>>,
    },
    /// A breaker, rate limiter or concurrency limit rejected a call.
    Rejected {
        /// The spec's name.
        spec: &'static str,
        /// Its config path.
        path: &'static str,
        /// Which mechanism rejected it.
        kind: SpecKind,
        /// When a call could pass, if the mechanism knows.
        #[cfg_attr(
            feature = "serde",
            serde(
                serialize_with = "crate::settings::ser::option_duration",
                skip_serializing_if = "Option::is_none"
            )
        )]
        retry_after: Option<Duration>,
        /// The key of a keyed instance (see [`keyed`](crate::keyed)); `None`
        /// for the spec's own.
        #[cfg_attr(
            feature = "serde",
            serde(serialize_with = "some_key", skip_serializing_if = "Option::is_none")
        )]
        key: Option<Arc<str>>,
    },
    /// An operator acted on a circuit breaker
    /// ([`Registry::operate_breaker`](crate::Registry::operate_breaker)):
    /// forced it open, closed, disabled or reset it. A change of state is
    /// also published as its `StateTransition`.
    Operated {
        /// The breaker spec's name.
        spec: &'static str,
        /// Its config path.
        path: &'static str,
        /// The key of a keyed breaker; `None` for the spec's own.
        #[cfg_attr(
            feature = "serde",
            serde(serialize_with = "some_key", skip_serializing_if = "Option::is_none")
        )]
        key: Option<Arc<str>>,
        /// What was done.
        action: Action,
        /// The state before.
        from: State,
        /// The state after.
        to: State,
    },
    /// A registry's shared backend (`resilient.redis`) answered again, or
    /// stopped answering (see [`BackendState`]).
    BackendChanged {
        /// Which backend: `"redis"`.
        backend: &'static str,
        /// Its section's path.
        path: &'static str,
        /// Its state now.
        state: BackendState,
    },
    /// The circuit breaker of a registry's shared backend changed state:
    /// open, no decision is tried and each spec's `on_backend_failure`
    /// applies at once; closed, decisions are tried again.
    BackendTransition {
        /// Which backend: `"redis"`.
        backend: &'static str,
        /// Its section's path.
        path: &'static str,
        /// The state its breaker left.
        from: State,
        /// The state its breaker entered.
        to: State,
    },
    /// A `#[fallback]` answered a failure.
    FallbackTaken {
        /// The annotated fn's name.
        function: &'static str,
    },
    /// A reload changed a spec's section
    /// ([`Registry::reload`](crate::Registry::reload)): its settings, or only
    /// how they are written (`"1000ms"` for `"1s"`), which leaves the
    /// running state untouched.
    Reloaded {
        /// The spec's name.
        spec: &'static str,
        /// Its config path.
        path: &'static str,
        /// Each key that changed, as `key: old -> new`.
        keys: Vec<String>,
    },
    /// A reload found problems and changed nothing.
    ReloadRejected {
        /// How many problems it found (the ERROR log line lists them).
        problems: usize,
    },
    /// A call took longer than its timeout.
    TimedOut {
        /// The timeout spec's name.
        spec: &'static str,
        /// Its config path.
        path: &'static str,
        /// The limit it crossed.
        #[cfg_attr(
            feature = "serde",
            serde(serialize_with = "crate::settings::ser::duration")
        )]
        after: Duration,
    },
}

/// What an operator can do to a circuit breaker (Resilience4j's
/// `FORCE_OPEN`, `CLOSE`, `DISABLE`, and its `reset`): see
/// [`Registry::operate_breaker`](crate::Registry::operate_breaker); in
/// [`Event::Operated`]. Also `circuit_breaker::Action`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize),
    serde(rename_all = "snake_case")
)]
#[non_exhaustive]
pub enum Action {
    /// Rejects every call until `close` or `reset`
    /// ([`CircuitBreakerHandle::force_open`](crate::circuit_breaker::CircuitBreakerHandle::force_open)).
    ForceOpen,
    /// Back to normal: the breaker closes with an empty window and runs its
    /// state machine again, undoing `force_open` and `disable`
    /// ([`CircuitBreakerHandle::reset`](crate::circuit_breaker::CircuitBreakerHandle::reset)).
    Close,
    /// Lets every call through and counts nothing until `close` or `reset`
    /// ([`CircuitBreakerHandle::disable`](crate::circuit_breaker::CircuitBreakerHandle::disable)).
    Disable,
    /// As `close`, and its counts (openings, closings, rejections) and what
    /// opened it forgotten: as a breaker just built.
    Reset,
}

impl Action {
    /// Every action, in the order written here.
    pub const ALL: [Action; 4] = [
        Action::ForceOpen,
        Action::Close,
        Action::Disable,
        Action::Reset,
    ];

    /// Its name: `force_open`, `close`, `disable`, `reset`.
    pub const fn label(self) -> &'static str {
        match self {
            Action::ForceOpen => "force_open",
            Action::Close => "close",
            Action::Disable => "disable",
            Action::Reset => "reset",
        }
    }

    /// The action named `name` (as [`label`](Self::label) writes it).
    pub fn from_label(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.label() == name)
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// Whether a registry's shared backend answers, as its last decision
/// found: in [`Event::BackendChanged`] and the snapshot's backends. Also
/// `backend::BackendState`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize),
    serde(rename_all = "snake_case")
)]
#[non_exhaustive]
pub enum BackendState {
    /// No decision was asked of it yet (and no startup check made).
    Unknown,
    /// Its last decision was made.
    Up,
    /// Its last decision failed (down, slower than `timeout`, an answer
    /// that is no decision), or its breaker does not try it: each spec that
    /// uses it applies its `on_backend_failure`.
    Down,
}

impl BackendState {
    /// Its code in an atomic word.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn code(self) -> u8 {
        match self {
            BackendState::Unknown => 0,
            BackendState::Up => 1,
            BackendState::Down => 2,
        }
    }

    /// The state of a code [`code`](Self::code) gave.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn from_code(code: u8) -> Self {
        match code {
            1 => BackendState::Up,
            2 => BackendState::Down,
            _ => BackendState::Unknown,
        }
    }

    /// Its name, as the snapshot writes it.
    pub const fn label(self) -> &'static str {
        match self {
            BackendState::Unknown => "unknown",
            BackendState::Up => "up",
            BackendState::Down => "down",
        }
    }
}

/// Why retry stopped retrying.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize),
    serde(rename_all = "snake_case")
)]
#[non_exhaustive]
pub enum StoppedBy {
    /// The configured `attempts` were used up.
    Attempts,
    /// The next wait would have crossed the overall `timeout`.
    Timeout,
    /// The retry budget was empty.
    Budget,
    /// The retry budget's shared backend made no decision (down, slower
    /// than its `timeout`, or its breaker open), and the budget's
    /// `on_backend_failure` is `deny`: no token was known to be left.
    BudgetUnavailable,
    /// Adaptive throttling (`throttle`) refused the retry: the attempts in
    /// its window outran `k` times those accepted, and the draw fell in the
    /// refused share.
    Throttled,
    /// Adaptive throttling with `first_calls = true` refused the call's
    /// first attempt: no call was made, and the call ended with
    /// [`Error::Throttled`](crate::Error::Throttled).
    ThrottledFirstCall,
}

impl StoppedBy {
    pub(crate) fn label(self) -> &'static str {
        match self {
            StoppedBy::Attempts => "attempts",
            StoppedBy::Timeout => "timeout",
            StoppedBy::Budget => "budget",
            StoppedBy::BudgetUnavailable => "budget_unavailable",
            StoppedBy::Throttled => "throttled",
            StoppedBy::ThrottledFirstCall => "throttled_first_call",
        }
    }
}

impl fmt::Display for StoppedBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StoppedBy::Attempts => "attempts used up",
            StoppedBy::Timeout => "the next wait would cross the overall timeout",
            StoppedBy::Budget => "retry budget empty",
            StoppedBy::BudgetUnavailable => {
                "the retry budget's Redis backend is unavailable, and its `on_backend_failure` is \"deny\""
            }
            StoppedBy::Throttled => "adaptive throttling refused the retry",
            StoppedBy::ThrottledFirstCall => "adaptive throttling refused the first call",
        })
    }
}

/// A key written as its text.
#[cfg(feature = "serde")]
fn some_key<S: serde::Serializer>(key: &Option<Arc<str>>, s: S) -> Result<S::Ok, S::Error> {
    match key {
        Some(key) => s.serialize_some(&**key),
        None => s.serialize_none(),
    }
}

type Listener = Box<dyn Fn(&Event) + Send + Sync>;

/// The `(spec, path)` a listener is limited to; `None` for every spec.
type Only = Option<(&'static str, &'static str)>;

/// The listeners of one registry, and the numbers of its events: shared by
/// its instances.
#[derive(Default)]
pub(crate) struct Listeners {
    /// The last number given to an event kept among the recent ones (see
    /// `recent`): one sequence for every ring of the registry.
    pub(crate) seq: Arc<AtomicU64>,
    count: AtomicUsize,
    /// Each listener, with its id and the `(spec, path)` it is limited to.
    list: RwLock<Vec<(u64, Only, Listener)>>,
}

impl fmt::Debug for Listeners {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Listeners")
            .field("count", &self.count.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Listeners {
    /// Whether anyone listens.
    #[inline]
    pub(crate) fn any(&self) -> bool {
        self.count.load(Ordering::Relaxed) != 0
    }

    /// Adds `listener`; returns its id, unique in the process, so that
    /// another registry's id removes nothing here.
    pub(crate) fn add(&self, only: Only, listener: Listener) -> u64 {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        let mut list = self.list.write().unwrap_or_else(PoisonError::into_inner);
        list.push((id, only, listener));
        self.count.store(list.len(), Ordering::Relaxed);
        id
    }

    /// Removes the listener `id`; `false` if there is none.
    pub(crate) fn remove(&self, id: u64) -> bool {
        let mut list = self.list.write().unwrap_or_else(PoisonError::into_inner);
        let before = list.len();
        list.retain(|(i, _, _)| *i != id);
        self.count.store(list.len(), Ordering::Relaxed);
        list.len() < before
    }

    /// Hands `event`, published by spec `spec` at `path` (empty for a
    /// fallback or a reload), to every listener it concerns.
    pub(crate) fn emit(&self, spec: &'static str, path: &'static str, event: &Event) {
        let list = self.list.read().unwrap_or_else(PoisonError::into_inner);
        for (_, only, listener) in list.iter() {
            if only.is_none_or(|(s, p)| s == spec && p == path) {
                listener(event);
            }
        }
    }
}

/// A kind of fault a chaos spec injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize),
    serde(rename_all = "snake_case")
)]
#[non_exhaustive]
pub enum Fault {
    /// The call waited `latency` first.
    Latency,
    /// The call ended with [`Error::Injected`](crate::Error::Injected).
    Error,
    /// The call returned the attribute's `outcome = ..` instead of running.
    Outcome,
}

impl Fault {
    /// The metric label: `latency`, `error`.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Fault::Latency => "latency",
            Fault::Error => "error",
            Fault::Outcome => "outcome",
        }
    }
}
