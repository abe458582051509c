//! Hedging: when a call is slow, start another attempt of it beside the
//! first and take whichever is accepted first; the others are cancelled.
//!
//! ```
//! use resilient_core::HedgingSpec;
//!
//! #[derive(HedgingSpec)]
//! #[spec("resilient.hedging.pet")]
//! pub struct PetHedging;
//! ```
//!
//! ```toml
//! [resilient.hedging.pet]
//! delay = "100ms"              # an attempt slower than this gets a second one beside it
//! max_hedged_attempts = 1      # attempts after the first: at most 2 at once
//! on_failure = "hedge_at_once" # a failed attempt starts the next one without waiting
//! ```
//!
//! # Semantics
//!
//! - The first attempt starts at once. While no attempt has an accepted
//!   outcome, another one starts `delay` after the latest one started, up to
//!   `max_hedged_attempts` attempts after the first (all of them running
//!   side by side). `delay = "0s"` starts them all at once.
//! - An outcome is *accepted* unless the spec's classification calls it a
//!   failure ([`Verdict::Failure`] or [`Verdict::RetryAfter`]): a success,
//!   and an outcome the classification ignores ([`Verdict::Ignore`]: an error
//!   another attempt would not change, such as a 404), end the call at once.
//!   The classification is the one retry and breaker specs take:
//!   `#[spec("..", classify = ..)]`. A failure no attempt may follow
//!   ([`Verdict::Fatal`], such as gRPC's fatal status codes with
//!   `classify = grpc`) ends the call too, as a failure.
//! - The first accepted outcome is the call's; every other attempt is dropped
//!   at once (cancelled at its current await), before the call returns.
//! - A failed attempt starts the next one at once with `on_failure =
//!   "hedge_at_once"` (the default, as Polly and gRPC do); with `on_failure
//!   = "wait"` the next one keeps its schedule (`delay` after the latest
//!   start).
//! - When every attempt failed and no other may start, the call returns the
//!   **last failure**: the outcome of the attempt that finished last,
//!   unchanged (a hedge is not a retry; there is no "exhausted" error to
//!   wrap it in, so a caller sees the dependency's own error).
//! - A rejection raised inside (an open breaker, a rate or concurrency limit)
//!   is a failure that does not start the next attempt at once: another
//!   attempt at that moment would be rejected too. A spec without settings
//!   ([`Error::NotConfigured`]) ends the call at once.
//!
//! # Where the attempts run
//!
//! All attempts run inside the fn's own future, polled in turn by it: no task
//! is spawned, so an attempt needs neither `Send` nor `'static`, and dropping
//! the call drops every attempt. The first attempt lives in the call's future
//! and allocates nothing; each further attempt is boxed when it starts. A
//! call whose first attempt answers before `delay` reads the clock once (to
//! arm the delay) if it had to wait at all, and not at all if it was ready
//! on its first poll.
//!
//! Each attempt gets fresh clones of the owned arguments, as under
//! `#[retryable]`; references and `&self` are shared by all attempts, which
//! borrow them while they run (so an argument that is `Send` but not `Sync`
//! makes the fn's future not `Send`). The failed outcome kept while other
//! attempts run is held across awaits too.
//!
//! # A fixed delay
//!
//! The delay is a fixed setting, not a latency percentile measured at run
//! time (as tower's `hedge` does): a percentile needs a warm-up before it
//! hedges at all, a shared histogram written by every call, and gives a
//! delay that moves under the user's feet when the dependency degrades
//! (hedging more just when the dependency is overloaded). A fixed delay is
//! predictable, testable, and can be changed by a reload; set it near the
//! dependency's p95 as your metrics show it.
//!
//! # Extra load, and the budget
//!
//! Every hedged attempt is extra load on the dependency. A `hedging_budget`
//! table bounds it: it has the retry budget's keys and rules (`ratio`,
//! `tokens_max`, `tokens_initial`, `min_tokens_per_second`, `enabled`) and
//! is the same token bucket. Each hedged attempt (never the first) takes a
//! token when it starts; each call with an accepted success returns
//! `ratio` of one. When the bucket is empty, no hedge starts: the call goes on with
//! the attempts it has.
//!
//! # Only idempotent calls
//!
//! A hedged fn runs its body more than once for one call, and the losers are
//! cancelled at an await, possibly after the dependency has acted on them.
//! Hedge only calls that are safe to run twice (reads, or writes with an
//! idempotency key that the dependency checks). There is no marker to write
//! for it: the compiler cannot check the property, so a marker would be a
//! ritual; this is said here, in the guide, and on the attribute.
//!
//! # Order with the other attributes
//!
//! Top = outermost. Outside `#[hedged]`, a breaker or a limit sees one call
//! (one permit for the whole hedged call); inside, each attempt takes its
//! own (a concurrency limit inside bounds the attempts too). A `#[timeout]`
//! outside bounds the whole call; inside, each attempt. A `#[retryable]`
//! outside retries a hedged call whose attempts all failed.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use metrics::Counter;
use tokio::time::{Instant, Sleep};

