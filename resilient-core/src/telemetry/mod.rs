//! Telemetry: logs through `tracing`, metrics through the `metrics` facade,
//! typed [`Event`]s for listeners, and a [`Snapshot`](crate::registry::Snapshot)
//! of every spec.
//!
//! # Logs
//!
//! Each mechanism logs under its own target, with the fields `spec` (the spec
//! type's name) and `path` (its config path):
//!
//! | target | level | when |
//! |---|---|---|
//! | `resilient::retry` | INFO | a retry is scheduled: the failure (its `Display`), the wait, where the wait came from (`wait_from` = `backoff`, `retry_after` for a delay hint such as HTTP's `Retry-After`, `rate_limiter` or `circuit_breaker` for a rejection inside the retry), and a failed value's `status` (the HTTP status with `classify = http`) |
//! | `resilient::retry` | WARN | retry gives up (attempts used up, overall timeout, empty budget), with the cause (and its `status`) |
//! | `resilient::circuit_breaker` | WARN | the breaker opens (or is forced open) |
//! | `resilient::circuit_breaker` | INFO | it moves to half-open, closes, or is disabled |
//! | `resilient::circuit_breaker`, `resilient::rate_limiter`, `resilient::concurrency` | DEBUG | each rejected call |
//! | same | WARN | rejections, at most once per spec per 10 s: how many since the last such line |
//! | `resilient::timeout` | INFO | a call timed out |
//! | `resilient::fallback` | DEBUG | a fallback answered a failure |
//! | `resilient::registry` | ERROR | once per spec: a call found no registry with its settings (`resilient_config::init` was forgotten) |
//!
//! Nothing is logged on the success path, and no span is entered: the chain
//! runs inside the caller's span, so `#[tracing::instrument]` on the fn puts
//! these lines under it.
//!
//! # Metrics
//!
//! With `telemetry.metrics.enabled = true` in a spec's section, its metrics
//! are recorded through the [`metrics`] facade, to whichever recorder
//! (exporter) the application installed. The spec's handles are registered
//! when the registry is built: install the recorder before
//! `resilient_config::init`. Every series carries the labels `spec` and
//! `path`:
//!
//! | name | type | more labels | when |
//! |---|---|---|---|
//! | `resilient_calls_total` | counter | `kind`, `outcome` = `success`, `failure`, `ignored`, `rejected`, `timed_out`, `cancelled` | each call through the spec ends: exactly one outcome per call (`cancelled`: dropped before it ended, as by a timeout outside the spec) |
//! | `resilient_call_duration_seconds` | histogram | `kind` | each call that ran (not rejected), from entering the spec to its outcome |
//! | `resilient_retries_total` | counter | | each retry scheduled |
//! | `resilient_retry_exhausted_total` | counter | `reason` = `attempts`, `timeout`, `budget` | retry gives up |
//! | `resilient_circuit_breaker_transitions_total` | counter | `to` = `closed`, `open`, `half_open`, `forced_open`, `disabled` | each state change |
//! | `resilient_circuit_breaker_state` | gauge | | 0 closed, 1 half-open, 2 open, 3 forced open, 4 disabled |
//! | `resilient_concurrency_in_use` | gauge | | places held now |
//!
//! A spec with metrics off (the default) records nothing and reads no clock
//! for them.

mod events;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Label};
use tokio::time::Instant;

pub(crate) use events::{emit_in_use, Listeners};
pub use events::{Event, StoppedBy};

use crate::circuit_breaker::State;
use crate::retry::Wait;
use crate::settings::Section;
use crate::spec::SpecKind;

/// A spec's telemetry switches, read from its `telemetry` table (any kind of
/// spec).
///
/// | key | default | rule |
/// |---|---|---|
/// | `telemetry.logging.enabled` | `true` | `false` silences this spec's log lines (the subscriber's level filter applies either way) |
/// | `telemetry.metrics.enabled` | `false` | `true` records this spec's metrics through the `metrics` facade (names and labels in the metrics table) |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TelemetrySettings {
    /// Whether the spec logs.
    pub logging: bool,
    /// Whether the spec records metrics.
    pub metrics: bool,
}

impl Default for TelemetrySettings {
    fn default() -> Self {
        Self {
            logging: true,
            metrics: false,
        }
    }
}

