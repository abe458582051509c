//! What a stack will do, before it runs: every spec's settings read as
//! calls and waits, every annotated fn's chain read as the most calls one
//! call can send to its dependency and the longest a caller can wait, and
//! the checks of specs against each other that run at startup and at each
//! reload.
//!
//! ```
//! use resilient_core::settings::Value;
//! use resilient_core::{retryable, timeout, Error, Registry, RetrySpec, TimeoutSpec};
//!
//! #[derive(RetrySpec)]
//! #[spec("resilient.retry.pet")]
//! pub struct PetRetry;
//!
//! #[derive(TimeoutSpec)]
//! #[spec("resilient.timeout.pet")]
//! pub struct PetTimeout;
//!
//! #[retryable(PetRetry)]
//! #[timeout(PetTimeout)]
//! async fn find(id: u64) -> Result<u64, Error> {
//!     Ok(id)
//! }
//!
//! # fn table(pairs: Vec<(&str, Value)>) -> Value {
//! #     Value::Table(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
//! # }
//! let root = table(vec![("resilient", table(vec![
//!     ("retry", table(vec![("pet", table(vec![
//!         ("delay", Value::Str("100ms".into())),
//!         ("attempts", Value::Int(2)),
//!     ]))])),
//!     ("timeout", table(vec![("pet", table(vec![("duration", Value::Str("1s".into()))]))])),
//! ]))]);
//! let registry = Registry::builder().spec::<PetRetry>().spec::<PetTimeout>().build(&root)?;
//! let explained = registry.explain();
//! let find = explained.function("find").expect("recorded by its attributes");
//! assert_eq!(find.max_calls, Some(3));
//! assert_eq!(find.worst_case.to_string(), "3.2s"); // 3 × 1s, and 2 waits of 100ms
//! # Ok::<(), Vec<resilient_core::settings::Problem>>(())
//! ```
//!
//! The figures come from each mechanism's own settings and its own
//! functions (a retry's waits from the same function that schedules them,
//! its jitter as the range that function draws from), combined along the
//! chain as the attributes nest: a timeout bounds what is inside it, a
//! retry runs what is inside it up to `attempts + 1` times with its waits
//! between, a hedge starts attempts side by side. A fn's own time (its body,
//! its fallback's) is unknown, and counted as such.

use std::any::Any;
use std::fmt;
use std::time::Duration;

use crate::chaos::ChaosSettings;
use crate::circuit_breaker::{CircuitBreakerSettings, WindowSettings};
use crate::concurrency::{LimiterSettings, Policy};
use crate::hedging::HedgingSettings;
use crate::rate_limiter::RateLimiterSettings;
use crate::registry::uses::{Attr, Checked, FnChain, Link, Shape};
use crate::registry::{CrossCheck, Finding, Part, Registry, SpecEntry};
use crate::retry::RetrySettings;
use crate::settings::Problem;
use crate::spec::Cause;
use crate::timeout::TimeoutSettings;

/// Every spec of a registry and every annotated fn of the binary, explained.
///
/// Its `Display` is the text a person reads; with the `serde` feature it
/// serializes as JSON.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Explanation {
    /// Each spec of the registry, by path.
    pub specs: Vec<SpecExplained>,
    /// Each annotated fn whose specs are all in the registry, by path.
    pub fns: Vec<FnExplained>,
}

impl Explanation {
    /// The explanation of the fn named `name` (its name alone, or its path
    /// `module::name`), if one was recorded.
    pub fn function(&self, name: &str) -> Option<&FnExplained> {
        self.fns
            .iter()
            .find(|f| f.function == name || f.function.rsplit("::").next() == Some(name))
    }

    /// The explanation of the spec named `name` (its type's name), if the
    /// registry has it.
    pub fn spec(&self, name: &str) -> Option<&SpecExplained> {
        self.specs.iter().find(|s| s.spec == name)
    }
}

/// One spec, read as what it does to a call.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct SpecExplained {
    /// The spec type's name.
    pub spec: &'static str,
    /// Its config path.
    pub path: &'static str,
    /// Its kind (`retry`).
    pub kind: &'static str,
    /// What it does, in sentences.
    pub says: Vec<String>,
    /// A retry's waits, before each retry in turn: the shortest and the
    /// longest its jitter can draw (equal without jitter).
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Vec::is_empty"))]
    pub waits: Vec<Wait>,
}

/// The wait before one retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Wait {
    /// The shortest wait.
    #[cfg_attr(
        feature = "serde",
        serde(serialize_with = "crate::settings::ser::duration")
    )]
    pub min: Duration,
    /// The longest wait.
    #[cfg_attr(
        feature = "serde",
        serde(serialize_with = "crate::settings::ser::duration")
    )]
    pub max: Duration,
}

impl fmt::Display for Wait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.min == self.max {
            write!(f, "{}", human(self.max))
        } else {
            write!(f, "{}..{}", human(self.min), human(self.max))
        }
    }
}

