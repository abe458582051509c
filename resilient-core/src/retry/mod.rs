//! Retry: call again after a failure, with waits between calls.
//!
//! A retry spec is a unit struct with `#[derive(RetrySpec)]` and the absolute
//! path of its settings (see [`RetrySettings`] for every key):
//!
//! ```
//! use resilient_core::RetrySpec;
//!
//! #[derive(RetrySpec)]
//! #[spec("resilient.retry.pet")]
//! pub struct PetRetry;
//! ```
//!
//! ```toml
//! [resilient.retry.pet]
//! delay = "100ms"
//! attempts = 2        # retries after the first call: at most 3 calls
//! ```
//!
//! # Semantics
//!
//! - `attempts` counts retries, not calls. `attempts = 0` (or `enabled =
//!   false`) makes exactly one call, whose outcome passes through unwrapped.
//! - The spec's [`Classify`] implementation decides what is a
//!   failure. A failure it does not retry ([`Verdict::Ignore`](crate::Verdict))
//!   passes through at once, unchanged, and uses no budget token. A failure
//!   no attempt may follow ([`Verdict::Fatal`](crate::Verdict), such as
//!   gRPC's `DEADLINE_EXCEEDED` with `classify = grpc`) is returned at once,
//!   unchanged, and counted as a failure (by adaptive throttling too).
//! - Before each retry: the attempts check, then the overall `timeout` check
//!   (a retry whose wait would cross the limit is not started), then adaptive
//!   throttling if the spec has a `throttle` table (below), then the retry
//!   budget (an empty bucket ends the call at once with the latest failure,
//!   unchanged).
//! - A budget token is spent when its retry starts: a call dropped during
//!   the wait before it gives the token back.
//! - With `retry_budget.backend = "redis"`, every replica draws on one
//!   bucket in Redis (see [`backend`](crate::backend)): the withdrawal is
//!   one round trip on the calling thread, made only for a failure that
//!   passed the attempts and `timeout` checks.
//! - When retry gives up, the call ends as the spec's exhaustion mode says:
//!   [`Error::RetryExhausted`] by default ([`ReturnError`]), or the last
//!   failure unchanged with `#[spec("..", exhausted = last_failure)]`
//!   ([`ReturnLastFailure`]).
//! - Waits never overflow: they saturate at `backoff.delay_max`, or at
//!   [`Duration::MAX`](std::time::Duration::MAX).
//!
//! # Delay hints
//!
//! A failure can say how long to wait before the next call
//! ([`Verdict::RetryAfter`]): an HTTP response's
//! `Retry-After` (with `classify = http`, see [`http`](crate::http)), or a
//! resilience error raised inside the retry:
//!
//! | failure | hint |
//! |---|---|
//! | [`Error::RateLimitExceeded`] | its `retry_after`: the time until the limiter's next permit |
//! | [`Error::CallNotPermitted`] from an open breaker, with `retry_call_not_permitted = true` | its `retry_after`: the rest of the open period |
//!
//! Retry then waits the hint instead of its computed delay (no jitter),
//! capped by `backoff.delay_max` and by `max_hinted_delay` when they are set.
//! Every other rule stays: the attempt counts, a wait that would cross the
//! overall `timeout` ends the retry ([`GaveUp::Timeout`]), and the retry
//! needs a budget token. Without any cap or `timeout` a hint is waited in
//! full: set one when the hint comes from a server you do not control.
//!
//! # Waits and costs by cause
//!
//! A failure's [`Cause`] (transient, throttled or timeout), named by the
//! spec's classification ([`Classify::cause`]), can have a table of its
//! own, `cause.<cause>`, with its own base delay (in place of `delay`) and
//! its own budget cost (in tokens, in place of one): AWS's 2026 retries,
//! a throttling error costing 5 tokens and waiting from 1 s, any other
//! costing 14 and waiting from 50 ms, are
//!
//! ```toml
//! [resilient.retry.aws]
//! delay = "50ms"
//! attempts = 3
//! retry_budget = { tokens_max = 500, tokens_initial = 500 }
//! cause.throttled = { delay = "1s", cost = 5 }
//! cause.transient = { cost = 14 }
//! ```
//!
//! A spec without a `cause` table never asks for a failure's cause.
//!
//! # Adaptive throttling
//!
//! With a `throttle` table ([`ThrottleSettings`]), the spec counts over a
//! trailing `window` every attempt of every fn that uses it as a request,
//! and each attempt it does not retry (a success, or a failure its
//! classification ignores) as an accept, and refuses a retry with the
//! probability of the Google SRE book's client-side throttling,
//! `max(0, (requests − k·accepts) / (requests + 1))`. The first call of a
//! call is refused only with `throttle.first_calls = true`: then before
//! the body runs, with [`Error::Throttled`], counted in the window as a
//! request (as the SRE book counts the requests the client refused) and
//! as [`StoppedBy::ThrottledFirstCall`]; every door asks, since the
//! decision is made where a retry's call starts. A refused retry ends the
//! call with its last failure unchanged, as an empty budget does, and is
//! counted as
//! [`StoppedBy::Throttled`]. With nothing failed in the window the
//! probability is 0 and no random number is drawn. A success costs one
//! atomic add and no clock read (its accept is dated at the throttle's last
//! clock read, at most 31 successes earlier: see the guide); a failure, one
//! clock read and one compare-and-swap on the window's current bucket.
//! [`RetryHandle::throttle_counts`] shows the window.
//!
//! # The attempt, the attempt header and nested retries
//!
//! Each attempt of the body runs with the thread marked with its
//! [`Attempt`]: [`current_attempt`] tells the code it runs which retry it
//! is (`None` on the first call).
//! With `attempt_header`, each retry of an HTTP request carries the
//! attempts made before it (`1` on the first retry, absent on the first
//! call, as gRPC's `grpc-previous-rpc-attempts`): the middleware set it,
//! `layer::AttemptHeaderLayer` inside a retry layer sets it, and a
//! retried fn sets it with `with_attempt_header` (feature `reqwest`) or
//! `set_attempt_header` (feature `http`). A retry that is about to retry
//! inside an outer retry's call logs one WARN per pair of specs with
//! the product of their calls, and counts `resilient_retry_nested_total`.
//!
//! # Imperative use
//!
//! The macros are a thin layer over [`RetrySpec::get`] and
//! [`RetryHandle::call`], which you can call yourself:
//!
//! ```
//! # use resilient_core::RetrySpec;
//! # #[derive(RetrySpec)] #[spec("resilient.retry.pet")] pub struct PetRetry;
//! # #[derive(Debug, thiserror::Error)] enum PetError {
//! #     #[error("unavailable")] Unavailable,
//! #     #[error(transparent)] Resilience(#[from] resilient_core::Error),
//! # }
//! async fn find(id: u64) -> Result<String, PetError> {
//!     PetRetry::get()?
//!         .call(|| async move { Ok(format!("pet {id}")) })
//!         .await
//! }
//! ```

pub(crate) mod budget;
mod context;
mod exhausted;
mod settings;
mod throttle;

use std::future::Future;
use std::marker::PhantomData;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use metrics::Counter;

use tokio::time::Instant;

pub(crate) use context::call_in;
#[cfg(feature = "http")]
pub use context::set_attempt_header;
#[cfg(feature = "reqwest")]
pub use context::with_attempt_header;
#[doc(hidden)]
pub use context::InAttempt;
#[cfg(feature = "reqwest-middleware")]
pub(crate) use context::InMarked;
#[cfg(feature = "tower")]
pub(crate) use context::{call_in_if, marked};
pub use context::{current_attempt, Attempt};
pub use exhausted::{
    Exhaustion, IntoBoxError, Kept, ReturnError, ReturnLastFailure, RETRY_TRAIL_MAX,
};
pub(crate) use settings::read_budget;
pub use settings::{
    Backoff, BudgetSettings, CauseSettings, Causes, Jitter, OnBudgetBackendFailure, RetrySettings,
    ThrottleSettings,
};

use crate::backend::{Backend, BudgetVersion, SharedBudget};
use crate::error::{Error, GaveUp};
use crate::outcome::{self, Fail};
use crate::registry::{
    CallInstance, Context, Key, Mechanism, Part, Pinned, Sealed, Shared, Spec, Tag, Versions,
};
use crate::settings::Section;
use crate::spec::{Cause, Classify, SpecKind, Verdict};
use crate::telemetry::{Event, LazyCounter, Outcome, StoppedBy, Telemetry};
use budget::{Budget, BudgetParams};
use throttle::{Throttle, ThrottleParams};