impl TelemetrySettings {
    /// Reads and validates a spec's `telemetry` table, recording every
    /// problem found; the defaults when the table is absent.
    pub fn read(s: &mut Section<'_>) -> Option<Self> {
        let defaults = Self::default();
        s.table("telemetry", |t| {
            let logging = t
                .table("logging", |l| l.bool("enabled", defaults.logging))
                .unwrap_or(Some(defaults.logging));
            let metrics = t
                .table("metrics", |m| m.bool("enabled", defaults.metrics))
                .unwrap_or(Some(defaults.metrics));
            Some(Self {
                logging: logging?,
                metrics: metrics?,
            })
        })
        .unwrap_or(Some(defaults))
    }
}

/// How a call through one spec ended, for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Success,
    Failure,
    Ignored,
    Rejected,
    TimedOut,
    /// Dropped before it ended: cancelled by a timeout outside, by a caller
    /// that went away, or by a panic.
    Cancelled,
}

impl Outcome {
    const ALL: [Outcome; 6] = [
        Outcome::Success,
        Outcome::Failure,
        Outcome::Ignored,
        Outcome::Rejected,
        Outcome::TimedOut,
        Outcome::Cancelled,
    ];

    fn label(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Failure => "failure",
            Outcome::Ignored => "ignored",
            Outcome::Rejected => "rejected",
            Outcome::TimedOut => "timed_out",
            Outcome::Cancelled => "cancelled",
        }
    }

    /// Whether a spec of `kind` can end a call this way.
    fn possible(self, kind: SpecKind) -> bool {
        match self {
            Outcome::Success | Outcome::Failure | Outcome::Cancelled => true,
            Outcome::Ignored => matches!(kind, SpecKind::Retry | SpecKind::CircuitBreaker),
            Outcome::Rejected => matches!(
                kind,
                SpecKind::CircuitBreaker | SpecKind::ConcurrencyLimit | SpecKind::RateLimiter
            ),
            Outcome::TimedOut => kind == SpecKind::Timeout,
        }
    }
}