use crate::error::Error;
use crate::outcome::{self, Fail};
use crate::registry::{
    CallInstance, Key, Mechanism, Part, Pinned, Sealed, Shared, Spec, Tag, Versions,
};
use crate::retry::budget::{Budget, BudgetParams, Reloaded};
use crate::retry::BudgetSettings;
use crate::settings::Section;
use crate::spec::{Classify, SpecKind, Verdict};
use crate::telemetry::{Event, Outcome, Telemetry};

impl SpecKind {
    /// `#[derive(HedgingSpec)]`, used by `#[hedged]`.
    pub const HEDGING: SpecKind = SpecKind::new("hedging", "hedging");
}

/// The most attempts after the first that a spec may start: each is a
/// concurrent copy of the call (Polly allows 10, gRPC 4 after the first).
pub const MAX_HEDGED_ATTEMPTS: u32 = 10;

/// A hedging spec: implemented by `#[derive(HedgingSpec)]`.
///
/// The derive accepts `classify = ..` after the path, as a retry or breaker
/// spec does: `all_errors` (the default), `custom`, `http`, or a classifier
/// type shared with other specs. An outcome it calls a failure is not
/// accepted.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a hedging spec",
    label = "`#[hedged]` needs a type declared with `#[derive(HedgingSpec)]`",
    note = "declare one with `#[derive(HedgingSpec)] #[spec(\"resilient.hedging.name\")] pub struct Name;`",
    note = "each spec kind goes with its own attribute: `RetrySpec` with `#[retryable]`, `CircuitBreakerSpec` with `#[circuit_breakable]`, `TimeoutSpec` with `#[timeout]`, `ConcurrencyLimitSpec` with `#[concurrency_limit]`, `RateLimiterSpec` with `#[rate_limited]`, `ChaosSpec` with `#[chaos]`, `HedgingSpec` with `#[hedged]`"
)]
pub trait HedgingSpec: Spec<Mechanism = Hedging> + Sized {
    /// The type whose [`Classify`] implementations decide what a failure is.
    type Classifier;

    /// The spec's shared instance, from the registry in use.
    ///
    /// # Errors
    ///
    /// [`Error::NotConfigured`] when the registry in use has no settings for
    /// this spec.
    fn get() -> Result<HedgingHandle<Self>, Error> {
        crate::registry::handle::<Self>().map(|inner| HedgingHandle {
            inner,
            _spec: PhantomData,
        })
    }
}

/// What a failed attempt does to the schedule (`on_failure`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum OnFailure {
    /// `"hedge_at_once"`: the next attempt starts without waiting.
    HedgeAtOnce,
    /// `"wait"`: the next attempt starts `delay` after the latest start.
    Wait,
}

/// The settings of one hedging spec.
///
/// | key | default | rule |
/// |---|---|---|
/// | `enabled` | `true` | `false` makes the spec a pass-through: one attempt (still validated) |
/// | `delay` | required | duration ≥ 0: how long the latest attempt runs before the next starts; `"0s"` starts them all at once |
/// | `max_hedged_attempts` | `1` | whole number in 0..=10: attempts **after** the first (`1` = at most 2 side by side); a larger number is a startup error, not saturated |
/// | `on_failure` | `"hedge_at_once"` | `"hedge_at_once"`: a failed attempt starts the next one now; `"wait"`: the next keeps its schedule |
/// | `hedging_budget.enabled` | `true` | the budget exists only if the table does |
/// | `hedging_budget.ratio` | `0.1` | number ≥ 0: tokens returned by each call with an accepted success |
/// | `hedging_budget.tokens_max` | `100` | whole number ≥ 1 |
/// | `hedging_budget.tokens_initial` | `10` (or `tokens_max` if smaller) | whole number ≤ `tokens_max` |
/// | `hedging_budget.min_tokens_per_second` | `0.0` | number ≥ 0: steady refill |
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct HedgingSettings {
    /// `false` turns the spec into a pass-through.
    pub enabled: bool,
    /// How long the latest attempt runs before the next one starts.
    #[cfg_attr(
        feature = "serde",
        serde(serialize_with = "crate::settings::ser::duration")
    )]
    pub delay: Duration,
    /// Attempts after the first: at most `max_hedged_attempts + 1` in all.
    pub max_hedged_attempts: u32,
    /// What a failed attempt does to the schedule.
    pub on_failure: OnFailure,
    /// The budget hedged attempts take tokens from, if configured.
    #[cfg_attr(
        feature = "serde",
        serde(rename = "hedging_budget", skip_serializing_if = "Option::is_none")
    )]
    pub budget: Option<BudgetSettings>,
}