/// One annotated fn, read through its chain.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct FnExplained {
    /// The fn's path (`petstore::upstream::find`).
    pub function: String,
    /// `async`, `blocking` or `stream`.
    pub shape: &'static str,
    /// Its attributes, outermost first, as written.
    pub chain: Vec<String>,
    /// The most calls one call of the fn sends to its dependency (runs of
    /// its body): each retry's `attempts + 1` times each hedge's
    /// `max_hedged_attempts + 1`, a budget permitting. `None` for a stream,
    /// whose items each pass.
    pub max_calls: Option<u64>,
    /// The longest a caller waits for an answer: success, a resilience
    /// error, or the fallback's call.
    pub worst_case: WorstCase,
    /// What the caller can get, in sentences, outermost layer first.
    pub outcomes: Vec<String>,
}

/// The longest a caller can wait, in terms of what the chain bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case", tag = "type"))]
pub enum WorstCase {
    /// A bound in time, whatever the body does.
    Bounded {
        /// The bound.
        #[cfg_attr(
            feature = "serde",
            serde(serialize_with = "crate::settings::ser::duration")
        )]
        at_most: Duration,
    },
    /// The chain's own waits plus `bodies` times the body's own time: no
    /// timeout bounds it.
    Body {
        /// What the chain adds.
        #[cfg_attr(
            feature = "serde",
            serde(serialize_with = "crate::settings::ser::duration")
        )]
        waits: Duration,
        /// How many runs of the body, one after the other, at most.
        bodies: u64,
    },
    /// Nothing bounds it: a wait without a limit (a blocking concurrency
    /// limit without `max_wait`).
    Unbounded,
}

impl fmt::Display for WorstCase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            WorstCase::Bounded { at_most } => f.write_str(&human(at_most)),
            WorstCase::Body { waits, bodies } => {
                let runs = if bodies == 1 {
                    "the body's own time".to_owned()
                } else {
                    format!("{bodies} × the body's own time")
                };
                if waits.is_zero() {
                    f.write_str(&runs)
                } else {
                    write!(f, "{} + {runs}", human(waits))
                }
            }
            WorstCase::Unbounded => f.write_str("unbounded"),
        }
    }
}

/// A duration as the configuration writes it (`1.5s`, `100ms`).
pub(crate) fn human(d: Duration) -> String {
    if d.is_zero() {
        return "0s".into();
    }
    let nanos = d.as_nanos();
    let (unit, per) = if d >= Duration::from_secs(1) {
        ("s", 1_000_000_000u128)
    } else if d >= Duration::from_millis(1) {
        ("ms", 1_000_000)
    } else if d >= Duration::from_micros(1) {
        ("µs", 1_000)
    } else {
        ("ns", 1)
    };
    let whole = nanos / per;
    let frac = nanos % per;
    if frac == 0 {
        return format!("{whole}{unit}");
    }
    // Three significant decimals at most, trailing zeros dropped.
    let digits = per.to_string().len() - 1;
    let text = format!("{frac:0digits$}");
    let text = text[..digits.min(3)].trim_end_matches('0');
    if text.is_empty() {
        format!("{whole}{unit}")
    } else {
        format!("{whole}.{text}{unit}")
    }
}

/// The settings of one spec of a registry, as the explanation reads them.
pub(crate) struct Known<'a> {
    pub(crate) entry: &'a SpecEntry,
    pub(crate) settings: &'a dyn Any,
}