impl SpecKind {
    /// `#[derive(RetrySpec)]`, used by `#[retryable]`.
    pub const RETRY: SpecKind = SpecKind::new("retry", "retry");
}

/// A retry spec: implemented by `#[derive(RetrySpec)]`.
///
/// The derive accepts, besides the path, two options: `classify = ..` (who
/// decides what a failure is: `all_errors`, the default; `custom`, you
/// implement [`Classify`] for the spec; `http`, see [`http`](crate::http);
/// or a shared classifier type such as `PetOutcomes`, see
/// [`Classifier`](crate::Classifier)) and `exhausted = last_failure` (see
/// [`ReturnLastFailure`]).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a retry spec",
    label = "`#[retryable]` needs a type declared with `#[derive(RetrySpec)]`",
    note = "declare one with `#[derive(RetrySpec)] #[spec(\"resilient.retry.name\")] pub struct Name;`",
    note = "each spec kind goes with its own attribute: `RetrySpec` with `#[retryable]`, `CircuitBreakerSpec` with `#[circuit_breakable]`, `TimeoutSpec` with `#[timeout]`, `ConcurrencyLimitSpec` with `#[concurrency_limit]`, `RateLimiterSpec` with `#[rate_limited]`, `ChaosSpec` with `#[chaos]`, `HedgingSpec` with `#[hedged]`"
)]
pub trait RetrySpec: Spec<Mechanism = Retry> + Sized {
    /// The type whose [`Classify`] implementations decide what a failure is,
    /// as the derive's `classify` option names it.
    type Classifier;

    /// What a call returns when retry gives up: [`ReturnError`] (the default)
    /// or [`ReturnLastFailure`].
    type Exhausted;

    /// The spec's shared instance, from the registry in use (a
    /// [scoped](crate::Registry::scope) one, else the installed one).
    ///
    /// # Errors
    ///
    /// [`Error::NotConfigured`] when the registry in use has no settings for
    /// this spec.
    fn get() -> Result<RetryHandle<Self>, Error> {
        crate::registry::handle::<Self>().map(|inner| RetryHandle {
            inner,
            _spec: PhantomData,
        })
    }
}

/// The shared instance of one retry spec: its settings, its budget's tokens
/// and its telemetry. Reached through a [`RetryHandle`].
#[derive(Debug)]
pub struct Retry {
    config: Versions<RetryConfig>,
    /// The budget's tokens in this process: used while the settings have a
    /// local budget, or a shared one with `on_backend_failure = "local"`.
    budget: Budget,
    /// The way to the registry's shared backend, if it has one: used while
    /// the settings say `retry_budget.backend = "redis"`.
    shared: OnceLock<Box<SharedBudget>>,
    /// The attempts of the last `throttle.window`, which every fn of the
    /// spec counts into: used while the settings have a `throttle` table.
    throttle: Throttle,
    telemetry: Telemetry,
    meters: OnceLock<RetryMeters>,
    /// The retry specs this one was found running inside, each warned of
    /// once, with its counter once metrics registered it. Read only when a
    /// call retries inside another retry's retry.
    nested: std::sync::Mutex<Vec<Nested>>,
}

/// An outer retry spec found around this one.
#[derive(Debug)]
struct Nested {
    outer: &'static str,
    counter: Option<Counter>,
}

/// The settings a retry runs with, and its budget's in the bucket's units.
/// Aligned to 16: its tag has four bits.
#[derive(Debug)]
#[repr(align(16))]
struct RetryConfig {
    settings: RetrySettings,
    /// The bucket of this process: the budget, or with a shared one, the
    /// bucket of `on_backend_failure = "local"`.
    budget: Option<BudgetParams>,
    /// `retry_budget.backend = "redis"`.
    shared: Option<SharedConfig>,
    /// `throttle`.
    throttle: Option<ThrottleParams>,
    /// The millionths of a token a retry takes, by [`Cause::index`].
    costs: [u64; 3],
    /// The spec has a `cause` table: a failure's cause is asked for.
    causes: bool,
}

/// A budget whose tokens live in the backend.
#[derive(Debug, Clone, Copy)]
struct SharedConfig {
    /// The bucket's shape, and its id in this process (see
    /// [`SharedBudget::switch`]).
    version: BudgetVersion,
    per_success: u64,
    on_failure: OnBudgetBackendFailure,
}

impl RetryConfig {
    fn of(settings: RetrySettings) -> Self {
        let (budget, shared) = match &settings.budget {
            None => (None, None),
            Some(b) if b.backend == Backend::Local => (Some(BudgetParams::of(b)), None),
            Some(b) => {
                let local = match b.on_backend_failure {
                    OnBudgetBackendFailure::Local { tokens_max } => {
                        Some(BudgetParams::of(&BudgetSettings {
                            tokens_max,
                            tokens_initial: b.tokens_initial.min(tokens_max),
                            ..*b
                        }))
                    }
                    _ => None,
                };
                let p = BudgetParams::of(b);
                let shared = SharedConfig {
                    version: BudgetVersion {
                        shape: p.shape(),
                        // The id of the settings the spec is built with;
                        // a reload sets that of its own.
                        id: 0,
                    },
                    per_success: p.per_success(),
                    on_failure: b.on_backend_failure,
                };
                (local, Some(shared))
            }
        };
        let throttle = settings.throttle.as_ref().map(ThrottleParams::of);
        let costs = Cause::ALL.map(|c| {
            let cost = settings.causes.get(c).and_then(|t| t.cost).unwrap_or(1);
            // At most 2^32 · 10^6: no overflow.
            u64::from(cost).saturating_mul(budget::SCALE)
        });
        let causes = !settings.causes.is_empty();
        Self {
            settings,
            budget,
            shared,
            throttle,
            costs,
            causes,
        }
    }
}

/// What a call that succeeds needs of its settings, in the tag that comes
/// with them: it follows the pointer only to fail, to count a success
/// (into a budget, or into adaptive throttling's window), or to ask the
/// throttle about its first attempt. Four bits, the alignment of the
/// settings' address: the budget and the throttle share one.
const ENABLED: usize = 0b0001;
const TIMED_OUT: usize = 0b0010;
const COUNTED: usize = 0b0100;
/// `throttle.first_calls`, on an enabled spec: the first attempt asks the
/// throttle. Tested with [`TIMED_OUT`] in one test, so that a spec with
/// neither pays nothing for it.
const FIRST_CALLS: usize = 0b1000;

impl Tag for RetryConfig {
    const BITS: usize = 0b1111;

    fn tag(&self) -> usize {
        let s = &self.settings;
        (if s.enabled { ENABLED } else { 0 })
            | (if s.enabled && s.timeout.is_some() {
                TIMED_OUT
            } else {
                0
            })
            | (if self.budget.is_some() || self.shared.is_some() || self.throttle.is_some() {
                COUNTED
            } else {
                0
            })
            | (if s.enabled && self.throttle.is_some_and(|t| t.first_calls) {
                FIRST_CALLS
            } else {
                0
            })
    }
}

/// The metric handles only a retry records.
#[derive(Debug)]
struct RetryMeters {
    retries: Counter,
    /// By `attempts` registered at once, the other reasons when they first
    /// happen (see `LazyCounter`).
    exhausted: [LazyCounter; 6],
}

/// What adaptive throttling counts over its window
/// ([`RetryHandle::throttle_counts`]).
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct ThrottleCounts {
    /// Attempts made in the window, by every fn of the spec, and first
    /// calls refused (`first_calls = true`).
    pub requests: u64,
    /// Of those, the attempts accepted: successes, and failures the spec
    /// does not retry.
    pub accepts: u64,
    /// The probability that the next retry (and with `first_calls = true`,
    /// the next first call) is refused:
    /// `max(0, (requests − k·accepts) / (requests + 1))`.
    pub refusal: f64,
}

/// A retry spec's budget, in its part of the
/// [`Snapshot`](crate::Snapshot).
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct BudgetTokens {
    /// Tokens in the budget now.
    pub budget_tokens: f64,
}

impl Sealed for Retry {}