impl HedgingSettings {
    /// Reads and validates a hedging section, recording every problem found.
    pub fn read(s: &mut Section<'_>) -> Option<Self> {
        s.alias("hedging_delay", "delay", |_| {
            "the wait before the next attempt, under this project's name".into()
        });
        s.alias("max_attempts", "max_hedged_attempts", |_| {
            "`max_hedged_attempts` counts the attempts after the first, where gRPC's `max_attempts` counts the first too".into()
        });
        s.alias("retry_budget", "hedging_budget", |_| {
            "a hedging spec's budget has the retry budget's keys under its own name".into()
        });
        let enabled = s.bool("enabled", true);
        let delay = s.duration("delay", true).map(|d| d.unwrap_or_default());
        let max = s.int(
            "max_hedged_attempts",
            Some(1),
            0,
            u64::from(MAX_HEDGED_ATTEMPTS),
        );
        let on_failure = s
            .choice("on_failure", &["hedge_at_once", "wait"], "hedge_at_once")
            .map(|c| {
                if c == "wait" {
                    OnFailure::Wait
                } else {
                    OnFailure::HedgeAtOnce
                }
            });
        let budget = s.table("hedging_budget", |b| crate::retry::read_budget(b, false));
        Some(Self {
            enabled: enabled?,
            delay: delay?,
            max_hedged_attempts: u32::try_from(max?).ok()?,
            on_failure: on_failure?,
            budget: match budget {
                None => None,
                Some(b) => b?,
            },
        })
    }
}

/// The settings a hedging spec runs with, and its budget's in the bucket's
/// units.
#[derive(Debug)]
struct HedgingConfig {
    settings: HedgingSettings,
    budget: Option<BudgetParams>,
}

impl HedgingConfig {
    fn of(settings: HedgingSettings) -> Self {
        let budget = settings.budget.as_ref().map(BudgetParams::of);
        Self { settings, budget }
    }
}

/// Whether the spec hedges: all a call whose first attempt wins reads.
const ENABLED: usize = 0b1;

impl Tag for HedgingConfig {
    fn tag(&self) -> usize {
        if self.settings.enabled {
            ENABLED
        } else {
            0
        }
    }
}

/// What a hedging spec has done since it was built, in its part of the
/// [`Snapshot`](crate::Snapshot).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct HedgingCounts {
    /// Attempts started, the first of each call included.
    pub attempts_started: u64,
    /// Of them, attempts after the first of their call (hedges).
    pub hedges_started: u64,
    /// Attempts whose outcome was accepted and returned.
    pub attempts_won: u64,
    /// Attempts whose outcome was a failure.
    pub attempts_failed: u64,
    /// Attempts dropped before their outcome: another won, or the call was
    /// dropped.
    pub attempts_cancelled: u64,
    /// Hedges not started because the budget was empty.
    pub hedges_refused_by_budget: u64,
    /// Tokens in the budget now, if the spec has one.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub budget_tokens: Option<f64>,
}

/// Where an attempt's life ended, for the counts and the metric label.
#[derive(Debug, Clone, Copy)]
enum Fate {
    Started = 0,
    Won = 1,
    Failed = 2,
    Cancelled = 3,
}

const FATES: [(Fate, &str); 4] = [
    (Fate::Started, "started"),
    (Fate::Won, "won"),
    (Fate::Failed, "failed"),
    (Fate::Cancelled, "cancelled"),
];

/// The metric handles of a hedging spec.
#[derive(Debug)]
struct HedgingMeters {
    attempts: [Counter; 4],
}