fn kind_label(kind: SpecKind) -> &'static str {
    match kind {
        SpecKind::Retry => "retry",
        SpecKind::CircuitBreaker => "circuit_breaker",
        SpecKind::Timeout => "timeout",
        SpecKind::ConcurrencyLimit => "concurrency_limit",
        SpecKind::RateLimiter => "rate_limiter",
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

/// A spec's metric handles, resolved once when its instance is built.
#[derive(Debug)]
struct Meters {
    calls: [Counter; 6],
    duration: Histogram,
    retries: Counter,
    exhausted: [Counter; 3],
    transitions: [Counter; 5],
    state: Gauge,
    in_use: Gauge,
}

impl Meters {
    fn new(spec: &'static str, path: &'static str, kind: SpecKind) -> Self {
        let base = || vec![Label::new("spec", spec), Label::new("path", path)];
        let with = |pairs: &[(&'static str, &'static str)]| {
            let mut labels = base();
            labels.extend(pairs.iter().map(|(k, v)| Label::new(*k, *v)));
            labels
        };
        let kind_l = kind_label(kind);
        let calls = Outcome::ALL.map(|o| {
            if o.possible(kind) {
                metrics::counter!(
                    "resilient_calls_total",
                    with(&[("kind", kind_l), ("outcome", o.label())])
                )
            } else {
                Counter::noop()
            }
        });
        let retry = kind == SpecKind::Retry;
        let breaker = kind == SpecKind::CircuitBreaker;
        Self {
            calls,
            duration: metrics::histogram!(
                "resilient_call_duration_seconds",
                with(&[("kind", kind_l)])
            ),
            retries: if retry {
                metrics::counter!("resilient_retries_total", base())
            } else {
                Counter::noop()
            },
            exhausted: [StoppedBy::Attempts, StoppedBy::Timeout, StoppedBy::Budget].map(|r| {
                if retry {
                    metrics::counter!(
                        "resilient_retry_exhausted_total",
                        with(&[("reason", r.label())])
                    )
                } else {
                    Counter::noop()
                }
            }),
            transitions: STATES.map(|s| {
                if breaker {
                    metrics::counter!(
                        "resilient_circuit_breaker_transitions_total",
                        with(&[("to", state_label(s))])
                    )
                } else {
                    Counter::noop()
                }
            }),
            state: if breaker {
                metrics::gauge!("resilient_circuit_breaker_state", base())
            } else {
                Gauge::noop()
            },
            in_use: if kind == SpecKind::ConcurrencyLimit {
                metrics::gauge!("resilient_concurrency_in_use", base())
            } else {
                Gauge::noop()
            },
        }
    }
}

/// At most one WARN summary of rejections per spec per this period.
const REJECTION_SUMMARY_MS: u64 = 10_000;
/// No summary written yet.
const NEVER: u64 = u64::MAX;

/// Rejections counted since the last WARN summary, and when it was written.
#[derive(Debug)]
struct Rejections {
    since_summary: AtomicU64,
    summary_at_ms: AtomicU64,
}

/// Logs at `level` under the target of `kind`'s module: a target must be a
/// literal at each call site.
macro_rules! log_as {
    ($kind:expr, $level:ident, $($rest:tt)+) => {
        match $kind {
            SpecKind::Retry => tracing::$level!(target: "resilient::retry", $($rest)+),
            SpecKind::CircuitBreaker => tracing::$level!(target: "resilient::circuit_breaker", $($rest)+),
            SpecKind::Timeout => tracing::$level!(target: "resilient::timeout", $($rest)+),
            SpecKind::ConcurrencyLimit => tracing::$level!(target: "resilient::concurrency", $($rest)+),
            SpecKind::RateLimiter => tracing::$level!(target: "resilient::rate_limiter", $($rest)+),
        }
    };
}

/// One spec instance's telemetry: its switches, metric handles and
/// listeners.
#[derive(Debug)]
pub(crate) struct Telemetry {
    pub(crate) spec: &'static str,
    pub(crate) path: &'static str,
    pub(crate) kind: SpecKind,
    pub(crate) logging: bool,
    meters: Option<Box<Meters>>,
    rejections: Rejections,
    origin: Instant,
    listeners: Arc<Listeners>,
}

impl Telemetry {
    pub(crate) fn new(
        spec: &'static str,
        path: &'static str,
        kind: SpecKind,
        settings: TelemetrySettings,
        listeners: Arc<Listeners>,
    ) -> Self {
        Self {
            spec,
            path,
            kind,
            logging: settings.logging,
            meters: settings
                .metrics
                .then(|| Box::new(Meters::new(spec, path, kind))),
            rejections: Rejections {
                since_summary: AtomicU64::new(0),
                summary_at_ms: AtomicU64::new(NEVER),
            },
            origin: Instant::now(),
            listeners,
        }
    }

    /// Telemetry with the defaults and no listener, for a unit test.
    #[cfg(test)]
    pub(crate) fn detached(spec: &'static str, path: &'static str, kind: SpecKind) -> Self {
        Self::new(
            spec,
            path,
            kind,
            TelemetrySettings::default(),
            Arc::default(),
        )
    }

    /// Whether calls are timed (metrics on).
    #[inline]
    pub(crate) fn timed(&self) -> bool {
        self.meters.is_some()
    }

    /// When a call started, if calls are timed; no clock read otherwise.
    #[inline]
    pub(crate) fn start(&self) -> Option<Instant> {
        if self.meters.is_some() {
            Some(Instant::now())
        } else {
            None
        }
    }

    /// Records how a call ended, and how long it took if it was timed.
    #[inline]
    pub(crate) fn ended(&self, outcome: Outcome, took: Option<Duration>) {
        if let Some(m) = &self.meters {
            m.calls[outcome as usize].increment(1);
            if let Some(took) = took {
                m.duration.record(took.as_secs_f64());
            }
        }
    }

    /// Records a call's result as a success or a failure (for the mechanisms
    /// that do not classify), and passes it on.
    #[inline]
    pub(crate) fn done<T, E>(&self, out: Result<T, E>, started: Option<Instant>) -> Result<T, E> {
        if self.meters.is_some() {
            let outcome = if out.is_ok() {
                Outcome::Success
            } else {
                Outcome::Failure
            };
            self.ended(outcome, started.map(|s| s.elapsed()));
        }
        out
    }

    /// Emits `event` to the listeners, if any: one relaxed load when none
    /// listens.
    #[inline]
    pub(crate) fn emit(&self, event: impl FnOnce() -> Event) {
        if self.listeners.any() {
            self.listeners.emit(self.spec, self.path, &event());
        }
    }

    /// A call was rejected (`why`, for the log).
    pub(crate) fn rejected(
        &self,
        why: fmt::Arguments<'_>,
        retry_after: impl FnOnce() -> Option<Duration>,
    ) {
        self.ended(Outcome::Rejected, None);
        self.emit(|| Event::Rejected {
            spec: self.spec,
            path: self.path,
            kind: self.kind,
            retry_after: retry_after(),
        });
        if !self.logging {
            return;
        }
        let (spec, path) = (self.spec, self.path);
        log_as!(self.kind, debug, spec, path, "call rejected: {why}");
        let r = &self.rejections;
        r.since_summary.fetch_add(1, Ordering::Relaxed);
        let now = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX - 1);
        let last = r.summary_at_ms.load(Ordering::Relaxed);
        let due = last == NEVER || now.saturating_sub(last) >= REJECTION_SUMMARY_MS;
        if due
            && r.summary_at_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            let rejected = r.since_summary.swap(0, Ordering::Relaxed);
            let since = if last == NEVER {
                "so far".to_owned()
            } else {
                format!(
                    "in the last {}",
                    humantime::format_duration(Duration::from_millis(now - last))
                )
            };
            log_as!(
                self.kind,
                warn,
                spec,
                path,
                rejected,
                "{rejected} call(s) rejected {since} ({why}); at most one such line per 10s"
            );
        }
    }

    /// A breaker moved from `from` to `to`.
    pub(crate) fn transition(&self, from: State, to: State) {
        if let Some(m) = &self.meters {
            m.transitions[state_index(to)].increment(1);
            m.state.set(state_value(to));
        }
        self.emit(|| Event::StateTransition {
            spec: self.spec,
            path: self.path,
            from,
            to,
        });
        if !self.logging {
            return;
        }
        let (spec, path) = (self.spec, self.path);
        match to {
            State::Open | State::ForcedOpen => tracing::warn!(
                target: "resilient::circuit_breaker",
                spec, path, %from, %to,
                "circuit breaker {from} -> {to}"
            ),
            _ => tracing::info!(
                target: "resilient::circuit_breaker",
                spec, path, %from, %to,
                "circuit breaker {from} -> {to}"
            ),
        }
    }

    /// A breaker's state gauge, set when it is built.
    pub(crate) fn initial_state(&self, state: State) {
        if let Some(m) = &self.meters {
            m.state.set(state_value(state));
        }
    }

    /// A retry will start after a wait; the failure before it is `failure`.
    pub(crate) fn retry_scheduled(&self, wait: Wait, failure: &dyn fmt::Display) {
        if let Some(m) = &self.meters {
            m.retries.increment(1);
        }
        let Wait {
            retry,
            delay,
            from,
            status,
        } = wait;
        self.emit(|| Event::RetryScheduled {
            spec: self.spec,
            path: self.path,
            retry,
            delay,
        });
        if self.logging {
            let (spec, path, wait_from, said) = (self.spec, self.path, from.label(), from.said());
            tracing::info!(
                target: "resilient::retry",
                spec, path, retry, ?delay, wait_from, status, %failure,
                "call failed ({failure}); retry {retry} after {delay:?}{said}"
            );
        }
    }

    /// Retry gave up after `calls` calls, because of `by`; `cause` is the
    /// last failure, `status` its status if it is a failed value that has one.
    pub(crate) fn retry_stopped(
        &self,
        calls: u64,
        by: StoppedBy,
        cause: &dyn fmt::Display,
        status: Option<u16>,
    ) {
        if let Some(m) = &self.meters {
            m.exhausted[by as usize].increment(1);
        }
        self.emit(|| Event::RetryExhausted {
            spec: self.spec,
            path: self.path,
            calls,
            reason: by,
        });
        if self.logging {
            let (spec, path) = (self.spec, self.path);
            tracing::warn!(
                target: "resilient::retry",
                spec, path, calls, reason = by.label(), status, %cause,
                "retry gave up after {calls} call(s), {by}: {cause}"
            );
        }
    }

    /// A call took longer than `after`.
    pub(crate) fn timed_out(&self, after: Duration, started: Option<Instant>) {
        self.ended(Outcome::TimedOut, started.map(|s| s.elapsed()));
        self.emit(|| Event::TimedOut {
            spec: self.spec,
            path: self.path,
            after,
        });
        if self.logging {
            let (spec, path) = (self.spec, self.path);
            tracing::info!(
                target: "resilient::timeout",
                spec, path, ?after,
                "call timed out after {after:?}"
            );
        }
    }

    /// A concurrency limiter's place was taken (`true`) or freed.
    #[inline(always)]
    pub(crate) fn held(&self, taken: bool) {
        if let Some(m) = &self.meters {
            if taken {
                m.in_use.increment(1.0);
            } else {
                m.in_use.decrement(1.0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_indexes_follow_all() {
        for (i, o) in Outcome::ALL.iter().enumerate() {
            assert_eq!(*o as usize, i);
        }
        for (i, s) in STATES.iter().enumerate() {
            assert_eq!(state_index(*s), i);
        }
    }
}