impl Mechanism for Retry {
    const KIND: SpecKind = SpecKind::RETRY;
    const OUTCOMES: &'static [Outcome] = &[
        Outcome::Success,
        Outcome::Failure,
        Outcome::Ignored,
        // A request a retry middleware could not send again (see
        // `layer::middleware`): refused before any attempt.
        Outcome::Rejected,
        Outcome::Cancelled,
    ];
    type Settings = RetrySettings;

    fn read(section: &mut Section<'_>) -> Option<RetrySettings> {
        RetrySettings::read(section)
    }

    fn build(settings: RetrySettings, telemetry: Telemetry) -> Self {
        let config = RetryConfig::of(settings);
        let budget = Budget::filled(config.budget.as_ref());
        let retry = Self {
            config: Versions::new(config),
            budget,
            shared: OnceLock::new(),
            throttle: Throttle::new(),
            telemetry,
            meters: OnceLock::new(),
            nested: std::sync::Mutex::new(Vec::new()),
        };
        retry.register_meters();
        retry
    }

    fn reconfigure(&self, settings: RetrySettings) -> Vec<String> {
        let mut config = RetryConfig::of(settings);
        let was = self.config.get();
        let had = was.budget.is_some();
        let (before, after) = (BudgetKind::of(was), BudgetKind::of(&config));
        if let Some(remote) = self.shared.get() {
            // The same shape finds the same bucket; what calls of another
            // deposit or give back is lost rather than credited to it.
            let id = remote.switch(config.shared.map(|s| s.version.shape));
            if let Some(now) = config.shared.as_mut() {
                now.version.id = id;
            }
        }
        let throttle_notes = self.throttle_reload(was.throttle, config.throttle);
        let changes = self.budget.reload(had, config.budget, || {
            let running = config.settings.clone();
            let (now, _) = self.config.publish(|c| c.settings == running, || config);
            now.budget.as_ref()
        });
        let mut notes = reload_notes(before, after, &changes);
        notes.extend(throttle_notes);
        notes
    }

    fn settings(&self) -> &RetrySettings {
        &self.config.get().settings
    }

    fn attach(&self, context: &Context) {
        let shape = self.config.get().shared.map(|s| s.version.shape);
        if let Some(shared) = SharedBudget::of(context, self.telemetry.path(), shape) {
            let _ = self.shared.set(Box::new(shared));
        }
    }

    fn check(settings: &RetrySettings, context: &Context) -> Option<(&'static str, String)> {
        match settings.budget.as_ref().map(|b| b.backend) {
            Some(Backend::Redis) => {
                crate::backend::check_redis(context).map(|(_, rule)| ("retry_budget.backend", rule))
            }
            _ => None,
        }
    }

    fn telemetry(&self) -> &Telemetry {
        &self.telemetry
    }

    fn status(&self) -> Option<Arc<dyn Part>> {
        let budget_tokens = self.budget_tokens()?;
        Some(Arc::new(BudgetTokens { budget_tokens }))
    }

    fn telemetry_switched(&self) {
        self.register_meters();
    }
}

inventory::submit! {
    crate::registry::CrossCheck { run: throttle_without_retries }
}