/// The shared instance of one hedging spec: its settings, its budget, its
/// counts and its telemetry. Reached through a [`HedgingHandle`].
#[derive(Debug)]
pub struct Hedging {
    config: Versions<HedgingConfig>,
    budget: Budget,
    attempts: [AtomicU64; 4],
    hedges: AtomicU64,
    refused: AtomicU64,
    telemetry: Telemetry,
    meters: OnceLock<HedgingMeters>,
}

impl Sealed for Hedging {}

impl Mechanism for Hedging {
    const KIND: SpecKind = SpecKind::HEDGING;
    const OUTCOMES: &'static [Outcome] = &[
        Outcome::Success,
        Outcome::Failure,
        Outcome::Ignored,
        Outcome::Cancelled,
    ];
    type Settings = HedgingSettings;

    fn read(section: &mut Section<'_>) -> Option<HedgingSettings> {
        HedgingSettings::read(section)
    }

    fn build(settings: HedgingSettings, telemetry: Telemetry) -> Self {
        let config = HedgingConfig::of(settings);
        let budget = Budget::filled(config.budget.as_ref());
        let hedging = Self {
            config: Versions::new(config),
            budget,
            attempts: Default::default(),
            hedges: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            telemetry,
            meters: OnceLock::new(),
        };
        hedging.register_meters();
        hedging
    }

    fn reconfigure(&self, settings: HedgingSettings) -> Vec<String> {
        let config = HedgingConfig::of(settings);
        let had = self.config.get().budget.is_some();
        let changes = self.budget.reload(had, config.budget, || {
            let running = config.settings.clone();
            let (now, _) = self.config.publish(|c| c.settings == running, || config);
            now.budget.as_ref()
        });
        Reloaded::said("hedging budget", &changes)
    }

    fn settings(&self) -> &HedgingSettings {
        &self.config.get().settings
    }

    fn telemetry(&self) -> &Telemetry {
        &self.telemetry
    }

    fn status(&self) -> Option<Arc<dyn Part>> {
        Some(Arc::new(self.counts()))
    }

    fn telemetry_switched(&self) {
        self.register_meters();
    }
}

impl Hedging {
    /// Registers the hedging metric once metrics are switched on.
    fn register_meters(&self) {
        if self.telemetry.metrics_on() {
            self.meters.get_or_init(|| HedgingMeters {
                attempts: FATES.map(|(_, label)| {
                    self.telemetry
                        .counter("resilient_hedging_attempts_total", &[("outcome", label)])
                }),
            });
        }
    }

    /// Counts `n` attempts that met `fate`.
    #[inline]
    fn count(&self, fate: Fate, n: u64) {
        if n == 0 {
            return;
        }
        self.attempts[fate as usize].fetch_add(n, Ordering::Relaxed);
        if self.telemetry.metrics_on() {
            if let Some(m) = self.meters.get() {
                m.attempts[fate as usize].increment(n);
            }
        }
    }

    /// The budget's tokens now, if the settings have a budget.
    fn budget_tokens(&self) -> Option<f64> {
        let config = self.config.get();
        config.budget.as_ref().map(|p| self.budget.tokens(p))
    }

    /// What the spec has done so far.
    fn counts(&self) -> HedgingCounts {
        let n = |f: Fate| self.attempts[f as usize].load(Ordering::Relaxed);
        HedgingCounts {
            attempts_started: n(Fate::Started),
            hedges_started: self.hedges.load(Ordering::Relaxed),
            attempts_won: n(Fate::Won),
            attempts_failed: n(Fate::Failed),
            attempts_cancelled: n(Fate::Cancelled),
            hedges_refused_by_budget: self.refused.load(Ordering::Relaxed),
            budget_tokens: self.budget_tokens(),
        }
    }

    /// Telemetry of a hedge that starts: the listeners and a DEBUG line.
    fn hedged(&self, attempt: u32, why: HedgeReason, delay: Duration) {
        self.hedges.fetch_add(1, Ordering::Relaxed);
        let t = &self.telemetry;
        t.emit(|| Event::Hedged {
            spec: t.spec,
            path: t.path,
            attempt,
            after_failure: matches!(why, HedgeReason::Failure),
        });
        if t.logging() {
            crate::telemetry::on_caller_span(
                crate::telemetry::span_fields::HEDGES,
                attempt.saturating_sub(1),
            );
            let (spec, path) = (t.spec, t.path);
            match why {
                HedgeReason::Delay => tracing::debug!(
                    target: "resilient::hedging",
                    spec, path, attempt, ?delay,
                    "starting attempt {attempt}: the latest attempt ran {delay:?} without an accepted outcome"
                ),
                HedgeReason::Failure => tracing::debug!(
                    target: "resilient::hedging",
                    spec, path, attempt,
                    "starting attempt {attempt} at once: an attempt failed"
                ),
            }
        }
    }