/// One spec's settings, by mechanism.
enum Settings<'a> {
    Retry(&'a RetrySettings),
    Breaker(&'a CircuitBreakerSettings),
    Timeout(&'a TimeoutSettings),
    Limit(&'a LimiterSettings),
    Rate(&'a RateLimiterSettings),
    Hedging(&'a HedgingSettings),
    Chaos(&'a ChaosSettings),
}

impl<'a> Settings<'a> {
    fn of(any: &'a dyn Any) -> Option<Self> {
        None.or_else(|| any.downcast_ref().map(Settings::Retry))
            .or_else(|| any.downcast_ref().map(Settings::Breaker))
            .or_else(|| any.downcast_ref().map(Settings::Timeout))
            .or_else(|| any.downcast_ref().map(Settings::Limit))
            .or_else(|| any.downcast_ref().map(Settings::Rate))
            .or_else(|| any.downcast_ref().map(Settings::Hedging))
            .or_else(|| any.downcast_ref().map(Settings::Chaos))
    }

    fn enabled(&self) -> bool {
        match self {
            Settings::Retry(s) => s.enabled,
            Settings::Breaker(s) => s.enabled,
            Settings::Timeout(s) => s.enabled,
            Settings::Limit(s) => s.common.enabled,
            Settings::Rate(s) => s.enabled,
            Settings::Hedging(s) => s.enabled,
            Settings::Chaos(s) => s.enabled,
        }
    }
}

/// A retry's waits, before each retry: from the function that schedules
/// them, at both ends of its jitter.
fn waits(retry: &RetrySettings, cause: Cause) -> Vec<Wait> {
    (1..=retry.attempts.min(MAX_SHOWN_WAITS))
        .map(|k| Wait {
            min: retry.cause_delay_jittered(cause, k, |_| 0),
            max: retry.cause_delay_jittered(cause, k, |bound| bound),
        })
        .collect()
}

/// `waits` as a list, and "…" with the number of all past those shown.
fn listed(waits: &[Wait], attempts: u32) -> String {
    let mut list: Vec<String> = waits.iter().map(ToString::to_string).collect();
    if attempts > MAX_SHOWN_WAITS {
        list.push(format!("… ({attempts} waits in all)"));
    }
    list.join(", ")
}

/// A retry spec's waits shown one by one: past these, a sum says the rest.
const MAX_SHOWN_WAITS: u32 = 64;

/// The waits counted one by one in a retry's worst case; past these, each
/// is counted at the longest it can be (`attempts` may be `u32::MAX`).
const COUNTED_WAITS: u32 = 10_000;

/// The longest wait before retry number `k`, whatever the cause of the
/// failure before it (jitter only shortens a wait).
fn longest_wait(retry: &RetrySettings, k: u32) -> Duration {
    Cause::ALL
        .iter()
        .map(|cause| retry.cause_base_delay(*cause, k))
        .max()
        .unwrap_or(Duration::ZERO)
}

/// The sum of a retry's longest waits, all `attempts` of them, saturating;
/// after failures of any cause.
fn total_wait(retry: &RetrySettings) -> Duration {
    sum_waits(retry, |k| longest_wait(retry, k))
}

/// The sum of the longest waits after failures of `cause` alone.
fn cause_total_wait(retry: &RetrySettings, cause: Cause) -> Duration {
    sum_waits(retry, |k| retry.cause_base_delay(cause, k))
}

/// The sum of `wait(k)` for each of `retry`'s `attempts`, saturating. The
/// first [`COUNTED_WAITS`] are summed one by one, and each later one
/// counted at the longer of the last summed and the last of all: a
/// cause's waits only grow or only shrink with the retry's number, so
/// neither bound is passed.
fn sum_waits(retry: &RetrySettings, wait: impl Fn(u32) -> Duration) -> Duration {
    let counted = retry.attempts.min(COUNTED_WAITS);
    let mut sum = Duration::ZERO;
    for k in 1..=counted {
        sum = sum.saturating_add(wait(k));
        if sum == Duration::MAX {
            return sum;
        }
    }
    let rest = retry.attempts - counted;
    if rest > 0 {
        let each = wait(counted).max(wait(retry.attempts));
        sum = sum.saturating_add(each.saturating_mul(rest));
    }
    sum
}

fn says(known: &Known<'_>) -> (Vec<String>, Vec<Wait>) {
    let Some(settings) = Settings::of(known.settings) else {
        return (Vec::new(), Vec::new());
    };
    if !settings.enabled() {
        return (
            vec!["disabled (`enabled = false`): every call passes through untouched".into()],
            Vec::new(),
        );
    }
    let mut says = Vec::new();
    let mut shown = Vec::new();
    match settings {
        Settings::Retry(r) => {
            let calls = u64::from(r.attempts) + 1;
            says.push(format!(
                "at most {calls} call{} per call: the first, then up to {} retr{} (`attempts = {}`)",
                if calls == 1 { "" } else { "s" },
                r.attempts,
                if r.attempts == 1 { "y" } else { "ies" },
                r.attempts
            ));
            // After a failure of the default cause: the waits a snapshot
            // shows.
            shown = waits(r, Cause::Transient);
            if !shown.is_empty() {
                // The causes that wait from `delay` in one sentence; each
                // with a delay of its own in one of its own.
                let own = |c: Cause| r.causes.get(c).and_then(|t| t.delay).is_some();
                let by_delay: Vec<Cause> = Cause::ALL.into_iter().filter(|c| !own(*c)).collect();
                if let Some(&first) = by_delay.first() {
                    let after = if by_delay.len() == Cause::ALL.len() {
                        String::new()
                    } else {
                        let labels: Vec<&str> = by_delay.iter().map(|c| c.label()).collect();
                        format!(" after a {} failure", labels.join(" or "))
                    };
                    says.push(format!(
                        "waits before each retry{after}: {}; {} in all at most",
                        listed(&waits(r, first), r.attempts),
                        human(cause_total_wait(r, first))
                    ));
                }
                for cause in Cause::ALL.into_iter().filter(|c| own(*c)) {
                    says.push(format!(
                        "waits before each retry after a {0} failure (`cause.{0}.delay`): {1}; {2} in all at most",
                        cause.label(),
                        listed(&waits(r, cause), r.attempts),
                        human(cause_total_wait(r, cause))
                    ));
                }
            }
            if let Some(cap) = r.max_hinted_delay {
                says.push(format!(
                    "a failure that asks for a wait (`Retry-After`) waits what it asks, up to {}",
                    human(cap)
                ));
            }
            if let Some(t) = r.timeout {
                says.push(format!(
                    "no retry starts whose wait would end past {} from the first call (`timeout`)",
                    human(t)
                ));
            }
            if let Some(b) = &r.budget {
                says.push(format!(
                    "a retry spends a token of a budget of {} (each success gives back {}): an empty budget ends the call",
                    b.tokens_max, b.ratio
                ));
            }
            for cause in Cause::ALL {
                if let Some(cost) = r.causes.get(cause).and_then(|t| t.cost) {
                    says.push(format!(
                        "a retry after a {0} failure spends {cost} token{1} of the budget (`cause.{0}.cost`)",
                        cause.label(),
                        if cost == 1 { "" } else { "s" }
                    ));
                }
            }
            if r.share_outer_budget {
                says.push(
                    "a retry made inside another retry's call spends the outer spec's budget, at once (`share_outer_budget`)".into(),
                );
            }
            if let Some(t) = &r.throttle {
                says.push(format!(
                    "adaptive throttling: over the last {}, {} refused with probability max(0, (requests - {k}·accepts) / (requests + 1)), so that the attempts stay near {k} times those the dependency accepts",
                    human(t.window),
                    if t.first_calls {
                        "a retry and a first call (`first_calls = true`) are"
                    } else {
                        "a retry is"
                    },
                    k = t.k
                ));
            }
            if let Some(name) = &r.attempt_header {
                says.push(format!(
                    "each retry of an HTTP request sends `{name}: <attempts before it>`, none on the first call (`attempt_header`; sent by the retry middleware, `AttemptHeaderLayer` and `retry::with_attempt_header`)"
                ));
            }
        }
        Settings::Breaker(b) => {
            let window = match &b.window {
                WindowSettings::TimeBased {
                    window_duration, ..
                } => format!("the calls of the last {}", human(*window_duration)),
                WindowSettings::StripedApprox { window_size, .. }
                | WindowSettings::FixedWindow { window_size }
                | WindowSettings::RingBuffer { window_size } => {
                    format!("the last {window_size} calls")
                }
            };
            says.push(format!(
                "opens when {}% or more of {window} fail, once {} calls are in; then rejects every call at once for {}, and lets {} probe{} through",
                b.failure_rate_threshold,
                b.minimum_required_calls,
                human(b.wait_duration_in_open_state),
                b.permitted_calls_in_half_open_state,
                if b.permitted_calls_in_half_open_state == 1 { "" } else { "s" }
            ));
        }
        Settings::Timeout(t) => {
            says.push(format!(
                "a call that has not answered after {} ends with a timeout",
                human(t.duration)
            ));
            if let Some(idle) = t.idle {
                says.push(format!(
                    "a stream that gives no item for {} ends with a timeout",
                    human(idle)
                ));
            }
        }
        Settings::Limit(l) => {
            let limit = match &l.adaptive {
                Some(_) => format!("an adaptive limit (starting at {})", l.common.limit),
                None => l.common.limit.to_string(),
            };
            says.push(match l.common.policy {
                Policy::Reject => format!("{limit} calls at once; one more is rejected at once"),
                Policy::Block { max_wait: Some(w) } => format!(
                    "{limit} calls at once; one more waits for a place up to {}, then is rejected",
                    human(w)
                ),
                Policy::Block { max_wait: None } => {
                    format!("{limit} calls at once; one more waits for a place, without a bound")
                }
            });
            if let Some(shed) = &l.retries {
                let share = match shed.share {
                    Some(share) if l.adaptive.is_none() => format!(
                        ", and retries hold at most {} of its {} places (`retry_share = {share}`)",
                        shed.places(l.common.limit),
                        l.common.limit
                    ),
                    Some(share) => format!(
                        ", and retries hold at most {share} of its places, rounded down (`retry_share`)"
                    ),
                    None => String::new(),
                };
                says.push(format!(
                    "a request that announces a retry in `{}` is refused at once when it is full, and never waits{share}; read by the layers applied with `reading_retry_header`, not by `#[concurrency_limit]`",
                    shed.header
                ));
            }
        }
        Settings::Rate(r) => {
            says.push(format!(
                "{} calls per {}; one more {}",
                r.limit_for_period,
                human(r.limit_refresh_period),
                match r.max_wait {
                    Some(w) => format!("waits for a permit up to {}, then is rejected", human(w)),
                    None => "is rejected at once".into(),
                }
            ));
        }
        Settings::Hedging(h) => {
            says.push(format!(
                "up to {} more attempt{} side by side, one every {} while none has answered",
                h.max_hedged_attempts,
                if h.max_hedged_attempts == 1 { "" } else { "s" },
                human(h.delay)
            ));
        }
        Settings::Chaos(c) => {
            says.push(format!(
                "injects: an error in {}% of calls, {} of latency in {}%, an outcome in {}%",
                c.error_rate * 100.0,
                human(c.latency),
                c.latency_rate * 100.0,
                c.outcome_rate * 100.0
            ));
        }
    }
    (says, shown)
}

/// What one layer makes of the worst case inside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Worst {
    /// `waits` plus `bodies` runs of the body, one after the other.
    Body {
        waits: Duration,
        bodies: u64,
    },
    /// At most this long.
    Bounded(Duration),
    Unbounded,
}

impl Worst {
    fn plus(self, d: Duration) -> Self {
        match self {
            Worst::Body { waits, bodies } => Worst::Body {
                waits: waits.saturating_add(d),
                bodies,
            },
            Worst::Bounded(b) => Worst::Bounded(b.saturating_add(d)),
            Worst::Unbounded => Worst::Unbounded,
        }
    }

    fn times(self, n: u64) -> Self {
        let n32 = u32::try_from(n).unwrap_or(u32::MAX);
        match self {
            Worst::Body { waits, bodies } => Worst::Body {
                waits: waits.saturating_mul(n32),
                bodies: bodies.saturating_mul(n),
            },
            Worst::Bounded(b) => Worst::Bounded(b.saturating_mul(n32)),
            Worst::Unbounded => Worst::Unbounded,
        }
    }

    fn bounded(self) -> Option<Duration> {
        match self {
            Worst::Bounded(b) => Some(b),
            Worst::Body { waits, bodies: 0 } => Some(waits),
            _ => None,
        }
    }

    fn public(self) -> WorstCase {
        match self.bounded() {
            Some(at_most) => WorstCase::Bounded { at_most },
            None => match self {
                Worst::Body { waits, bodies } => WorstCase::Body { waits, bodies },
                _ => WorstCase::Unbounded,
            },
        }
    }
}

/// A link of a chain with its spec's settings, where the registry has them.
struct Step<'a> {
    link: &'a Link,
    name: &'static str,
    settings: Option<Settings<'a>>,
}

fn attr_name(attr: Attr) -> &'static str {
    match attr {
        Attr::Retry => "retryable",
        Attr::CircuitBreaker => "circuit_breakable",
        Attr::Timeout => "timeout",
        Attr::ConcurrencyLimit => "concurrency_limit",
        Attr::RateLimiter => "rate_limited",
        Attr::Fallback => "fallback",
        Attr::Chaos => "chaos",
        Attr::Hedging => "hedged",
    }
}

fn written(step: &Step<'_>) -> String {
    let link = step.link;
    let mut args = Vec::new();
    if link.attr == Attr::Fallback {
        args.push(format!("method = {:?}", link.fallback.0));
        if !link.fallback.1.is_empty() {
            args.push(link.fallback.1.to_owned());
        }
    } else {
        args.push(step.name.to_owned());
    }
    if !link.key.is_empty() {
        args.push(format!("key = {}", link.key));
    }
    if !link.outcome.is_empty() {
        args.push(format!("outcome = {}", link.outcome));
    }
    format!("#[{}({})]", attr_name(link.attr), args.join(", "))
}

/// The steps of `chain`, or `None` if a spec of it is not in `known` (a
/// registry of named specs, a test's) or is named by a generic parameter.
fn steps<'a>(chain: &'a FnChain, known: &'a [Known<'a>]) -> Option<Vec<Step<'a>>> {
    chain
        .links
        .iter()
        .map(|link| {
            let Some(id) = link.spec else {
                return (link.attr == Attr::Fallback).then_some(Step {
                    link,
                    name: "",
                    settings: None,
                });
            };
            let id = id();
            let k = known.iter().find(|k| (k.entry.type_id)() == id)?;
            Some(Step {
                link,
                name: k.entry.name,
                settings: Settings::of(k.settings).filter(Settings::enabled),
            })
        })
        .collect()
}