/// A `throttle` table on a retry spec that makes no retry: valid, but
/// without `first_calls = true` it refuses nothing (it refuses retries
/// only).
fn throttle_without_retries(
    specs: &[crate::registry::uses::Checked<'_>],
) -> Vec<crate::registry::Finding> {
    specs
        .iter()
        .filter_map(|&(entry, settings, _)| {
            let s = (settings as &dyn std::any::Any).downcast_ref::<RetrySettings>()?;
            let throttle = s.throttle.as_ref()?;
            (s.enabled && s.attempts == 0 && !throttle.first_calls).then(|| {
                crate::registry::Finding::Warn(format!(
                    "`{}.throttle` has no effect: adaptive throttling refuses retries only unless `first_calls = true`, and `attempts = 0` makes no retry: remove `throttle`, allow retries with `attempts`, or set `throttle.first_calls = true` to refuse first calls",
                    entry.path
                ))
            })
        })
        .collect()
}

inventory::submit! {
    crate::registry::CrossCheck { run: cost_without_budget }
}

/// A cause's `cost` on a retry spec without a budget: valid, but no retry
/// takes a token.
fn cost_without_budget(
    specs: &[crate::registry::uses::Checked<'_>],
) -> Vec<crate::registry::Finding> {
    specs
        .iter()
        .filter_map(|&(entry, settings, _)| {
            let s = (settings as &dyn std::any::Any).downcast_ref::<RetrySettings>()?;
            let cause = Cause::ALL
                .into_iter()
                .find(|c| s.causes.get(*c).is_some_and(|t| t.cost.is_some()))?;
            (s.enabled && s.budget.is_none()).then(|| {
                crate::registry::Finding::Warn(format!(
                    "`{}.cause.{cause}.cost` has no effect: the spec has no retry budget to take tokens from: add a `retry_budget` table, or remove `cost`",
                    entry.path
                ))
            })
        })
        .collect()
}

/// Where a retry budget's tokens are, as a reload note tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BudgetKind {
    None,
    Local,
    Shared(crate::backend::BudgetShape),
}

impl BudgetKind {
    fn of(c: &RetryConfig) -> Self {
        match (&c.shared, &c.budget) {
            (Some(s), _) => BudgetKind::Shared(s.version.shape),
            (None, Some(_)) => BudgetKind::Local,
            (None, None) => BudgetKind::None,
        }
    }
}

/// The notes of a reload that took a retry budget from `before` to
/// `after`, and did `changes` to this process's bucket (with a shared
/// budget, the bucket of `on_backend_failure = "local"`).
fn reload_notes(
    before: BudgetKind,
    after: BudgetKind,
    changes: &[budget::Reloaded],
) -> Vec<String> {
    use budget::Reloaded;
    let fallback = |changes: &[Reloaded]| -> Vec<String> {
        changes
            .iter()
            .map(|c| match c {
                Reloaded::Started => "while Redis makes no decision, a bucket of this process now decides (`on_backend_failure = \"local\"`), starting with `tokens_initial` or `local_tokens_max` if smaller".to_owned(),
                Reloaded::Gone => "while Redis makes no decision, no bucket of this process decides any more".to_owned(),
                Reloaded::Capped => "this process's bucket for `on_backend_failure = \"local\"` kept at most the new `local_tokens_max`".to_owned(),
            })
            .collect()
    };
    let mut notes = Vec::new();
    match (before, after) {
        (BudgetKind::Shared(_), BudgetKind::None) => {
            notes.push("the retry budget is gone".to_owned());
            return notes;
        }
        (BudgetKind::Shared(_), BudgetKind::Local) => {
            if changes.contains(&Reloaded::Started) {
                notes.push("the budget's tokens are in this process again: it starts with `tokens_initial`".to_owned());
            } else {
                notes.push("the budget's tokens are in this process again: it keeps those of its bucket for `on_backend_failure = \"local\"`".to_owned());
                if changes.contains(&Reloaded::Capped) {
                    notes.push("the budget's tokens were capped at the new `tokens_max`".to_owned());
                }
            }
            return notes;
        }
        (BudgetKind::Shared(was), BudgetKind::Shared(now)) if was != now => notes.push(
            "the budget's tokens are in Redis under the key of the new settings (a bucket not used in the last day starts with `tokens_initial`)".to_owned(),
        ),
        (BudgetKind::Shared(_), BudgetKind::Shared(_)) => {}
        (BudgetKind::Local, BudgetKind::Shared(_)) => {
            notes.push(
                "the budget's tokens are now in Redis, one bucket for every replica (a bucket not used in the last day starts with `tokens_initial`)".to_owned(),
            );
            // This process's bucket was the budget, not a fallback.
            let kept: Vec<_> = changes.iter().copied().filter(|c| *c != Reloaded::Gone).collect();
            notes.extend(fallback(&kept));
            return notes;
        }
        (_, BudgetKind::Shared(_)) => notes.push(
            "the budget's tokens are now in Redis, one bucket for every replica (a bucket not used in the last day starts with `tokens_initial`)".to_owned(),
        ),
        _ => return Reloaded::said("retry budget", changes),
    }
    notes.extend(fallback(changes));
    notes
}

impl Retry {
    /// A reload takes the throttle from `was` to `now`: counts kept under
    /// another window would be read as if their buckets were as long as
    /// the new ones, so they are forgotten; the same window keeps them.
    fn throttle_reload(
        &self,
        was: Option<ThrottleParams>,
        now: Option<ThrottleParams>,
    ) -> Option<String> {
        match (was, now) {
            (Some(a), Some(b)) if throttle::same_window(&a, &b) => {
                (a.first_calls != b.first_calls).then(|| {
                    if b.first_calls {
                        "adaptive throttling now refuses first calls too (`first_calls = true`), on the counts it kept"
                    } else {
                        "adaptive throttling now refuses retries only (`first_calls = false`)"
                    }
                    .to_owned()
                })
            }
            (Some(_), Some(_)) => {
                self.throttle.clear();
                Some(
                    "adaptive throttling starts counting afresh over its new `throttle.window`"
                        .to_owned(),
                )
            }
            (None, Some(_)) => {
                self.throttle.clear();
                Some("adaptive throttling starts, with no attempt counted".to_owned())
            }
            (Some(_), None) => {
                Some("adaptive throttling is gone: no retry is refused by it".to_owned())
            }
            (None, None) => None,
        }
    }

    /// Registers the retry's own metrics once they are switched on.
    fn register_meters(&self) {
        if self.telemetry.metrics_on() {
            self.meters.get_or_init(|| RetryMeters {
                retries: self.telemetry.counter("resilient_retries_total", &[]),
                exhausted: [
                    StoppedBy::Attempts,
                    StoppedBy::Timeout,
                    StoppedBy::Budget,
                    StoppedBy::BudgetUnavailable,
                    StoppedBy::Throttled,
                    StoppedBy::ThrottledFirstCall,
                ]
                .map(|r| {
                    if r == StoppedBy::Attempts {
                        LazyCounter::now(self.exhausted_counter(r))
                    } else {
                        LazyCounter::later()
                    }
                }),
            });
        }
    }

    fn exhausted_counter(&self, by: StoppedBy) -> Counter {
        self.telemetry
            .counter("resilient_retry_exhausted_total", &[("reason", by.label())])
    }

    fn meters(&self) -> Option<&RetryMeters> {
        if self.telemetry.metrics_on() {
            self.meters.get()
        } else {
            None
        }
    }

    pub(crate) fn budget_tokens(&self) -> Option<f64> {
        let c = self.config.get();
        if let Some(shared) = &c.shared {
            // What the backend held after this process's last decision.
            let seen = self.shared.get().and_then(|s| s.seen());
            return Some(seen.unwrap_or(shared.version.shape.initial as f64 / 1e6));
        }
        let p = c.budget?;
        Some(self.budget.tokens(&p))
    }

    /// Counts an attempt that did not succeed in the throttle's window:
    /// `accepted` unless the spec retries its failure. Out of line: the
    /// success path counts in [`succeeded`](Self::succeeded).
    #[inline(never)]
    fn throttled(&self, config: &RetryConfig, accepted: bool) {
        if let Some(p) = &config.throttle {
            self.throttle.record(p, accepted);
        }
    }

    /// A successful attempt: counted as accepted by adaptive throttling,
    /// and returns its share of a budget token.
    #[inline(always)]
    fn succeeded(&self, config: &RetryConfig) {
        if let Some(p) = &config.throttle {
            self.throttle.accept(p);
        }
        self.deposit(config);
    }

    /// A successful call returns its share of a token.
    fn deposit(&self, config: &RetryConfig) {
        if let Some(p) = &config.budget {
            self.budget.deposit(p);
        }
        if let (Some(shared), Some(remote)) = (&config.shared, self.shared.get()) {
            remote.deposit(shared.version, shared.per_success);
        }
    }

    /// Takes a token for a retry from the budget of `config`; `Err` with
    /// why there is none for it: the budget is empty, or its backend is
    /// unavailable and its `on_backend_failure` is `deny`.
    fn withdraw<'r>(
        &'r self,
        config: &RetryConfig,
        cause: Cause,
    ) -> Result<Option<budget::Withdrawal<'r>>, StoppedBy> {
        // A shared bucket's cost is one token (validation keeps it so).
        let cost = config.costs[cause.index()];
        let Some(shared) = &config.shared else {
            return match &config.budget {
                None => Ok(None),
                Some(p) => self
                    .budget
                    .try_withdraw_cost(p, cost)
                    .map(Some)
                    .ok_or(StoppedBy::Budget),
            };
        };
        let answer = match self.shared.get() {
            Some(remote) => remote
                .withdraw(shared.version)
                .map(|granted| granted.then(|| budget::Withdrawal::shared(remote, shared.version))),
            // Never once the registry is built: it checks.
            None => Err(crate::backend::Unavailable),
        };
        match answer {
            Ok(granted) => granted.map(Some).ok_or(StoppedBy::Budget),
            Err(_) => {
                let policy = match shared.on_failure {
                    OnBudgetBackendFailure::Deny => "deny",
                    OnBudgetBackendFailure::Allow => "allow",
                    OnBudgetBackendFailure::Local { .. } => "local",
                };
                if self.telemetry.metrics_on() {
                    self.telemetry
                        .counter(
                            "resilient_retry_budget_backend_unavailable_total",
                            &[("policy", policy)],
                        )
                        .increment(1);
                }
                match (shared.on_failure, &config.budget) {
                    (OnBudgetBackendFailure::Allow, _) => Ok(None),
                    // This process's bucket: empty is empty.
                    (OnBudgetBackendFailure::Local { .. }, Some(p)) => self
                        .budget
                        .try_withdraw_cost(p, cost)
                        .map(Some)
                        .ok_or(StoppedBy::Budget),
                    _ => Err(StoppedBy::BudgetUnavailable),
                }
            }
        }
    }

    /// A call of this spec retries inside a call of the retry `outer`, each
    /// of its own calls making up to `attempts` + 1: counted, and warned of
    /// once per outer spec, when the outer retry can call more than once
    /// (an outer `attempts = 0` multiplies nothing).
    #[cold]
    fn nested(&self, outer: Attempt, settings: &RetrySettings) {
        // The outer spec is in the registry in use while its call runs;
        // were it not, the calls it has made are a floor.
        let (outer_calls, outer_budget) = match crate::registry::lookup(outer.key) {
            Some(retry) => {
                let config = retry.config.get();
                let calls = u64::from(config.settings.attempts).saturating_add(1);
                (calls, config.budget.is_some() || config.shared.is_some())
            }
            None => (outer.previous().saturating_add(1), false),
        };
        if outer_calls <= 1 {
            return;
        }
        let attempts = settings.attempts;
        let t = &self.telemetry;
        let metrics = t.metrics_on();
        let mut seen = self
            .nested
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let at = match seen.iter().position(|n| n.outer == outer.path()) {
            Some(at) => at,
            None => {
                seen.push(Nested {
                    outer: outer.path(),
                    counter: None,
                });
                let inner_calls = u64::from(attempts).saturating_add(1);
                let calls = outer_calls.saturating_mul(inner_calls);
                // Sharing a budget the outer spec has: bounded as asked.
                let bounded = settings.share_outer_budget && outer_budget;
                if t.logging() && !bounded {
                    let (spec, path) = (t.spec, t.path);
                    let (outer_spec, outer_path) = (outer.spec(), outer.path());
                    if settings.share_outer_budget {
                        tracing::warn!(
                            target: "resilient::retry",
                            spec, path, outer_spec, outer_path, outer_calls, inner_calls, calls,
                            "retry `{path}` runs inside retry `{outer_path}` with `share_outer_budget = true`, which has no effect: `{outer_path}` has no `retry_budget`, so up to {outer_calls} × {inner_calls} = {calls} calls of the inner fn per outer call; give `{outer_path}` a `retry_budget`"
                        );
                    } else {
                        tracing::warn!(
                            target: "resilient::retry",
                            spec, path, outer_spec, outer_path, outer_calls, inner_calls, calls,
                            "retry `{path}` runs inside retry `{outer_path}`: up to {outer_calls} × {inner_calls} = {calls} calls of the inner fn per outer call; retry at one level only, or set `share_outer_budget = true` at `{path}` so that the outer retry's budget bounds both"
                        );
                    }
                }
                seen.len() - 1
            }
        };
        if metrics {
            // Registered at the first occurrence, with the recorder then in
            // use (a pair that never happens costs no series).
            seen[at]
                .counter
                .get_or_insert_with(|| {
                    t.counter("resilient_retry_nested_total", &[("outer", outer.path())])
                })
                .increment(1);
        }
    }

    /// A retry will start after a wait; the failure before it is `failure`.
    fn scheduled(&self, wait: Wait, failure: &dyn std::fmt::Display) {
        if let Some(m) = self.meters() {
            m.retries.increment(1);
        }
        let t = &self.telemetry;
        let Wait {
            retry,
            delay,
            from,
            status,
            cause,
        } = wait;
        t.emit(|| Event::RetryScheduled {
            spec: t.spec,
            path: t.path,
            retry,
            delay,
        });
        if t.logging() {
            crate::telemetry::on_caller_span(crate::telemetry::span_fields::RESEND_COUNT, retry);
            crate::telemetry::on_caller_span(crate::telemetry::span_fields::RETRIES, retry);
            let (spec, path, wait_from, said) = (t.spec, t.path, from.label(), from.said());
            let cause = cause.map(Cause::label);
            tracing::info!(
                target: "resilient::retry",
                spec, path, retry, ?delay, wait_from, status, cause, %failure,
                "call failed ({failure}); retry {retry} after {delay:?}{said}"
            );
        }
    }

    /// Retry gave up after `calls` calls, because of `by`; `cause` is the
    /// last failure, `status` its status if it is a failed value that has one.
    fn stopped(
        &self,
        calls: u64,
        by: StoppedBy,
        cause: &dyn std::fmt::Display,
        status: Option<u16>,
    ) {
        self.gave_up(calls, by);
        let t = &self.telemetry;
        if t.logging() {
            let (spec, path) = (t.spec, t.path);
            tracing::warn!(
                target: "resilient::retry",
                spec, path, calls, reason = by.label(), status, %cause,
                "retry gave up after {calls} call(s), {by}: {cause}"
            );
        }
    }

    /// Counts and publishes a call that retry ended after `calls` calls,
    /// because of `by`.
    fn gave_up(&self, calls: u64, by: StoppedBy) {
        if let Some(m) = self.meters() {
            m.exhausted[by as usize].increment(1, || self.exhausted_counter(by));
        }
        let t = &self.telemetry;
        t.emit(|| Event::RetryExhausted {
            spec: t.spec,
            path: t.path,
            calls,
            reason: by,
        });
    }

    /// Adaptive throttling refused a call's first attempt (`first_calls`):
    /// counted as a retry's refusals are, with no call made.
    fn refused_first(&self, error: &Error) {
        let by = StoppedBy::ThrottledFirstCall;
        self.gave_up(0, by);
        let t = &self.telemetry;
        if t.logging() {
            let (spec, path) = (t.spec, t.path);
            tracing::warn!(
                target: "resilient::retry",
                spec, path, calls = 0u64, reason = by.label(),
                "{error}"
            );
        }
    }
}