    /// Telemetry of a hedge the empty budget kept from starting.
    fn refused_by_budget(&self, attempt: u32) {
        self.refused.fetch_add(1, Ordering::Relaxed);
        let t = &self.telemetry;
        if t.logging() {
            let (spec, path) = (t.spec, t.path);
            tracing::debug!(
                target: "resilient::hedging",
                spec, path, attempt,
                "attempt {attempt} not started: the hedging budget is empty"
            );
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum HedgeReason {
    Delay,
    Failure,
}

/// How hedging takes a resilience error raised inside it: a spec without
/// settings ends the call; a rejection is a failure that starts nothing at
/// once (`false`); anything else is a failure like the body's (`true`).
fn on_resilience(error: &Error) -> (Verdict, bool) {
    match error {
        Error::NotConfigured { .. } => (Verdict::Ignore, false),
        Error::CallNotPermitted { .. }
        | Error::RateLimitExceeded { .. }
        | Error::ConcurrencyLimitReached { .. }
        | Error::BackendUnavailable { .. }
        | Error::Throttled { .. } => (Verdict::Failure, false),
        _ => (Verdict::Failure, true),
    }
}

/// Access to a hedging spec's settings and counts; cheap to clone.
///
/// # Example
///
/// ```
/// use resilient_core::prelude::*;
/// use resilient_core::Registry;
///
/// #[derive(HedgingSpec)]
/// #[spec("resilient.hedging.pet")]
/// pub struct PetHedging;
///
/// #[derive(Debug, thiserror::Error)]
/// pub enum PetError {
///     #[error("the store is down")]
///     Down,
///     #[error(transparent)]
///     Resilience(#[from] resilient_core::Error),
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let settings = config::Config::builder()
/// #     .add_source(config::File::from_str(
/// #         "[resilient.hedging.pet]\ndelay = \"50ms\"",
/// #         config::FileFormat::Toml,
/// #     ))
/// #     .build()?;
/// # let registry = resilient_config::build(Registry::builder().spec::<PetHedging>(), &settings)?;
/// # let _guard = registry.set_default();
/// let hedging = PetHedging::get()?;
/// let found: Result<u32, PetError> = hedging.call(|| async { Ok(7) }).await;
/// assert_eq!(found?, 7); // answered before the delay: no hedge started
/// println!("{:?}", hedging.counts());
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct HedgingHandle<S> {
    inner: Shared<Hedging>,
    _spec: PhantomData<fn() -> S>,
}

impl<S> Clone for HedgingHandle<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            _spec: PhantomData,
        }
    }
}

impl<S: HedgingSpec> HedgingHandle<S> {
    /// The spec's validated settings, as running now.
    pub fn settings(&self) -> &HedgingSettings {
        &self.inner.config.get().settings
    }

    /// What the spec has done so far (also in the snapshot).
    pub fn counts(&self) -> HedgingCounts {
        self.inner.counts()
    }

    /// Runs `f` under the spec: a first attempt `f()`, and another `f()`
    /// beside it each time the latest has run `delay` without an accepted
    /// outcome, up to `max_hedged_attempts` more; the first accepted outcome
    /// is returned and the other attempts are dropped.
    pub async fn call<T, E, F, Fut>(&self, mut f: F) -> Result<T, E>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: From<Error>,
        S::Classifier: Classify<T, E>,
    {
        let ops = HedgeOps {
            key: const { &Key::of::<S>() },
            classify: <S::Classifier as Classify<T, E>>::classify,
        };
        let mut call = HedgeCall::start(ops, Some(CallInstance::Borrowed(&self.inner)));
        let out = match call.refused() {
            Some(e) => Err(e),
            None => {
                let mut first = std::pin::pin!(None);
                let mut hedges = Hedges::new();
                let mut delay = std::pin::pin!(unarmed());
                loop {
                    call.start_attempt(first.as_mut(), &mut hedges, outcome::lifted(f()));
                    match call.next(first.as_mut(), &mut hedges, delay.as_mut()).await {
                        HedgeStep::Done(o) => break o,
                        HedgeStep::Hedge => {}
                    }
                }
            }
        };
        out.map_err(|fail| fail.into_error(E::from))
    }
}

/// The spec and classification of a hedged call, resolved where the types
/// are known.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct HedgeOps<C> {
    pub(crate) key: &'static Key<Hedging>,
    pub(crate) classify: C,
}