fn explain_fn(chain: &FnChain, steps: &[Step<'_>]) -> FnExplained {
    let mut worst = Worst::Body {
        waits: Duration::ZERO,
        bodies: 1,
    };
    let mut calls: u64 = 1;
    let mut outcomes = Vec::new();
    for step in steps.iter().rev() {
        let name = step.name;
        match &step.settings {
            None if step.link.attr == Attr::Fallback => {
                let on = match step.link.fallback.1 {
                    "" => "any failure".to_owned(),
                    on => format!("a failure it answers (`{on}`)"),
                };
                outcomes.push(format!(
                    "on {on}, the answer of `{}`, whose own time adds to the worst case",
                    step.link.fallback.0
                ));
            }
            None => {}
            Some(Settings::Timeout(t)) => {
                worst = match worst.bounded() {
                    Some(b) if b < t.duration => Worst::Bounded(b),
                    _ => Worst::Bounded(t.duration),
                };
                outcomes.push(format!(
                    "`Error::Timeout` from `{name}` after {}",
                    human(t.duration)
                ));
            }
            Some(Settings::Retry(r)) => {
                let n = u64::from(r.attempts) + 1;
                let mut retried = worst.times(n).plus(total_wait(r));
                if let Some(cap) = r.max_hinted_delay {
                    // A hinted wait may be longer than the computed one.
                    let computed = total_wait(r);
                    let hinted = cap.saturating_mul(r.attempts);
                    if hinted > computed {
                        retried = retried.plus(hinted.saturating_sub(computed));
                    }
                }
                if let Some(t) = r.timeout {
                    // No retry starts past `t`: the last one runs a whole attempt.
                    let capped = worst.plus(t);
                    if prefer(capped, retried) {
                        retried = capped;
                    }
                }
                worst = retried;
                calls = calls.saturating_mul(n);
                if r.throttle.is_some_and(|t| t.first_calls) {
                    outcomes.push(format!(
                        "`Error::Throttled` at once from `{name}` when adaptive throttling refuses the first call (`first_calls = true`: the dependency accepted fewer than one in `k` requests of the window)"
                    ));
                }
                outcomes.push(format!(
                    "`Error::RetryExhausted` from `{name}` (or its last failure, with `exhausted = last_failure`) after {n} failed call{}",
                    if n == 1 { "" } else { "s" }
                ));
            }
            Some(Settings::Hedging(h)) => {
                worst = worst.plus(h.delay.saturating_mul(h.max_hedged_attempts));
                calls = calls.saturating_mul(u64::from(h.max_hedged_attempts) + 1);
                outcomes.push(format!(
                    "the first answer of up to {} attempts side by side (`{name}`)",
                    u64::from(h.max_hedged_attempts) + 1
                ));
            }
            Some(Settings::Breaker(_)) => outcomes.push(format!(
                "`Error::CallNotPermitted` at once from `{name}` while it is open"
            )),
            Some(Settings::Limit(l)) => {
                match l.common.policy {
                    Policy::Reject => {}
                    Policy::Block { max_wait: Some(w) } => worst = worst.plus(w),
                    Policy::Block { max_wait: None } => worst = Worst::Unbounded,
                }
                outcomes.push(format!(
                    "`Error::ConcurrencyLimitReached` from `{name}` when it is full"
                ));
            }
            Some(Settings::Rate(r)) => {
                if let Some(w) = r.max_wait {
                    worst = worst.plus(w);
                }
                outcomes.push(format!(
                    "`Error::RateLimitExceeded` from `{name}` when its permits are spent"
                ));
            }
            Some(Settings::Chaos(c)) => {
                if c.latency_rate > 0.0 {
                    worst = worst.plus(c.latency);
                }
                if c.error_rate > 0.0 {
                    outcomes.push(format!("`Error::Injected` from `{name}`, as it injects"));
                }
            }
        }
    }
    outcomes.reverse();
    outcomes.push("the body's own answer".into());
    let shape = match chain.shape {
        Shape::Async => "async",
        Shape::Blocking => "blocking",
        Shape::Stream => "stream",
    };
    FnExplained {
        function: format!("{}::{}", chain.module, chain.name),
        shape,
        chain: steps.iter().map(written).collect(),
        max_calls: (chain.shape != Shape::Stream).then_some(calls),
        worst_case: worst.public(),
        outcomes,
    }
}

/// Whether `a` is the tighter bound of the two.
fn prefer(a: Worst, b: Worst) -> bool {
    match (a, b) {
        (Worst::Bounded(x), Worst::Bounded(y)) => x < y,
        (Worst::Unbounded, _) => false,
        (_, Worst::Unbounded) => true,
        (Worst::Body { bodies: x, .. }, Worst::Body { bodies: y, .. }) => x < y,
        (Worst::Bounded(_), _) => true,
        (_, Worst::Bounded(_)) => false,
    }
}

impl Registry {
    /// Every spec of the registry, and every annotated fn whose specs are
    /// all in it, explained: see the [module docs](crate::explain).
    pub fn explain(&self) -> Explanation {
        of_parts(&self.spec_settings())
    }
}

/// The explanation of specs given with their settings as snapshot parts.
fn of_parts(parts: &[(SpecEntry, std::sync::Arc<dyn Part>)]) -> Explanation {
    let known: Vec<Known<'_>> = parts
        .iter()
        .map(|(entry, part)| Known {
            entry,
            // The part's own `as_any`, not the `Arc`'s (an `Arc` is a part too).
            settings: (**part).as_any(),
        })
        .collect();
    explain(&known)
}

/// The explanation of `known`'s specs, and of every annotated fn whose
/// specs are all among them.
fn explain(known: &[Known<'_>]) -> Explanation {
    let mut specs: Vec<SpecExplained> = known
        .iter()
        .map(|k| {
            let (says, waits) = says(k);
            SpecExplained {
                spec: k.entry.name,
                path: k.entry.path,
                kind: k.entry.kind.label(),
                says,
                waits,
            }
        })
        .collect();
    specs.sort_by(|a, b| (a.path, a.spec).cmp(&(b.path, b.spec)));
    let mut fns: Vec<FnExplained> = FnChain::all()
        .filter_map(|chain| Some(explain_fn(chain, &steps(chain, known)?)))
        .collect();
    fns.sort_by(|a, b| a.function.cmp(&b.function));
    Explanation { specs, fns }
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for s in &self.specs {
            writeln!(f, "{} ({}, `{}`)", s.spec, s.kind, s.path)?;
            for line in &s.says {
                writeln!(f, "  {line}")?;
            }
        }
        for func in &self.fns {
            writeln!(f)?;
            writeln!(f, "fn {} ({})", func.function, func.shape)?;
            for attr in &func.chain {
                writeln!(f, "  {attr}")?;
            }
            match func.max_calls {
                Some(n) => writeln!(
                    f,
                    "  calls to the dependency per call: at most {n}{}",
                    if func.chain.iter().any(|c| c.starts_with("#[retryable")) {
                        " (a retry budget permitting)"
                    } else {
                        ""
                    }
                )?,
                None => writeln!(f, "  each item of the stream passes the chain")?,
            }
            writeln!(f, "  longest before an answer: {}", func.worst_case)?;
            writeln!(f, "  the caller gets:")?;
            for o in &func.outcomes {
                writeln!(f, "    - {o}")?;
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------- checks

/// The checks of specs against each other along every annotated fn's
/// chain (see the guide's table, [explain](crate::guide::explain)): a problem where the combination cannot do
/// what it says, a WARN where it may be meant.
fn cross_check(known: &[Known<'_>]) -> Vec<Finding> {
    let mut out: Vec<Finding> = Vec::new();
    for chain in FnChain::all() {
        let Some(steps) = steps(chain, known) else {
            continue;
        };
        let fn_name = format!("{}::{}", chain.module, chain.name);
        for (i, outer) in steps.iter().enumerate() {
            for inner in &steps[i + 1..] {
                check_pair(&fn_name, outer, inner, known, &mut out);
            }
            if outer.link.attr == Attr::Fallback {
                check_rejection_fallback(&fn_name, outer, &steps[i + 1..], known, &mut out);
            }
        }
    }
    out.sort_by_key(Finding::key);
    out.dedup_by(|a, b| a.key() == b.key());
    out
}

/// A fallback `on = rejection` above `below`: when the only attributes
/// below it that can reject are retries (their adaptive throttling refuses
/// first calls only with `first_calls = true`, a setting the macro cannot
/// see), and none sets it, the fallback is never taken. A WARN: the setting
/// may be meant to come later.
fn check_rejection_fallback(
    fn_name: &str,
    fallback: &Step<'_>,
    below: &[Step<'_>],
    known: &[Known<'_>],
    out: &mut Vec<Finding>,
) {
    let on = fallback.link.fallback.1;
    if on.split_once('=').map(|(_, v)| v.trim()) != Some("rejection") {
        return;
    }
    let rejects = |a: Attr| {
        matches!(
            a,
            Attr::CircuitBreaker | Attr::RateLimiter | Attr::ConcurrencyLimit
        )
    };
    if below.iter().any(|s| rejects(s.link.attr)) {
        return;
    }
    let retries: Vec<&Step<'_>> = below
        .iter()
        .filter(|s| s.link.attr == Attr::Retry)
        .collect();
    let throttles = |s: &Step<'_>| matches!(&s.settings, Some(Settings::Retry(r)) if r.throttle.is_some_and(|t| t.first_calls));
    if retries.is_empty() || retries.iter().any(|s| throttles(s)) {
        return;
    }
    let paths: Vec<String> = retries
        .iter()
        .filter_map(|s| entry_of(known, s))
        .map(|e| format!("`{}`", e.path))
        .collect();
    out.push(Finding::Warn(format!(
        "`#[fallback(method = \"{}\", on = rejection)]` in `{fn_name}` is never taken: below it only a retry can reject, and only a first call refused by adaptive throttling, which {} {} not enable; set `throttle.first_calls = true` there, or answer other failures (`on = resilience`, or no `on`)",
        fallback.link.fallback.0,
        paths.join(" and "),
        if paths.len() == 1 { "does" } else { "do" },
    )));
}

fn entry_of<'a>(known: &'a [Known<'a>], step: &Step<'_>) -> Option<&'a SpecEntry> {
    let id = step.link.spec?();
    known
        .iter()
        .find(|k| (k.entry.type_id)() == id)
        .map(|k| k.entry)
}

fn check_pair(
    fn_name: &str,
    outer: &Step<'_>,
    inner: &Step<'_>,
    known: &[Known<'_>],
    out: &mut Vec<Finding>,
) {
    let (Some(o), Some(n)) = (&outer.settings, &inner.settings) else {
        return;
    };
    let (Some(oe), Some(ne)) = (entry_of(known, outer), entry_of(known, inner)) else {
        return;
    };
    match (o, n) {
        // A retry's overall timeout against its attempts.
        (Settings::Retry(r), Settings::Timeout(t)) if r.attempts > 0 => {
            if let Some(overall) = r.timeout {
                // The shortest first wait of any cause: a cause table may
                // wait less than `delay`.
                let first = Cause::ALL
                    .iter()
                    .map(|c| r.cause_delay_jittered(*c, 1, |_| 0))
                    .min()
                    .unwrap_or(Duration::ZERO);
                // An attempt that timed out waits as its cause says.
                let after_timeout = r.cause_delay_jittered(Cause::Timeout, 1, |_| 0);
                if overall <= first {
                    out.push(Finding::Problem(Problem {
                        spec: oe.name,
                        path: oe.path,
                        key: "timeout".into(),
                        rule: format!(
                            "is {}, no longer than the wait before the first retry ({}): no retry can ever start; make `timeout` longer than `delay`, or remove it",
                            human(overall), human(first)
                        ),
                        found: None,
                    }));
                } else if overall <= t.duration.saturating_add(after_timeout) {
                    let first = after_timeout;
                    out.push(Finding::Warn(format!(
                        "`{}.timeout` ({}) leaves no time to retry an attempt that `{}` ended after {} in `{fn_name}` ({} wait first): only failures faster than {} are retried; lengthen `{}.timeout` past {}, or shorten `{}.duration`",
                        oe.path, human(overall), ne.name, human(t.duration), human(first),
                        human(overall.saturating_sub(first)), oe.path,
                        human(t.duration.saturating_add(first)), ne.path
                    )));
                }
            }
        }
        // A breaker's slow calls that a timeout outside ends first: a call
        // ended from outside counts neither way, so none is ever slow.
        (Settings::Timeout(t), Settings::Breaker(b)) => {
            if let Some(slow) = b.slow_call.filter(|s| s.duration_threshold >= t.duration) {
                out.push(Finding::Warn(format!(
                    "`{}.slow_call.duration_threshold` ({}) is at or past `{}.duration` ({}) above it in `{fn_name}`: a call that slow is ended by the timeout first, and a call ended from outside counts neither way, so no call is ever counted slow and `slow_call.rate_threshold` never opens the breaker; make the threshold shorter than the timeout",
                    ne.path, human(slow.duration_threshold), oe.path, human(t.duration)
                )));
            }
        }
        // A hedge whose attempts time out before the next one starts.
        (Settings::Hedging(h), Settings::Timeout(t))
            if h.max_hedged_attempts > 0 && t.duration <= h.delay =>
        {
            out.push(Finding::Warn(format!(
                "`{}.delay` ({}) is at or past `{}.duration` ({}) below it in `{fn_name}`: an attempt has timed out before the next one starts, so attempts never run side by side; make the hedge's `delay` shorter than the timeout (near the dependency's p95)",
                oe.path, human(h.delay), ne.path, human(t.duration)
            )));
        }
        // A rate limiter above a breaker with a time-based window.
        (Settings::Rate(rate), Settings::Breaker(b)) => {
            if let WindowSettings::TimeBased {
                window_duration, ..
            } = b.window
            {
                let period = rate.limit_refresh_period.as_nanos().max(1);
                let periods = window_duration
                    .as_nanos()
                    .div_ceil(period)
                    .saturating_add(1);
                let most = periods.saturating_mul(u128::from(rate.limit_for_period));
                if most < u128::from(b.minimum_required_calls) {
                    out.push(Finding::Problem(Problem {
                        spec: ne.name,
                        path: ne.path,
                        key: "minimum_required_calls".into(),
                        rule: format!(
                            "is {}, and `{}` above it in `{fn_name}` lets at most {most} calls through in the breaker's window of {}: the breaker can never open; lower `minimum_required_calls`, or lengthen the window",
                            b.minimum_required_calls, oe.name, human(window_duration)
                        ),
                        found: None,
                    }));
                }
            }
        }
        // A retry around a breaker, waiting longer than the breaker stays open.
        (Settings::Retry(r), Settings::Breaker(b)) if r.attempts > 0 => {
            let longest = r.delay(r.attempts, |bound| bound);
            let first = r.delay(1, |_| 0);
            if r.retry_call_not_permitted && first > b.wait_duration_in_open_state {
                out.push(Finding::Warn(format!(
                    "`{}` waits at least {} before a retry, past `{}.wait_duration_in_open_state` ({}) in `{fn_name}`: every retry of a call the open breaker rejected arrives as a half-open probe; shorten the retry's `delay`, or lengthen the open wait (longest wait: {})",
                    oe.path, human(first), ne.path, human(b.wait_duration_in_open_state), human(longest)
                )));
            }
        }
        _ => {}
    }
}

inventory::submit! {
    CrossCheck { run: run_cross_check }
}

fn run_cross_check(specs: &[Checked<'_>]) -> Vec<Finding> {
    let known: Vec<Known<'_>> = specs
        .iter()
        .map(|&(entry, settings, _)| Known {
            entry,
            settings: settings as &dyn Any,
        })
        .collect();
    let mut out = cross_check(&known);
    out.extend(keyed_windows(specs));
    out
}

/// The most the windows of a keyed breaker's instances may hold at
/// `keys.max` keys before a WARN says so.
const KEYED_WINDOWS_MAX: u64 = 1 << 30;

/// Each breaker used with `key = ..` whose windows, one per key, may hold
/// more than [`KEYED_WINDOWS_MAX`] at `keys.max` keys: a WARN, since a
/// machine may be meant to hold it, and nothing bounds it otherwise.
fn keyed_windows(specs: &[Checked<'_>]) -> Vec<Finding> {
    let mut out = Vec::new();
    for &(entry, settings, keys) in specs {
        let (Some(b), Some(keys)) = (settings.downcast_ref::<CircuitBreakerSettings>(), keys)
        else {
            continue;
        };
        if !b.enabled {
            continue;
        }
        let id = (entry.type_id)();
        let fns: Vec<String> = FnChain::all()
            .filter(|c| {
                c.links
                    .iter()
                    .any(|l| !l.key.is_empty() && l.spec.is_some_and(|s| s() == id))
            })
            .map(|c| format!("`{}::{}`", c.module, c.name))
            .collect();
        let each = b.window.bytes();
        let total = each.saturating_mul(u64::from(keys.max));
        if fns.is_empty() || total <= KEYED_WINDOWS_MAX {
            continue;
        }
        out.push(Finding::Warn(format!(
            "`{}` keeps a window of about {} per key, so its `keys.max` = {} keys may hold about {} at once (used with `key = ..` by {}): lower `keys.max`, or make the window smaller (`count_based.window_size`, or `time_based.sample_count` and `counter_stripes`), or use `type = \"fixed_window\"`",
            entry.path,
            human_bytes(each),
            keys.max,
            human_bytes(total),
            fns.join(", ")
        )));
    }
    out
}

/// `n` bytes in the largest unit that keeps a whole number before the point.
fn human_bytes(n: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (unit, size) in UNITS {
        if n >= size {
            let tenths = n.saturating_mul(10) / size;
            return match tenths % 10 {
                0 => format!("{} {unit}", tenths / 10),
                t => format!("{}.{t} {unit}", tenths / 10),
            };
        }
    }
    format!("{n} B")
}