/// Access to a retry spec's shared instance; cheap to clone.
///
/// # Example
///
/// ```
/// use resilient_core::prelude::*;
/// use resilient_core::Registry;
///
/// #[derive(RetrySpec)]
/// #[spec("resilient.retry.pet")]
/// pub struct PetRetry;
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
/// #         "[resilient.retry.pet]\ndelay = \"1ms\"\nattempts = 2",
/// #         config::FileFormat::Toml,
/// #     ))
/// #     .build()?;
/// # let registry = resilient_config::build(Registry::builder().spec::<PetRetry>(), &settings)?;
/// # let _guard = registry.set_default();
/// let retry = PetRetry::get()?; // the spec's shared instance, as the attribute uses it
/// let mut calls = 0;
/// let found: Result<u32, PetError> = retry
///     .call(|| {
///         calls += 1;
///         let n = calls;
///         async move { if n < 3 { Err(PetError::Down) } else { Ok(n) } }
///     })
///     .await;
/// assert_eq!(found?, 3); // two failures, then the second retry succeeds
/// assert_eq!(retry.settings().attempts, 2);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct RetryHandle<S> {
    inner: Shared<Retry>,
    _spec: PhantomData<fn() -> S>,
}

impl<S> Clone for RetryHandle<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            _spec: PhantomData,
        }
    }
}

impl<S: RetrySpec> RetryHandle<S> {
    /// The spec's validated settings, as running now.
    pub fn settings(&self) -> &RetrySettings {
        Mechanism::settings(&*self.inner)
    }

    /// Tokens now in the spec's retry budget; `None` when it has none. A
    /// budget kept in Redis (`retry_budget.backend = "redis"`) shows what
    /// Redis held after this process's last decision on the bucket of the
    /// settings in force (`tokens_initial` until it decides on it).
    pub fn budget_tokens(&self) -> Option<f64> {
        self.inner.budget_tokens()
    }

    /// The attempts adaptive throttling counts in its trailing window now,
    /// and the probability it refuses the next retry; `None` when the
    /// spec has no `throttle` table.
    pub fn throttle_counts(&self) -> Option<ThrottleCounts> {
        let config = self.inner.config.get();
        let p = config.throttle.as_ref()?;
        let counts = self.inner.throttle.counts(p);
        Some(ThrottleCounts {
            requests: counts.requests,
            accepts: counts.accepts,
            refusal: counts.refusal(p.k),
        })
    }

    /// Calls `f` and awaits its future, again after each failure, as the
    /// spec's settings say (see the [module docs](self)).
    pub fn call<T, E, F, Fut>(
        &self,
        mut f: F,
    ) -> impl Future<Output = Result<T, E>> + use<'_, S, T, E, F, Fut>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        S::Classifier: Classify<T, E>,
        E: From<Error> + Exhaustion<S::Exhausted>,
    {
        crate::outcome::lowered(run(
            ops::<S, T, E>().judged_by(By::<S::Classifier>::new()),
            Some(CallInstance::Borrowed(&self.inner)),
            move || crate::outcome::lifted(f()),
        ))
    }
}

/// What retry needs to know of one spec and one result type, resolved where
/// the types are known: the generated code builds it in one place (where a
/// missing bound is reported once) and hands it to a loop that needs no bound.
///
/// `J` judges an outcome ([`Judge`]): [`Unjudged`] until the spec's
/// classification is attached, where its bound is checked.
#[doc(hidden)]
#[derive(Debug)]
pub struct RetryOps<T, E, Tr, J = Unjudged> {
    pub(crate) key: &'static Key<Retry>,
    judge: J,
    /// Asked for only once an attempt failed: a call's future holds one
    /// word of them, and a call that starts stores one word, not four.
    fns: fn() -> RetryFns<T, E, Tr>,
}

/// What a retry does with the failures of spec and result type it was built
/// for: needed only once an attempt failed.
struct RetryFns<T, E, Tr> {
    keep_value: exhausted::KeepValue<T>,
    keep: fn(&mut Tr, &'static str, Result<T, Fail<E>>),
    give_up: GiveUp<T, E, Tr>,
    last_kept: exhausted::LastKept<Tr>,
}

/// The [`RetryOps`] of spec `S` for `Result<T, E>`.
#[doc(hidden)]
pub type OpsOf<S, T, E> = RetryOps<T, E, <E as Exhaustion<<S as RetrySpec>::Exhausted>>::Trail>;

/// Retry operations whose classification is not attached yet.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct Unjudged;

/// How a retry judges an attempt's outcome: the verdict of the spec's
/// classification, and the status it names a failed value by in a log line.
#[doc(hidden)]
pub trait Judge<T, E> {
    /// How `outcome` counts.
    fn verdict(&self, outcome: &Result<T, E>) -> Verdict;
    /// The status of a value the verdict called a failure, if it has one.
    fn status(&self, value: &T) -> Option<u16>;

    /// The resilience error a body's error carries, if it is one raised by
    /// a layer inside: a tower layer's inner service returns it in its own
    /// error type, where a chain of attributes keeps it apart.
    #[inline(always)]
    fn inside<'e>(&self, error: &'e E) -> Option<&'e Error> {
        let _ = error;
        None
    }

    /// Why `outcome`, a failure, failed.
    fn cause(&self, outcome: &Result<T, E>) -> Cause {
        let _ = outcome;
        Cause::Transient
    }
}

/// The classification of `K`, as a retry judges by it: no state, and each
/// call a direct call of `K`'s [`Classify`] impl.
#[doc(hidden)]
pub struct By<K>(PhantomData<fn() -> K>);

impl<K> By<K> {
    #[inline(always)]
    pub(crate) const fn new() -> Self {
        By(PhantomData)
    }
}

impl<K> Clone for By<K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K> Copy for By<K> {}

impl<K: Classify<T, E>, T, E> Judge<T, E> for By<K> {
    #[inline(always)]
    fn verdict(&self, outcome: &Result<T, E>) -> Verdict {
        K::classify(outcome)
    }