/// The operations of spec `S` for `Result<T, E>`.
pub(crate) fn ops<S, T, E>() -> HedgeOps<impl Fn(&Result<T, E>) -> Verdict + Copy>
where
    S: HedgingSpec,
    S::Classifier: Classify<T, E>,
{
    HedgeOps {
        key: const { &Key::of::<S>() },
        classify: <S::Classifier as Classify<T, E>>::classify,
    }
}

/// The attempts after the first of one call, boxed as each starts (the
/// empty list allocates nothing).
#[doc(hidden)]
pub struct Hedges<A>(Vec<Pin<Box<A>>>);

impl<A> Hedges<A> {
    /// No hedge yet.
    #[inline(always)]
    pub const fn new() -> Self {
        Self(Vec::new())
    }
}

impl<A> Default for Hedges<A> {
    fn default() -> Self {
        Self::new()
    }
}

/// The delay before the next attempt, armed when the attempts running
/// could not answer at once.
#[doc(hidden)]
pub type HedgeDelay = Option<Sleep>;

/// A delay not armed yet.
#[inline(always)]
pub const fn unarmed() -> HedgeDelay {
    None
}

/// What the call does next.
#[doc(hidden)]
pub enum HedgeStep<T, E> {
    /// The call's outcome; every other attempt is dropped already.
    Done(Result<T, Fail<E>>),
    /// Start another attempt (its budget token is taken already).
    Hedge,
}

/// One call under a hedging spec, as the generated code drives it: an
/// attempt ([`start_attempt`](Self::start_attempt)), then
/// [`next`](Self::next) until it says [`HedgeStep::Done`].
#[doc(hidden)]
pub struct HedgeCall<'a, T, E, C> {
    ops: HedgeOps<C>,
    /// `None` when the spec has no settings: the call fails at once.
    hedging: Option<CallInstance<'a, Hedging>>,
    config: Pinned<HedgingConfig>,
    /// Attempts started in this call.
    started: u32,
    /// Attempts started and not yet finished or dropped.
    running: u32,
    /// Whether no further attempt may start (the budget said no).
    closed: bool,
    /// Why the next attempt starts, once [`next`](Self::next) said so.
    reason: HedgeReason,
    /// The latest failure, returned if no attempt is accepted.
    last_failure: Option<Result<T, Fail<E>>>,
    /// When the call started, while it is timed and has no outcome yet.
    timed: Option<Instant>,
    /// Whether the call has its outcome (counted by `done`).
    ended: bool,
}

