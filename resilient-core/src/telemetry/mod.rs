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
//! | `resilient::retry` | WARN | retry gives up (attempts used up, overall timeout, empty budget, a shared budget's backend unavailable), with the cause (and its `status`) |
//! | `resilient::circuit_breaker` | WARN | the breaker opens (or is forced open) |
//! | `resilient::circuit_breaker` | INFO | it moves to half-open, closes, or is disabled |
//! | `resilient::circuit_breaker`, `resilient::rate_limiter`, `resilient::concurrency` | DEBUG | each rejected call |
//! | `resilient::concurrency` | DEBUG | an adaptive limit moved, or took a new baseline: the old and new limit, the window's mean latency, the baseline, and why |
//! | `resilient::concurrency` | WARN | once per spec: a call that its door could not read `retry_header` for (the attribute, a handle, a layer applied without `reading_retry_header`) found the limit full |
//! | same | WARN | rejections, at most once per spec per 10 s: how many since the last such line |
//! | `resilient::timeout` | INFO | a call timed out |
//! | `resilient::fallback` | DEBUG | a fallback answered a failure |
//! | `resilient::admin` | WARN | an operator acted on a breaker (`Registry::operate_breaker`, an admin route): `spec`, `path`, `key`, `action`, and the state before and after; an event stream client fell `buffer` frames behind and was dropped |
//! | `resilient::registry` | ERROR | once per spec: a call found no registry with its settings (`resilient_config::init` was forgotten) |
//! | `resilient::registry` | INFO | a reload changed a spec's settings: each key, with its old and new value, and what of the state did not carry over |
//! | `resilient::registry` | ERROR | a reload found problems and changed nothing: every problem |
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
//! | `resilient_retry_exhausted_total` | counter | `reason` = `attempts`, `timeout`, `budget`, `budget_unavailable`, `throttled`, `throttled_first_call` | retry gives up (`throttled_first_call`: adaptive throttling refused a call before its first attempt, `throttle.first_calls = true`) |
//! | `resilient_circuit_breaker_transitions_total` | counter | `to` = `closed`, `open`, `half_open`, `forced_open`, `disabled` | each state change |
//! | `resilient_circuit_breaker_state` | gauge | | 0 closed, 1 half-open, 2 open, 3 forced open, 4 disabled |
//! | `resilient_concurrency_in_use` | gauge | | places held now |
//! | `resilient_concurrency_limit` | gauge | | the limit in force: `limit`, or where an adaptive limit stands |
//! | `resilient_concurrency_shed_total` | counter | | a retry announced in `retry_header` refused (also counted as a rejection in `resilient_calls_total`); registered at the first |
//! | `resilient_fallbacks_total` | counter | `function` (instead of `spec` and `path`) | a fallback answered a failure (the global metrics switch) |
//! | `resilient_hedging_attempts_total` | counter | `outcome` = `started`, `won`, `failed`, `cancelled` | each attempt of a hedged call starts (the first included), and ends: its outcome returned, a failure, or dropped (another won, or the call was dropped); `started` = `won` + `failed` + `cancelled` once no call is in flight |
//! | `resilient_chaos_injected_total` | counter | `fault` = `latency`, `error`, `outcome` | a chaos spec injected a fault into a call (a chaos spec records no `resilient_calls_total`: the mechanisms around it count the call) |
//! | `resilient_rate_limiter_backend_unavailable_total` | counter | `policy` = `deny`, `allow`, `local` | a rate limiter's call that its shared backend did not decide, answered by its `on_backend_failure` |
//! | `resilient_retry_budget_backend_unavailable_total` | counter | `policy` = `deny`, `allow`, `local` | a retry whose shared budget's backend did not decide, answered by `retry_budget.on_backend_failure` |
//! | `resilient_backend_up` | gauge | `backend` = `redis` (instead of `spec` and `path`) | 1 while the shared backend's last decision was made, 0 after one failed; set from its first decision or startup check (the global metrics switch) |
//! | `resilient_backend_failures_total` | counter | `backend` = `redis`, `reason` = `connect`, `timeout`, `error`, `garbage`, `runtime` (instead of `spec` and `path`) | each decision of the shared backend that failed (recorded whatever the switches) |
//! | `resilient_reloads_total` | counter | `result` = `applied`, `rejected` (instead of `spec` and `path`) | a reload ended (the global metrics switch) |
//!
//! A spec with metrics off (the default) records nothing and reads no clock
//! for them.