    fn status(&self, value: &T) -> Option<u16> {
        K::status(value)
    }

    fn cause(&self, outcome: &Result<T, E>) -> Cause {
        K::cause(outcome)
    }
}

type GiveUp<T, E, Tr> =
    fn(Tr, &'static str, u64, GaveUp, Result<T, Fail<E>>, exhausted::Kept<T>) -> Result<T, Fail<E>>;

/// The operations of spec `S` for `Result<T, E>`, its classification not
/// attached (see [`RetryOps::judged_by`]).
pub(crate) fn ops<S, T, E>() -> OpsOf<S, T, E>
where
    S: RetrySpec,
    S::Classifier: Classify<T, E>,
    E: Exhaustion<S::Exhausted>,
{
    RetryOps {
        // A constant: a call's future holds one word of it.
        key: const { &Key::of::<S>() },
        judge: Unjudged,
        fns: fns::<S, T, E>,
    }
}

/// The failure operations of spec `S` for `Result<T, E>`.
fn fns<S, T, E>() -> RetryFns<T, E, <E as Exhaustion<S::Exhausted>>::Trail>
where
    S: RetrySpec,
    S::Classifier: Classify<T, E>,
    E: Exhaustion<S::Exhausted>,
{
    RetryFns {
        keep_value: <S::Classifier as Classify<T, E>>::keep_failed_value,
        keep: <E as Exhaustion<S::Exhausted>>::keep::<T>,
        give_up: <E as Exhaustion<S::Exhausted>>::give_up::<T>,
        last_kept: <E as Exhaustion<S::Exhausted>>::last_kept,
    }
}

impl<T, E, Tr> RetryOps<T, E, Tr> {
    /// The same operations, judging outcomes with `judge`.
    #[inline(always)]
    pub(crate) fn judged_by<J: Judge<T, E>>(self, judge: J) -> RetryOps<T, E, Tr, J> {
        RetryOps {
            key: self.key,
            judge,
            fns: self.fns,
        }
    }
}

/// How retry treats a resilience error raised by a layer inside it. The
/// rejections that know when a call could pass say so as a delay hint.
fn on_resilience(settings: &RetrySettings, error: &Error) -> Verdict {
    match error {
        // An open breaker inside: retrying would hammer it, unless the spec
        // asks for it; then the wait is the rest of the open period.
        Error::CallNotPermitted { retry_after, .. } if settings.retry_call_not_permitted => {
            retry_after.map_or(Verdict::Failure, Verdict::RetryAfter)
        }
        Error::CallNotPermitted { .. } => Verdict::Ignore,
        // Nothing to retry: the spec has no settings.
        Error::NotConfigured { .. } => Verdict::Ignore,
        // A retry inside gave up, or an attempt timed out: try again.
        Error::RetryExhausted(_) | Error::Timeout { .. } => Verdict::Failure,
        // An injected fault stands for the dependency failing: retried.
        Error::Injected { .. } => Verdict::Failure,
        // The rate limiter knows when its next permit is free.
        Error::RateLimitExceeded { retry_after, .. } => Verdict::RetryAfter(*retry_after),
        // A place may be free after the wait.
        Error::ConcurrencyLimitReached { .. } => Verdict::Failure,
        // A shared limit's backend may answer after the wait.
        Error::BackendUnavailable { .. } => Verdict::Failure,
        // A retry inside refused its first attempt: its dependency is
        // failing, and a retry now would only add to the load.
        Error::Throttled { .. } => Verdict::Ignore,
    }
}

/// The cause of a resilience error raised by a layer inside a retry.
fn resilience_cause(error: &Error) -> Cause {
    match error {
        Error::Timeout { .. } => Cause::Timeout,
        Error::RateLimitExceeded { .. } => Cause::Throttled,
        _ => Cause::Transient,
    }
}

/// One call under a retry spec, one attempt at a time, under the settings it
/// started with: what the generated code drives in a loop of its own (the
/// attempts then live in the fn's own future, with no future per layer), and
/// what [`run`] drives for a handle.
#[doc(hidden)]
pub struct RetryCall<'a, T, E, Tr, J> {
    ops: RetryOps<T, E, Tr, J>,
    /// `None` when the spec has no settings, or adaptive throttling refused
    /// the first attempt: the call fails at once.
    retry: Option<CallInstance<'a, Retry>>,
    /// The settings read when the call started (their tag says what the
    /// success path needs of them).
    config: Pinned<RetryConfig>,
    /// Made at the first failure: a call that succeeds at once builds and
    /// drops nothing.
    trail: Option<Tr>,
    /// Calls made. With `retry` let go at adaptive throttling's refusal
    /// of the first attempt, the counts of that refusal instead
    /// ([`Refusal`]): kept where the success path stores nothing new.
    // u64: with `attempts = u32::MAX` the count must still pass it.
    calls: u64,
    started: Option<Instant>,
    /// When the call started, while it is timed and has no outcome yet.
    timed: Option<Instant>,
}

/// What comes after an attempt.
#[doc(hidden)]
pub enum Step<T, E, W> {
    /// The call's outcome: no further attempt.
    Done(Result<T, Fail<E>>),
    /// Wait, then make the next attempt.
    Wait(W),
}

/// The wait before a retry; holds the budget's token, which a call dropped
/// during the wait gives back.
#[doc(hidden)]
pub struct RetryWait<'a> {
    delay: Duration,
    withdrawal: Option<budget::Withdrawal<'a>>,
}

impl RetryWait<'_> {
    /// Sleeps for the delay, then spends the token: the retry starts.
    pub async fn wait(self) {
        tokio::time::sleep(self.delay).await;
        self.spend();
    }

    /// As [`wait`](Self::wait), blocking the thread (a blocking fn's
    /// retry; see [`crate::blocking`]).
    pub fn wait_blocking(self) {
        crate::blocking::sleep(self.delay);
        self.spend();
    }

    fn spend(self) {
        if let Some(w) = self.withdrawal {
            w.spend();
        }
    }

    /// The wait as plain data: its delay, and its budget token if it holds
    /// one (given back by [`RetryCall::give_back`]).
    pub(crate) fn into_parts(self) -> (Duration, Option<budget::Token>) {
        (
            self.delay,
            self.withdrawal.map(budget::Withdrawal::into_token),
        )
    }
}