impl<'a, T, E, C> HedgeCall<'a, T, E, C>
where
    C: Fn(&Result<T, E>) -> Verdict,
{
    /// A call of `ops` through `hedging`, under the settings read now.
    #[inline(always)]
    pub(crate) fn start(ops: HedgeOps<C>, hedging: Option<CallInstance<'a, Hedging>>) -> Self {
        let (config, timed) = match hedging.as_deref() {
            Some(h) => {
                let config = h.config.pin();
                let timed = if config.tag() & ENABLED != 0 {
                    h.telemetry.start()
                } else {
                    None
                };
                (config, timed)
            }
            None => (Pinned::NONE, None),
        };
        Self {
            ops,
            hedging,
            config,
            started: 0,
            running: 0,
            closed: false,
            reason: HedgeReason::Delay,
            last_failure: None,
            timed,
            ended: false,
        }
    }

    /// The error that ends the call before any attempt: the spec has no
    /// settings.
    #[inline(always)]
    pub fn refused(&self) -> Option<Fail<E>> {
        match self.hedging {
            Some(_) => None,
            None => Some(Fail::Resilience(self.ops.key.not_configured())),
        }
    }

    /// The running instance, if the spec hedges.
    #[inline(always)]
    fn enabled(&self) -> Option<&Hedging> {
        let h = self.hedging.as_deref()?;
        (self.config.tag() & ENABLED != 0).then_some(h)
    }

    /// Starts `attempt`: the first in the call's own future, the others boxed.
    #[inline(always)]
    pub fn start_attempt<A>(
        &mut self,
        first: Pin<&mut Option<A>>,
        hedges: &mut Hedges<A>,
        attempt: A,
    ) where
        A: Future<Output = Result<T, Fail<E>>>,
    {
        self.started = self.started.saturating_add(1);
        self.running = self.running.saturating_add(1);
        if self.started == 1 {
            let mut first = first;
            first.set(Some(attempt));
        } else {
            hedges.0.push(Box::pin(attempt));
        }
        if let Some(h) = self.enabled() {
            h.count(Fate::Started, 1);
            if self.started > 1 {
                let config = self.config.get(&h.config);
                h.hedged(self.started, self.reason, config.settings.delay);
            }
        }
    }

    /// Polls the attempts and the delay until the call has an outcome or
    /// another attempt is to start.
    pub fn next<'s, A>(
        &'s mut self,
        first: Pin<&'s mut Option<A>>,
        hedges: &'s mut Hedges<A>,
        delay: Pin<&'s mut HedgeDelay>,
    ) -> HedgeNext<'s, 'a, T, E, C, A> {
        HedgeNext {
            call: self,
            first,
            hedges,
            delay,
        }
    }

    fn poll_next<A>(
        &mut self,
        cx: &mut Context<'_>,
        mut first: Pin<&mut Option<A>>,
        hedges: &mut Hedges<A>,
        mut delay: Pin<&mut HedgeDelay>,
    ) -> Poll<HedgeStep<T, E>>
    where
        A: Future<Output = Result<T, Fail<E>>>,
    {
        let mut hedge_now = false;
        // The newest attempt first: one that has just started is polled
        // (and so begins its work) before an older one can end the call.
        // `swap_remove` moves an attempt polled already into the place.
        let mut i = hedges.0.len();
        while i > 0 {
            i -= 1;
            if let Poll::Ready(o) = hedges.0[i].as_mut().poll(cx) {
                drop(hedges.0.swap_remove(i));
                self.running -= 1;
                match self.judge(o) {
                    Judged::Accepted(o, v) => {
                        return Poll::Ready(self.done(first, hedges, o, Some(v)))
                    }
                    Judged::Failed { at_once } => hedge_now |= at_once,
                }
            }
        }
        if let Some(attempt) = first.as_mut().as_pin_mut() {
            if let Poll::Ready(o) = attempt.poll(cx) {
                first.set(None);
                self.running -= 1;
                match self.judge(o) {
                    Judged::Accepted(o, v) => {
                        return Poll::Ready(self.done(first, hedges, o, Some(v)))
                    }
                    Judged::Failed { at_once } => hedge_now |= at_once,
                }
            }
        }
        let (more, at_once, wait) = match self.enabled() {
            // A pass-through: its one attempt is all there is, and its
            // outcome was accepted above.
            None => return Poll::Pending,
            Some(h) => {
                let s = &self.config.get(&h.config).settings;
                (
                    !self.closed && self.started <= s.max_hedged_attempts,
                    hedge_now && s.on_failure == OnFailure::HedgeAtOnce,
                    s.delay,
                )
            }
        };
        if more && at_once {
            return self.hedge(delay, HedgeReason::Failure, first, hedges);
        }
        if more {
            // `"0s"`: every attempt at once, without a timer's tick between.
            if wait.is_zero() {
                return self.hedge(delay, HedgeReason::Delay, first, hedges);
            }
            if delay.is_none() {
                delay.set(Some(tokio::time::sleep(wait)));
            }
            if let Some(sleep) = delay.as_mut().as_pin_mut() {
                if sleep.poll(cx).is_ready() {
                    return self.hedge(delay, HedgeReason::Delay, first, hedges);
                }
            }
            return Poll::Pending;
        }
        if self.running == 0 {
            if let Some(o) = self.last_failure.take() {
                return Poll::Ready(self.done(first, hedges, o, None));
            }
        }
        Poll::Pending
    }

    /// Another attempt is due: it starts if the budget has a token for it;
    /// else the call starts no more and goes on with the attempts it has.
    fn hedge<A>(
        &mut self,
        mut delay: Pin<&mut HedgeDelay>,
        reason: HedgeReason,
        first: Pin<&mut Option<A>>,
        hedges: &mut Hedges<A>,
    ) -> Poll<HedgeStep<T, E>> {
        delay.set(None);
        let next = self.started.saturating_add(1);
        let refused = match self.enabled() {
            Some(h) => match &self.config.get(&h.config).budget {
                Some(p) => match h.budget.try_withdraw(p) {
                    // Spent now: the attempt starts before anything else runs.
                    Some(w) => {
                        w.spend();
                        false
                    }
                    None => {
                        h.refused_by_budget(next);
                        true
                    }
                },
                None => false,
            },
            None => false,
        };
        if refused {
            self.closed = true;
            if self.running == 0 {
                if let Some(o) = self.last_failure.take() {
                    return Poll::Ready(self.done(first, hedges, o, None));
                }
            }
            // The attempts running wake the call when they finish.
            return Poll::Pending;
        }
        self.reason = reason;
        Poll::Ready(HedgeStep::Hedge)
    }

    /// How an attempt's outcome counts: accepted, or a failure kept as the
    /// latest (and whether it asks for the next attempt at once).
    fn judge(&mut self, o: Result<T, Fail<E>>) -> Judged<T, E> {
        if self.enabled().is_none() {
            return Judged::Accepted(o, Verdict::Success);
        }
        let mut at_once = true;
        let (o, verdict) = outcome::classify(o, &self.ops.classify, |e| {
            let (v, now) = on_resilience(e);
            at_once = now;
            v
        });
        match verdict {
            v @ (Verdict::Success | Verdict::Ignore) => Judged::Accepted(o, v),
            // A failure no other attempt may follow: the call's outcome.
            Verdict::Fatal => {
                if let Some(h) = self.enabled() {
                    h.count(Fate::Failed, 1);
                }
                Judged::Accepted(o, Verdict::Fatal)
            }
            Verdict::Failure | Verdict::RetryAfter(_) => {
                if let Some(h) = self.enabled() {
                    h.count(Fate::Failed, 1);
                }
                self.last_failure = Some(o);
                Judged::Failed { at_once }
            }
        }
    }

    /// The call's outcome `o` (accepted with `verdict`, or the last failure
    /// with `None`): every other attempt is dropped now, and the call
    /// counted.
    fn done<A>(
        &mut self,
        mut first: Pin<&mut Option<A>>,
        hedges: &mut Hedges<A>,
        o: Result<T, Fail<E>>,
        verdict: Option<Verdict>,
    ) -> HedgeStep<T, E> {
        first.set(None);
        hedges.0.clear();
        let cancelled = u64::from(std::mem::take(&mut self.running));
        self.ended = true;
        self.last_failure = None;
        let timed = self.timed.take();
        if let Some(h) = self.enabled() {
            h.count(Fate::Cancelled, cancelled);
            let outcome = match verdict {
                Some(Verdict::Success) => {
                    h.count(Fate::Won, 1);
                    if let Some(p) = &self.config.get(&h.config).budget {
                        h.budget.deposit(p);
                    }
                    Outcome::Success
                }
                Some(Verdict::Fatal) => Outcome::Failure,
                Some(_) => {
                    h.count(Fate::Won, 1);
                    Outcome::Ignored
                }
                None => Outcome::Failure,
            };
            h.telemetry.ended(outcome, timed.map(|at| at.elapsed()));
        }
        HedgeStep::Done(o)
    }
}