mod events;
mod recent;

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Label};
use tokio::time::Instant;

pub(crate) use events::Listeners;
pub use events::{Action, BackendState, Event, Fault, StoppedBy};
pub(crate) use recent::Recent;
pub use recent::Recorded;

use crate::settings::Section;
use crate::spec::SpecKind;

/// A spec's own telemetry switches, read from its `telemetry` table (any
/// kind of spec). A switch the spec does not set follows the registry's
/// global one (`resilient.telemetry`, see [`GlobalTelemetry`]).
///
/// | key | default | rule |
/// |---|---|---|
/// | `telemetry.logging.enabled` | the global `logging.enabled` (`true`) | `false` silences this spec's log lines (the subscriber's level filter applies either way) |
/// | `telemetry.metrics.enabled` | the global `metrics.enabled` (`false`) | `true` records this spec's metrics through the `metrics` facade (names and labels in the metrics table) |
/// | `telemetry.recent_events` | the global `recent_events` (`100`) | whole number in 0..=10000: the spec's latest events kept for its readers (its keys' included), `0` for none |
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct TelemetrySettings {
    /// Whether the spec logs; `None` to follow the global switch.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub logging: Option<bool>,
    /// Whether the spec records metrics; `None` to follow the global switch.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub metrics: Option<bool>,
    /// How many of its latest events the spec keeps; `None` to follow the
    /// global setting.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub recent_events: Option<u32>,
}

impl TelemetrySettings {
    /// Reads and validates a spec's `telemetry` table, recording every
    /// problem found; no switch of its own when the table is absent.
    pub fn read(s: &mut Section<'_>) -> Option<Self> {
        s.table("telemetry", |t| {
            let logging = t.table("logging", |l| l.bool("enabled", true));
            let metrics = t.table("metrics", |m| m.bool("enabled", false));
            let recent_events = if t.has("recent_events") {
                Some(recent_events(t)?)
            } else {
                None
            };
            Some(Self {
                logging: match logging {
                    None => None,
                    Some(l) => Some(l?),
                },
                metrics: match metrics {
                    None => None,
                    Some(m) => Some(m?),
                },
                recent_events,
            })
        })
        .unwrap_or(Some(Self::default()))
    }

    /// The switches in effect: the spec's own, else the global ones.
    pub(crate) fn under(self, global: GlobalTelemetry) -> Switches {
        Switches {
            logging: self.logging.unwrap_or(global.logging),
            metrics: self.metrics.unwrap_or(global.metrics),
            recent_events: self.recent_events.unwrap_or(global.recent_events),
        }
    }
}

/// Reads `recent_events`: a whole number in `0..=10000`.
fn recent_events(s: &mut Section<'_>) -> Option<u32> {
    s.int(
        "recent_events",
        Some(u64::from(recent::DEFAULT_RECENT)),
        0,
        recent::MAX_RECENT,
    )
    .and_then(|n| u32::try_from(n).ok())
}

/// The telemetry switches of every spec at once, read from the section
/// `resilient.telemetry` (optional); each spec's own `telemetry` table
/// overrides them.
///
/// | key | default | rule |
/// |---|---|---|
/// | `logging.enabled` | `true` | `false` silences the log lines of every spec that does not set its own switch (a reload's changes included), and of fallbacks; a rejected reload is logged at ERROR either way, since it needs an operator |
/// | `metrics.enabled` | `false` | `true` records the metrics of every spec that does not set its own switch, of fallbacks and of reloads |
/// | `recent_events` | `100` | whole number in 0..=10000: the latest events each spec keeps (and the registry keeps of its own: fallbacks, reloads, operator actions), unless a spec sets its own; `0` for none |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct GlobalTelemetry {
    /// Whether specs log, unless they say otherwise.
    pub logging: bool,
    /// Whether specs record metrics, unless they say otherwise.
    pub metrics: bool,
    /// How many of its latest events each spec keeps, unless it says
    /// otherwise.
    pub recent_events: u32,
}

impl Default for GlobalTelemetry {
    fn default() -> Self {
        Self {
            logging: true,
            metrics: false,
            recent_events: recent::DEFAULT_RECENT,
        }
    }
}

impl GlobalTelemetry {
    /// Where the global switches are read from.
    pub const PATH: &'static str = "resilient.telemetry";