impl<'a, T, E, Tr: Default, J> RetryCall<'a, T, E, Tr, J>
where
    J: Judge<T, E>,
{
    /// A call of `ops` through `retry` (`None`: the spec has no settings in
    /// the registry in use, and [`refused`](Self::refused) says so). Its
    /// settings are read now, and kept until it ends.
    #[inline(always)]
    pub(crate) fn start(
        ops: RetryOps<T, E, Tr, J>,
        retry: Option<CallInstance<'a, Retry>>,
    ) -> Self {
        let (config, timed) = match retry.as_deref() {
            Some(r) => {
                let config = r.config.pin();
                let timed = if config.tag() & ENABLED != 0 {
                    r.telemetry.start()
                } else {
                    None
                };
                (config, timed)
            }
            None => (Pinned::NONE, None),
        };
        let tag = config.tag();
        // Set only on an enabled spec: one test for both. Out of line, and
        // building the call itself: the call is built in place, where a
        // call passed to a fn by reference would be built, then moved.
        if tag & (TIMED_OUT | FIRST_CALLS) != 0 {
            return Self::begin(ops, retry, config, timed, tag);
        }
        Self {
            ops,
            retry,
            config,
            trail: None,
            calls: 0,
            started: None,
            timed,
        }
    }

    /// A call that starts with more than its settings: the clock, for an
    /// overall `timeout`; adaptive throttling's decision on the first
    /// attempt, with `first_calls`. A refusal is told now and lets the
    /// instance go, so that [`refused`](Self::refused) says so.
    #[cold]
    #[inline(never)]
    fn begin(
        ops: RetryOps<T, E, Tr, J>,
        mut retry: Option<CallInstance<'a, Retry>>,
        config: Pinned<RetryConfig>,
        mut timed: Option<Instant>,
        tag: usize,
    ) -> Self {
        let started = (tag & TIMED_OUT != 0).then(Instant::now);
        let mut calls = 0;
        if let (true, Some(r)) = (tag & FIRST_CALLS != 0, retry.as_deref()) {
            let throttle = config.get(&r.config).throttle.as_ref();
            if let Some(Err(refused)) = throttle.map(|p| r.throttle.first_call(p, fastrand::f64)) {
                let refusal = Refusal::of(refused.counts);
                r.refused_first(&refusal.error(ops.key));
                Self::ended(&mut timed, r, Outcome::Rejected);
                calls = refusal.0;
            }
        }
        if calls != 0 {
            retry = None;
        }
        Self {
            ops,
            retry,
            config,
            trail: None,
            calls,
            started,
            timed,
        }
    }

    /// The error that ends the call before any attempt: the spec has no
    /// settings, or adaptive throttling refused the first attempt.
    #[inline(always)]
    pub fn refused(&self) -> Option<Fail<E>> {
        match self.retry {
            Some(_) => None,
            None => Some(Fail::Resilience(self.refusal())),
        }
    }

    /// The error of a call with no instance: no settings, or (with a
    /// refusal's counts in `calls`) adaptive throttling's refusal.
    #[cold]
    fn refusal(&self) -> Error {
        match self.calls {
            0 => self.ops.key.not_configured(),
            counts => Refusal(counts).error(self.ops.key),
        }
    }

    /// Counts how the call ended; its drop then counts nothing.
    fn ended(timed: &mut Option<Instant>, retry: &Retry, outcome: Outcome) {
        retry
            .telemetry
            .ended(outcome, timed.take().map(|at| at.elapsed()));
    }

    /// The call ends now, `outcome`, without a retry: a tower service
    /// whose `poll_ready` failed (a failure; it must not be called again),
    /// or a request a retry middleware could not send again (rejected).
    #[cfg(feature = "tower")]
    pub(crate) fn ended_now(&mut self, outcome: Outcome) {
        if let Some(retry) = self.retry.as_deref() {
            Self::ended(&mut self.timed, retry, outcome);
        }
    }

    /// Whether a failure could be retried under the settings the call
    /// started with: the spec is enabled and allows a retry.
    #[cfg(feature = "tower")]
    pub(crate) fn may_retry(&self) -> bool {
        let Some(retry) = self.retry.as_deref() else {
            return false;
        };
        if self.config.tag() & ENABLED == 0 {
            return false;
        }
        self.config.get(&retry.config).settings.attempts > 0
    }

    /// An attempt that ended with no value and no failure (a stream that
    /// ended before its first item): a success.
    pub(crate) fn succeeded_empty(&mut self) {
        let Some(retry) = self.retry.as_deref() else {
            return;
        };
        let tag = self.config.tag();
        if tag & ENABLED == 0 {
            return;
        }
        let config = self.config.get(&retry.config);
        self.calls += 1;
        if tag & COUNTED != 0 {
            retry.succeeded(config);
        }
        Self::ended(&mut self.timed, retry, Outcome::Success);
    }

    /// Judges the outcome of an attempt: the call's result, or the wait
    /// before the next attempt.
    #[inline(always)]
    pub fn step(&mut self, attempt: Result<T, Fail<E>>) -> Step<T, E, RetryWait<'_>> {
        let Some(retry) = self.retry.as_deref() else {
            return Step::Done(attempt);
        };
        let tag = self.config.tag();
        if tag & ENABLED == 0 {
            return Step::Done(attempt);
        }
        let config = self.config.get(&retry.config);
        let judge = &self.ops.judge;
        let (outcome, verdict) = outcome::classify(
            attempt,
            |r| match r.as_ref().err().and_then(|e| judge.inside(e)) {
                Some(inside) => on_resilience(&config.settings, inside),
                None => judge.verdict(r),
            },
            |e| on_resilience(&config.settings, e),
        );
        self.calls += 1;
        let calls = self.calls;
        let hint = match verdict {
            Verdict::Success => {
                if tag & COUNTED != 0 {
                    retry.succeeded(config);
                }
                Self::ended(&mut self.timed, retry, Outcome::Success);
                return Step::Done(outcome);
            }
            Verdict::Ignore => {
                // A failure the spec does not retry was no refusal of the
                // dependency's: accepted, as a success is.
                retry.throttled(config, true);
                Self::ended(&mut self.timed, retry, Outcome::Ignored);
                return Step::Done(outcome);
            }
            Verdict::Fatal => {
                // A failure no attempt may follow: refused by the dependency
                // (for the throttle), and returned as is.
                retry.throttled(config, false);
                Self::ended(&mut self.timed, retry, Outcome::Failure);
                return Step::Done(outcome);
            }
            Verdict::Failure => None,
            Verdict::RetryAfter(hint) => Some(hint),
        };
        retry.throttled(config, false);
        self.failed(outcome, hint, calls)
    }

    /// An attempt failed: give up, or schedule the next one.
    #[inline(never)]
    fn failed(
        &mut self,
        outcome: Result<T, Fail<E>>,
        hint: Option<Duration>,
        calls: u64,
    ) -> Step<T, E, RetryWait<'_>> {
        let Some(retry) = self.retry.as_deref() else {
            return Step::Done(outcome);
        };
        let config = self.config.get(&retry.config);
        let (s, ops) = (&config.settings, &self.ops);
        let spec = ops.key.name;
        // Asked only of a spec that waits or pays by cause.
        let (outcome, cause) = if config.causes {
            outcome::classify(
                outcome,
                |r| match r.as_ref().err().and_then(|e| ops.judge.inside(e)) {
                    Some(inside) => resilience_cause(inside),
                    None => ops.judge.cause(r),
                },
                resilience_cause,
            )
        } else {
            (outcome, Cause::Transient)
        };
        let status = match &outcome {
            Ok(value) => ops.judge.status(value),
            Err(_) => None,
        };
        if s.attempts == 0 {
            Self::ended(&mut self.timed, retry, Outcome::Failure);
            return Step::Done(outcome);
        }
        // `calls` is also the number of the retry that would come next.
        if calls > u64::from(s.attempts) {
            let trail = self.trail.take().unwrap_or_default();
            let fns = (ops.fns)();
            let kept = exhausted::Kept::new(fns.keep_value, status);
            let out = (fns.give_up)(trail, spec, calls, GaveUp::Attempts, outcome, kept);
            stopped(retry, calls, StoppedBy::Attempts, &out, status);
            Self::ended(&mut self.timed, retry, Outcome::Failure);
            return Step::Done(out);
        }
        let delay = match hint {
            Some(hint) => s.hinted_delay(hint),
            None => {
                let retry_number = u32::try_from(calls).unwrap_or(u32::MAX);
                s.cause_delay_jittered(cause, retry_number, |bound| fastrand::u128(0..=bound))
            }
        };
        if let (Some(limit), Some(started)) = (s.timeout, self.started) {
            if started.elapsed().saturating_add(delay) > limit {
                let trail = self.trail.take().unwrap_or_default();
                let fns = (ops.fns)();
                let kept = exhausted::Kept::new(fns.keep_value, status);
                let out = (fns.give_up)(trail, spec, calls, GaveUp::Timeout, outcome, kept);
                stopped(retry, calls, StoppedBy::Timeout, &out, status);
                Self::ended(&mut self.timed, retry, Outcome::Failure);
                return Step::Done(out);
            }
        }
        // Before the budget: a refused retry spends no token.
        if let Some(p) = &config.throttle {
            if !retry.throttle.admits(p, fastrand::f64) {
                stopped(retry, calls, StoppedBy::Throttled, &outcome, status);
                Self::ended(&mut self.timed, retry, Outcome::Failure);
                return Step::Done(outcome);
            }
        }
        // Held across the wait: a call dropped before its retry starts gives
        // the token back. A token of an outer spec's budget is spent at
        // once.
        let outer = if s.share_outer_budget {
            context::marked().and_then(|outer| withdraw_outer(outer, cause))
        } else {
            None
        };
        let withdrawal = match outer.unwrap_or_else(|| retry.withdraw(config, cause)) {
            Ok(withdrawal) => withdrawal,
            Err(by) => {
                stopped(retry, calls, by, &outcome, status);
                Self::ended(&mut self.timed, retry, Outcome::Failure);
                return Step::Done(outcome);
            }
        };
        let wait = Wait {
            retry: calls,
            delay,
            from: WaitFrom::of(hint.is_some(), &outcome),
            status,
            cause: config.causes.then_some(cause),
        };
        if calls == 1 {
            // This call's first retry: is it a retry inside another's call?
            if let Some(outer) = context::marked() {
                retry.nested(outer, s);
            }
        }
        let trail = self.trail.get_or_insert_with(Tr::default);
        keep(ops, retry, trail, wait, outcome);
        Step::Wait(RetryWait { delay, withdrawal })
    }
}