/// The wait for a hedged call's next step: see [`HedgeCall::next`].
#[doc(hidden)]
pub struct HedgeNext<'s, 'a, T, E, C, A> {
    call: &'s mut HedgeCall<'a, T, E, C>,
    first: Pin<&'s mut Option<A>>,
    hedges: &'s mut Hedges<A>,
    delay: Pin<&'s mut HedgeDelay>,
}

impl<T, E, C, A> Future for HedgeNext<'_, '_, T, E, C, A>
where
    C: Fn(&Result<T, E>) -> Verdict,
    A: Future<Output = Result<T, Fail<E>>>,
{
    type Output = HedgeStep<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<HedgeStep<T, E>> {
        // Every field is a reference or a pinned reference: `Unpin`.
        let this = self.get_mut();
        this.call
            .poll_next(cx, this.first.as_mut(), this.hedges, this.delay.as_mut())
    }
}

enum Judged<T, E> {
    Accepted(Result<T, Fail<E>>, Verdict),
    Failed { at_once: bool },
}

impl<T, E, C> Drop for HedgeCall<'_, T, E, C> {
    fn drop(&mut self) {
        // Dropped before its outcome (a timeout outside, a caller gone, a
        // panic): the attempts still running are dropped with it. A call
        // that started an attempt is cancelled even while none runs (every
        // attempt failed and the next waits for its delay).
        let timed = self.timed.take();
        if let Some(h) = self.hedging.as_deref() {
            if self.config.tag() & ENABLED != 0 && self.started > 0 && !self.ended {
                h.count(Fate::Cancelled, u64::from(self.running));
                h.telemetry
                    .ended(Outcome::Cancelled, timed.map(|at| at.elapsed()));
            }
        }
    }
}