    /// Reads and validates the section at [`PATH`](Self::PATH) (`s`),
    /// recording every problem found; the defaults when it is absent.
    pub fn read(s: &mut Section<'_>) -> Option<Self> {
        let defaults = Self::default();
        let logging = s
            .table("logging", |l| l.bool("enabled", defaults.logging))
            .unwrap_or(Some(defaults.logging));
        let metrics = s
            .table("metrics", |m| m.bool("enabled", defaults.metrics))
            .unwrap_or(Some(defaults.metrics));
        let recent_events = recent_events(s);
        Some(Self {
            logging: logging?,
            metrics: metrics?,
            recent_events: recent_events?,
        })
    }
}

/// The telemetry switches in effect for one spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Switches {
    pub(crate) logging: bool,
    pub(crate) metrics: bool,
    /// The size of the spec's ring of recent events.
    pub(crate) recent_events: u32,
}

/// How a call through one spec ended, for metrics.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Succeeded.
    Success,
    /// Failed.
    Failure,
    /// Ended with an outcome the spec's classification ignores.
    Ignored,
    /// Rejected without running.
    Rejected,
    /// Took longer than a timeout.
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
}

/// Records `value` as `field` of the span the call runs in (the caller's:
/// the chain enters no span of its own), if that span declared the field,
/// as `#[tracing::instrument(fields(http.request.resend_count =
/// tracing::field::Empty))]` does; nothing otherwise. A trace exporter
/// (tracing-opentelemetry) then shows it as an attribute of that span.
/// Off the success path only: a retry, a hedge, a fallback.
pub(crate) fn on_caller_span(field: &'static str, value: impl tracing::Value) {
    tracing::Span::current().record(field, value);
}

/// The fields of the caller's span that the chain records, when the span
/// declares them (see [`on_caller_span`]).
pub(crate) mod span_fields {
    /// Retries scheduled so far in the call: OpenTelemetry's one standard
    /// attribute about resending, "the ordinal number of request resending
    /// attempt (for any reason, including redirects)".
    pub(crate) const RESEND_COUNT: &str = "http.request.resend_count";
    /// The same count under this crate's own name, for a span that is no
    /// HTTP request's.
    pub(crate) const RETRIES: &str = "resilience.retries";
    /// Hedges started so far in the call (attempts after the first).
    pub(crate) const HEDGES: &str = "resilience.hedges";
    /// The annotated fn whose `#[fallback]` answered the call.
    pub(crate) const FALLBACK: &str = "resilience.fallback";
}

/// A counter registered when it is first incremented, unless it was
/// registered at once: the zero-series policy.
///
/// Prometheus asks to export 0 for "any time series you know may exist in
/// advance" ("Avoid missing metrics", prometheus.io/docs/practices/
/// instrumentation): a ratio or an alert over a series that is missing
/// until something happens shows no data instead of 0. Registered at once
/// are the series a dashboard's ratios and alerts read: every spec's
/// `success` and `failure` calls, a breaker's, limit's or rate limiter's
/// `rejected` calls, a timeout's `timed_out` calls, a breaker's
/// transitions to `open`, a retry's exhaustion by `attempts`. The others
/// (`ignored` and `cancelled` calls, the other transitions and reasons)
/// only say that something happened, and appear when it first does: a
/// first service built on this crate exported 72 of its 118 series at 0,
/// every outcome of every spec. The first occurrence registers the series
/// (an allocation, and the recorder's lock), once per series.
#[derive(Debug, Default)]
pub(crate) struct LazyCounter(OnceLock<Counter>);

impl LazyCounter {
    /// A counter registered now.
    pub(crate) fn now(counter: Counter) -> Self {
        Self(OnceLock::from(counter))
    }

    /// A counter registered when first incremented.
    pub(crate) fn later() -> Self {
        Self(OnceLock::new())
    }

    /// Adds `n`, registering the series with `register` the first time.
    ///
    /// The registration stays out of line: inlined, `OnceLock`'s
    /// initialisation made every call site larger, and the success path of
    /// each mechanism took some 20 instructions more with metrics off.
    #[inline]
    pub(crate) fn increment(&self, n: u64, register: impl FnOnce() -> Counter) {
        match self.0.get() {
            Some(counter) => counter.increment(n),
            None => self.first(n, register),
        }
    }