/// A token for a retry made inside a call of the retry `outer`, taken from
/// `outer`'s budget (`share_outer_budget`); `None` when the outer spec has
/// no budget (nor a registry in use holding it), and the retry's own
/// budget applies. The token is spent: a call dropped during its wait does
/// not give it back.
#[cold]
fn withdraw_outer<'r>(
    outer: Attempt,
    cause: Cause,
) -> Option<Result<Option<budget::Withdrawal<'r>>, StoppedBy>> {
    let retry = crate::registry::lookup(outer.key)?;
    let config = retry.config.get();
    if config.budget.is_none() && config.shared.is_none() {
        return None;
    }
    Some(retry.withdraw(config, cause).map(|taken| {
        // Spent now: the outer instance is not held across the wait.
        let _ = taken.map(budget::Withdrawal::into_token);
        None
    }))
}

impl<T, E, Tr, J> RetryCall<'_, T, E, Tr, J> {
    /// The attempt the next call of the body makes: its spec and the
    /// attempts before it (`0` for the first call).
    #[inline(always)]
    pub fn attempt(&self) -> Attempt {
        Attempt {
            key: self.ops.key,
            previous: self.calls,
        }
    }

    /// Returns a budget token taken for a retry that will not start (see
    /// [`RetryWait::into_parts`]).
    pub(crate) fn give_back(&self, token: budget::Token) {
        let Some(retry) = self.retry.as_deref() else {
            return;
        };
        match token {
            budget::Token::Local { max, amount } => retry.budget.give_back(max, amount),
            budget::Token::Shared(version) => {
                if let Some(shared) = retry.shared.get() {
                    shared.deposit(version, budget::SCALE);
                }
            }
        }
    }
}

impl<T, E, Tr, J> Drop for RetryCall<'_, T, E, Tr, J> {
    #[inline]
    fn drop(&mut self) {
        // Still timed: dropped before its outcome (a timeout outside, a
        // caller gone, a panic).
        if let (Some(at), Some(retry)) = (self.timed.take(), self.retry.as_deref()) {
            retry
                .telemetry
                .ended(Outcome::Cancelled, Some(at.elapsed()));
        }
    }
}

/// The counts of adaptive throttling's window that refused a first
/// attempt, in one word: requests in the high half, accepts in the low.
/// Never 0: a refusal needs a request in the window.
#[derive(Debug, Clone, Copy)]
struct Refusal(u64);

impl Refusal {
    fn of(counts: throttle::Counts) -> Self {
        // A window's counts stay below 2^26: exact in 32 bits.
        let requests = u32::try_from(counts.requests).unwrap_or(u32::MAX).max(1);
        let accepts = u32::try_from(counts.accepts).unwrap_or(u32::MAX);
        Refusal((u64::from(requests) << 32) | u64::from(accepts))
    }

    /// The error of the refusal, by spec `key`.
    fn error(self, key: &Key<Retry>) -> Error {
        Error::Throttled {
            spec: key.name,
            requests: (self.0 >> 32) as u32,
            accepts: self.0 as u32,
        }
    }
}

/// One call through `retry`, calling `f` for each attempt.
pub(crate) async fn run<T, E, Tr, J, F, Fut>(
    ops: RetryOps<T, E, Tr, J>,
    instance: Option<CallInstance<'_, Retry>>,
    mut f: F,
) -> Result<T, Fail<E>>
where
    Tr: Default,
    J: Judge<T, E>,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Fail<E>>>,
{
    let mut call = RetryCall::start(ops, instance);
    if let Some(refused) = call.refused() {
        return Err(refused);
    }
    loop {
        // The match ends before the wait, as in the generated code.
        let wait = match call.step(InAttempt::new(call.attempt(), f()).await) {
            Step::Done(out) => return out,
            Step::Wait(w) => w,
        };
        wait.wait().await;
    }
}

/// Keeps a failure that will be retried, and tells the telemetry, showing
/// the failure as kept when the mode keeps failures.
fn keep<T, E, Tr, J>(
    ops: &RetryOps<T, E, Tr, J>,
    retry: &Retry,
    trail: &mut Tr,
    wait: Wait,
    outcome: Result<T, Fail<E>>,
) {
    // A resilience error or a failed value can be shown as it is; the body's
    // own error only once kept (boxed as an error), since it need not
    // implement `Display`.
    if !matches!(outcome, Err(Fail::Body(_))) || !retry.telemetry.logging() {
        retry.scheduled(wait, &Shown::of(&outcome, wait.status));
        ((ops.fns)().keep)(trail, ops.key.name, outcome);
        return;
    }
    let fns = (ops.fns)();
    (fns.keep)(trail, ops.key.name, outcome);
    match (fns.last_kept)(trail) {
        Some(kept) => retry.scheduled(wait, &kept),
        None => retry.scheduled(wait, &Shown::Body(std::any::type_name::<E>())),
    }
}

/// Tells the telemetry that retry stopped; `out` is what the call returns,
/// `status` the last failed value's, if it has one.
fn stopped<T, E>(
    retry: &Retry,
    calls: u64,
    by: StoppedBy,
    out: &Result<T, Fail<E>>,
    status: Option<u16>,
) {
    match out {
        // The cause is the last failure the error keeps.
        Err(Fail::Resilience(Error::RetryExhausted(ex))) => {
            retry.stopped(calls, by, &ex.last, status);
        }
        out => retry.stopped(calls, by, &Shown::of(out, status), status),
    }
}

/// A failure as a log line shows it.
enum Shown<'a> {
    Error(&'a Error),
    Value(Option<u16>),
    Body(&'static str),
}

impl<'a> Shown<'a> {
    fn of<T, E>(outcome: &'a Result<T, Fail<E>>, status: Option<u16>) -> Self {
        match outcome {
            Ok(_) => Shown::Value(status),
            Err(Fail::Resilience(e)) => Shown::Error(e),
            Err(Fail::Body(_)) => Shown::Body(std::any::type_name::<E>()),
        }
    }
}

impl std::fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Shown::Error(e) => e.fmt(f),
            Shown::Value(None) => f.write_str("a returned value the spec classifies as a failure"),
            Shown::Value(Some(status)) => write!(
                f,
                "a returned value with status {status}, which the spec classifies as a failure"
            ),
            Shown::Body(ty) => write!(f, "an error of type `{ty}`"),
        }
    }
}

/// A retry about to wait: which one, how long, why that long, the status
/// of the failure before it, if it has one, and its cause, if the spec
/// waits or pays by cause.
#[derive(Debug, Clone, Copy)]
struct Wait {
    retry: u64,
    delay: Duration,
    from: WaitFrom,
    status: Option<u16>,
    cause: Option<Cause>,
}

/// Where the length of a retry's wait came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WaitFrom {
    /// The spec's computed delay (`delay`, `delay_step`, `backoff`, jitter).
    Backoff,
    /// A delay hint from the classification (`Retry-After` with
    /// `classify = http`).
    RetryAfter,
    /// A rate limiter inside: the time until its next permit.
    RateLimiter,
    /// An open breaker inside: the rest of its open wait.
    CircuitBreaker,
}

impl WaitFrom {
    /// The source of a wait for `failure`, which asked for one if `hinted`.
    fn of<T, E>(hinted: bool, failure: &Result<T, Fail<E>>) -> Self {
        match failure {
            _ if !hinted => WaitFrom::Backoff,
            Err(Fail::Resilience(Error::RateLimitExceeded { .. })) => WaitFrom::RateLimiter,
            Err(Fail::Resilience(Error::CallNotPermitted { .. })) => WaitFrom::CircuitBreaker,
            _ => WaitFrom::RetryAfter,
        }
    }

    /// The log field's value.
    fn label(self) -> &'static str {
        match self {
            WaitFrom::Backoff => "backoff",
            WaitFrom::RetryAfter => "retry_after",
            WaitFrom::RateLimiter => "rate_limiter",
            WaitFrom::CircuitBreaker => "circuit_breaker",
        }
    }

    /// How a log line's message says it.
    fn said(self) -> &'static str {
        match self {
            WaitFrom::Backoff => "",
            WaitFrom::RetryAfter => ", the wait the failure asked for (Retry-After)",
            WaitFrom::RateLimiter => ", until the rate limiter's next permit",
            WaitFrom::CircuitBreaker => ", until the open breaker's wait ends",
        }
    }
}