    #[cold]
    #[inline(never)]
    fn first(&self, n: u64, register: impl FnOnce() -> Counter) {
        self.0.get_or_init(register).increment(n);
    }
}

/// Whether a call outcome's series is registered at once for `kind` (see
/// [`LazyCounter`]).
fn eager(kind: SpecKind, outcome: Outcome) -> bool {
    match outcome {
        Outcome::Success | Outcome::Failure => true,
        Outcome::Rejected => [
            SpecKind::CIRCUIT_BREAKER,
            SpecKind::CONCURRENCY_LIMIT,
            SpecKind::RATE_LIMITER,
        ]
        .contains(&kind),
        Outcome::TimedOut => kind == SpecKind::TIMEOUT,
        Outcome::Ignored | Outcome::Cancelled => false,
    }
}

/// The handles of the metrics every kind of spec records.
#[derive(Debug)]
struct CallMeters {
    calls: [LazyCounter; 6],
    duration: Histogram,
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

/// A WARN summary of rejections due now: how many, and since when (words).
#[derive(Debug)]
pub(crate) struct Summary {
    pub(crate) rejected: u64,
    pub(crate) since: String,
}

/// Logs a rejection under the mechanism's target (a tracing target must be
/// a literal where the event is written): DEBUG for the call, and the WARN
/// summary when one is due. `$why` is the reason, as `format_args!` takes
/// it.
macro_rules! log_rejection {
    ($target:literal, $telemetry:expr, $retry_after:expr, $($why:tt)+) => {{
        let telemetry: &$crate::telemetry::Telemetry = $telemetry;
        if let Some(summary) = telemetry.rejected($retry_after) {
            let (spec, path, key) = (telemetry.spec, telemetry.path, telemetry.key());
            ::tracing::debug!(target: $target, spec, path, key, "call rejected: {}", format_args!($($why)+));
            if let Some(s) = summary {
                let rejected = s.rejected;
                ::tracing::warn!(
                    target: $target,
                    spec, path, key, rejected,
                    "{rejected} call(s) rejected {} ({}); at most one such line per 10s",
                    s.since,
                    format_args!($($why)+)
                );
            }
        }
    }};
}
pub(crate) use log_rejection;

/// One spec instance's telemetry, what every mechanism shares: its
/// switches, the metrics of its calls, its rejections' log lines and its
/// listeners. What is particular to a mechanism (a breaker's transitions, a
/// retry's waits) the mechanism logs and counts itself.
pub struct Telemetry {
    pub(crate) spec: &'static str,
    pub(crate) path: &'static str,
    pub(crate) kind: SpecKind,
    logging: AtomicBool,
    metrics: AtomicBool,
    /// Registered the first time metrics are switched on.
    meters: OnceLock<CallMeters>,
    /// The outcomes a call through this kind of spec can have.
    outcomes: &'static [Outcome],
    /// Shared by a spec's keyed instances with its own.
    rejections: Arc<Rejections>,
    origin: Instant,
    listeners: Arc<Listeners>,
    /// The spec's recent events: shared by its keyed instances with its own.
    recent: Arc<Recent>,
    /// The `seq` of the entry holding this instance's latest run of
    /// rejections (0 for none): the next rejection is counted into it while
    /// it is still the ring's latest.
    run: AtomicU64,
    /// The key of a keyed instance, and whether its metrics carry it.
    key: Option<(Arc<str>, bool)>,
}

impl fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Telemetry")
            .field("spec", &self.spec)
            .field("path", &self.path)
            .field("logging", &self.logging())
            .field("metrics", &self.metrics_on())
            .finish_non_exhaustive()
    }
}

impl Telemetry {
    pub(crate) fn new(
        spec: &'static str,
        path: &'static str,
        kind: SpecKind,
        outcomes: &'static [Outcome],
        switches: Switches,
        listeners: Arc<Listeners>,
    ) -> Self {
        let telemetry = Self {
            spec,
            path,
            kind,
            logging: AtomicBool::new(false),
            metrics: AtomicBool::new(false),
            meters: OnceLock::new(),
            outcomes,
            rejections: Arc::new(Rejections {
                since_summary: AtomicU64::new(0),
                summary_at_ms: AtomicU64::new(NEVER),
            }),
            origin: Instant::now(),
            recent: Arc::new(Recent::new(
                Arc::clone(&listeners.seq),
                switches.recent_events,
            )),
            listeners,
            run: AtomicU64::new(0),
            key: None,
        };
        telemetry.switch(switches);
        telemetry
    }

    /// The telemetry of the instance of `key` (its text) among the keyed
    /// instances of this one's spec: the same names, listeners and
    /// rejection summaries (one WARN line per spec per period, not one per
    /// key), `switches` as given. Its metrics carry `key` as a label with
    /// `label`; without it, they add to the spec's counters and histograms,
    /// and it registers no gauges (one series cannot hold the state of many
    /// instances).
    pub(crate) fn for_key(&self, key: Arc<str>, label: bool, switches: Switches) -> Self {
        let telemetry = Self {
            spec: self.spec,
            path: self.path,
            kind: self.kind,
            logging: AtomicBool::new(false),
            metrics: AtomicBool::new(false),
            meters: OnceLock::new(),
            outcomes: self.outcomes,
            rejections: Arc::clone(&self.rejections),
            origin: self.origin,
            listeners: Arc::clone(&self.listeners),
            recent: Arc::clone(&self.recent),
            run: AtomicU64::new(0),
            key: Some((key, label)),
        };
        telemetry.switch(switches);
        telemetry
    }

    /// Telemetry with the defaults and no listener, for a unit test.
    #[cfg(test)]
    pub(crate) fn detached(spec: &'static str, path: &'static str, kind: SpecKind) -> Self {
        Self::new(
            spec,
            path,
            kind,
            &Outcome::ALL,
            TelemetrySettings::default().under(GlobalTelemetry::default()),
            Arc::default(),
        )
    }

    /// The path of the spec's section.
    pub(crate) fn path(&self) -> &'static str {
        self.path
    }

    /// Turns logging and metrics on or off. Metric handles are registered
    /// the first time metrics are on, with the recorder installed then.
    pub(crate) fn switch(&self, switches: Switches) {
        if switches.metrics {
            self.meters.get_or_init(|| {
                let kind = self.kind.label();
                CallMeters {
                    calls: Outcome::ALL.map(|o| {
                        if !self.outcomes.contains(&o) {
                            LazyCounter::now(Counter::noop())
                        } else if eager(self.kind, o) {
                            LazyCounter::now(self.calls_counter(o))
                        } else {
                            LazyCounter::later()
                        }
                    }),
                    duration: metrics::histogram!(
                        "resilient_call_duration_seconds",
                        self.labels(&[("kind", kind)])
                    ),
                }
            });
        }
        self.logging.store(switches.logging, Ordering::Relaxed);
        self.metrics.store(switches.metrics, Ordering::Relaxed);
        self.recent.resize(switches.recent_events);
    }

    /// The switches in effect now.
    pub(crate) fn switches(&self) -> Switches {
        Switches {
            logging: self.logging(),
            metrics: self.metrics_on(),
            recent_events: self.recent.capacity(),
        }
    }

    /// The spec's recent events.
    pub(crate) fn recent(&self) -> &Recent {
        &self.recent
    }

    /// Whether the spec logs.
    #[inline]
    pub(crate) fn logging(&self) -> bool {
        self.logging.load(Ordering::Relaxed)
    }

    /// Whether the spec records metrics.
    #[inline]
    pub(crate) fn metrics_on(&self) -> bool {
        self.metrics.load(Ordering::Relaxed)
    }

    /// The key of a keyed instance, for its log lines (a field that is
    /// `None` is left out of the line).
    #[inline]
    pub(crate) fn key(&self) -> Option<&str> {
        self.key.as_ref().map(|(k, _)| &**k)
    }

    /// The key of a keyed instance, for its events.
    pub(crate) fn event_key(&self) -> Option<Arc<str>> {
        self.key.as_ref().map(|(k, _)| Arc::clone(k))
    }

    /// The labels of this spec's series: `spec`, `path`, `key` when the
    /// instance is keyed and labels it, then `extra`.
    pub(crate) fn labels(&self, extra: &[(&'static str, &'static str)]) -> Vec<Label> {
        let mut labels = vec![Label::new("spec", self.spec), Label::new("path", self.path)];
        if let Some((key, true)) = &self.key {
            labels.push(Label::new("key", key.to_string()));
        }
        labels.extend(extra.iter().map(|(k, v)| Label::new(*k, *v)));
        labels
    }

    /// The counter of this spec's calls that end with `outcome`.
    fn calls_counter(&self, outcome: Outcome) -> Counter {
        self.counter(
            "resilient_calls_total",
            &[("kind", self.kind.label()), ("outcome", outcome.label())],
        )
    }

    /// A counter of this spec, registered now.
    pub(crate) fn counter(
        &self,
        name: &'static str,
        extra: &[(&'static str, &'static str)],
    ) -> Counter {
        metrics::counter!(name, self.labels(extra))
    }

    /// A gauge of this spec, registered now; a no-op for a keyed instance
    /// whose metrics do not carry its key.
    pub(crate) fn gauge(&self, name: &'static str) -> Gauge {
        if let Some((_, false)) = &self.key {
            return Gauge::noop();
        }
        metrics::gauge!(name, self.labels(&[]))
    }

    #[inline]
    fn meters(&self) -> Option<&CallMeters> {
        if self.metrics_on() {
            self.meters.get()
        } else {
            None
        }
    }

    /// When a call started, if calls are timed (metrics on); no clock read
    /// otherwise.
    #[inline]
    pub(crate) fn start(&self) -> Option<Instant> {
        if self.metrics_on() {
            Some(Instant::now())
        } else {
            None
        }
    }

    /// Whether calls are timed (metrics on).
    #[inline]
    pub(crate) fn timed(&self) -> bool {
        self.metrics_on()
    }

    /// Records how a call ended, and how long it took if it was timed.
    #[inline]
    pub(crate) fn ended(&self, outcome: Outcome, took: Option<Duration>) {
        if let Some(m) = self.meters() {
            self.count_ended(m, outcome, took);
        }
    }

    /// [`ended`](Self::ended)'s counting, out of line so that the calls of
    /// a spec whose metrics are off carry none of it.
    #[inline(never)]
    fn count_ended(&self, m: &CallMeters, outcome: Outcome, took: Option<Duration>) {
        m.calls[outcome as usize].increment(1, || self.calls_counter(outcome));
        if let Some(took) = took {
            m.duration.record(took.as_secs_f64());
        }
    }

    /// Records a call's result as a success or a failure (for the mechanisms
    /// that do not classify), and passes it on.
    #[inline]
    pub(crate) fn done<T, E>(&self, out: Result<T, E>, started: Option<Instant>) -> Result<T, E> {
        if self.metrics_on() {
            let outcome = if out.is_ok() {
                Outcome::Success
            } else {
                Outcome::Failure
            };
            self.ended(outcome, started.map(|s| s.elapsed()));
        }
        out
    }

    /// Hands `event` to the listeners, if any, and keeps it among the
    /// spec's recent events, if it keeps any: two relaxed loads when
    /// neither.
    #[inline]
    pub(crate) fn emit(&self, event: impl FnOnce() -> Event) {
        let listening = self.listeners.any();
        if !listening && !self.recent.on() {
            return;
        }
        let event = event();
        if listening {
            self.listeners.emit(self.spec, self.path, &event);
        }
        self.recent.record(event);
    }

    /// [`emit`](Self::emit) for a rejection: counted into this instance's
    /// latest entry when it is a rejection still the latest of the ring
    /// (no event built, no clock read), else kept as a new entry.
    #[inline]
    fn emit_rejection(&self, event: impl FnOnce() -> Event) {
        let listening = self.listeners.any();
        if !listening && !self.recent.on() {
            return;
        }
        if !listening && self.recent.repeat(self.run.load(Ordering::Relaxed)) {
            return;
        }
        let event = event();
        if listening {
            self.listeners.emit(self.spec, self.path, &event);
            if self.recent.repeat(self.run.load(Ordering::Relaxed)) {
                return;
            }
        }
        let seq = self.recent.record(event);
        self.run.store(seq, Ordering::Relaxed);
    }

    /// Counts a rejected call and tells the listeners; when the spec logs,
    /// what to log: `Some(None)` the call's DEBUG line only, `Some(Some(..))`
    /// a WARN summary too. Used through [`log_rejection!`].
    pub(crate) fn rejected(&self, retry_after: Option<Duration>) -> Option<Option<Summary>> {
        self.ended(Outcome::Rejected, None);
        self.emit_rejection(|| Event::Rejected {
            spec: self.spec,
            path: self.path,
            kind: self.kind,
            retry_after,
            key: self.event_key(),
        });
        if !self.logging() {
            return None;
        }
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
            return Some(Some(Summary { rejected, since }));
        }
        Some(None)
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
    }
}
