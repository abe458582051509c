//! Circuit breaker: stop calling a dependency that keeps failing, and let a
//! few probes through after a wait to find out whether it has recovered.
//!
//! A circuit breaker spec is a unit struct with `#[derive(CircuitBreakerSpec)]`
//! and the absolute path of its settings (see [`CircuitBreakerSettings`]):
//!
//! ```
//! use resilient_core::CircuitBreakerSpec;
//!
//! #[derive(CircuitBreakerSpec)]
//! #[spec("resilient.circuitbreaker.pet")]
//! pub struct PetBreaker;
//! ```
//!
//! ```toml
//! [resilient.circuitbreaker.pet]
//! failure_rate_threshold = 50
//! minimum_required_calls = 10
//! wait_duration_in_open_state = "25s"
//! permitted_calls_in_half_open_state = 3
//! count_based = { window_size = 100 }
//! ```
//!
//! # States
//!
//! - **Closed**: calls go through and their outcomes are counted in the
//!   window. The breaker opens when a failure (or slow call) is recorded, the
//!   window holds at least `minimum_required_calls`, and the failure rate (or
//!   slow-call rate) is at least its threshold.
//! - **Open**: every call is rejected with [`Error::CallNotPermitted`] without
//!   running the body. The first call once `wait_duration_in_open_state` has
//!   passed moves the breaker to half-open and is its first probe.
//! - **Half-open**: at most `permitted_calls_in_half_open_state` probes run.
//!   The breaker closes when the last of them succeeds and opens again on any
//!   failed (or slow) probe. With `max_wait_in_half_open`, probes that never
//!   finish cannot keep it half-open forever. A permit counts only in the
//!   period it was taken in: a call that started before the breaker opened,
//!   or before a [`reset`](CircuitBreakerHandle::reset), changes nothing when
//!   it ends.
//!
//! A breaker outside a retry counts the retry's exhaustion
//! ([`Error::RetryExhausted`]) as one failure, whatever the last error was:
//! the errors that count are the ones the retry spec retries.
//!
//! An outcome the spec's [`Classify`] marks [`Verdict::Ignore`] changes
//! nothing, and in half-open gives its probe's place back. A call whose future
//! is dropped before it ends (cancelled, timed out outside the breaker, or
//! panicking) releases its permit and counts as neither success nor failure:
//! the [`Permit`] is a guard.
//!
//! # Windows
//!
//! | `type` | counts | guarantee, from any mix of threads |
//! |---|---|---|
//! | `ring_buffer` (default) | the last `window_size` calls | exact: a call stays until `window_size` newer calls were recorded |
//! | `striped_approx` | `stripes` rings of `window_size / stripes` calls | a call stays until at least `⌊window_size / stripes⌋` newer calls were recorded (exactly `window_size` for a single caller); threads mostly write stripes of their own |
//! | `fixed_window` | tumbling windows of `window_size` calls | counts restart when the window is full; a success that fills it is not judged |
//! | `time_based` | the calls of the last `window_duration` | reads the clock for every call |
//!
//! Only a failed or slow call is judged: a success never opens the breaker.
//! No window takes a lock or allocates when it records a call; the
//! count-based ones read no clock unless `slow_call` is set, and the slot
//! windows write nothing for a success into a full window (or stripe) of
//! successes. A transition
//! clears no slot: each carries its closed period's tag.
//!
//! # Imperative use
//!
//! ```
//! # use resilient_core::CircuitBreakerSpec;
//! # #[derive(CircuitBreakerSpec)] #[spec("resilient.circuitbreaker.pet")] pub struct PetBreaker;
//! # fn demo() -> Result<(), resilient_core::Error> {
//! let breaker = PetBreaker::get()?;
//! match breaker.try_acquire() {
//!     Some(permit) => {
//!         // ... call the dependency ...
//!         permit.success();
//!     }
//!     None => { /* rejected: serve something else */ }
//! }
//! # Ok(()) }
//! ```

mod breaker;
mod operate;
mod settings;
mod window;

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

pub use crate::error::State;
pub use crate::telemetry::Action;
pub use breaker::Breaker;
pub use operate::{OperateError, Operated};
pub use settings::{CircuitBreakerSettings, SlowCall, WindowSettings};
pub use window::Counts;

use breaker::{End, Taken};

use crate::error::Error;
use crate::keyed::PartitionKey;
use crate::outcome::{self, Fail};
use crate::registry::{CallInstance, Key, KeyShare, Mechanism, Part, Sealed, Shared, Spec};
use crate::settings::Section;
use crate::spec::{Classify, SpecKind, Verdict};
use crate::telemetry::{Outcome, Telemetry};

impl SpecKind {
    /// `#[derive(CircuitBreakerSpec)]`, used by `#[circuit_breakable]`.
    pub const CIRCUIT_BREAKER: SpecKind = SpecKind::new("circuit_breaker", "circuit breaker");
}

impl Sealed for Breaker {}

impl Mechanism for Breaker {
    const KIND: SpecKind = SpecKind::CIRCUIT_BREAKER;
    const OUTCOMES: &'static [Outcome] = &[
        Outcome::Success,
        Outcome::Failure,
        Outcome::Ignored,
        Outcome::Rejected,
        Outcome::Cancelled,
    ];
    type Settings = CircuitBreakerSettings;

    fn read(section: &mut Section<'_>) -> Option<CircuitBreakerSettings> {
        CircuitBreakerSettings::read(section)
    }

    fn build(settings: CircuitBreakerSettings, telemetry: Telemetry) -> Self {
        Breaker::new(settings, telemetry)
    }

    fn reconfigure(&self, settings: CircuitBreakerSettings) -> Vec<String> {
        Breaker::reconfigure(self, settings)
    }

    fn settings(&self) -> &CircuitBreakerSettings {
        Breaker::settings(self)
    }

    fn telemetry(&self) -> &Telemetry {
        &self.telemetry
    }

    fn status(&self) -> Option<Arc<dyn Part>> {
        Some(Arc::new(self.metrics()))
    }

    fn telemetry_switched(&self) {
        self.register_meters();
    }

    const KEYED: bool = true;
    const EJECTS: bool = true;

    fn evictable(&self) -> bool {
        Breaker::evictable(self)
    }

    const READINESS: bool = true;

    fn unhealthy(&self) -> Option<&'static str> {
        // A disabled breaker lets every call through: healthy.
        match self.state() {
            State::Open => Some("open"),
            State::HalfOpen => Some("half_open"),
            State::ForcedOpen => Some("forced_open"),
            _ => None,
        }
    }

    fn join(&self, share: &Arc<KeyShare>) {
        Breaker::join(self, share);
    }

    fn evicted(&self) {
        self.give_back_ejection();
    }
}

/// A circuit breaker spec: implemented by `#[derive(CircuitBreakerSpec)]`.
///
/// The derive accepts `classify = ..` after the path, as a retry spec does
/// ([`RetrySpec`](crate::RetrySpec)): `all_errors` (the default), `custom`
/// (you implement [`Classify`] for the spec), `http`, or a classifier type
/// shared with other specs. A [`Verdict::RetryAfter`] counts as a failure.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a circuit breaker spec",
    label = "`#[circuit_breakable]` needs a type declared with `#[derive(CircuitBreakerSpec)]`",
    note = "declare one with `#[derive(CircuitBreakerSpec)] #[spec(\"resilient.circuitbreaker.name\")] pub struct Name;`",
    note = "each spec kind goes with its own attribute: `RetrySpec` with `#[retryable]`, `CircuitBreakerSpec` with `#[circuit_breakable]`, `TimeoutSpec` with `#[timeout]`, `ConcurrencyLimitSpec` with `#[concurrency_limit]`, `RateLimiterSpec` with `#[rate_limited]`, `ChaosSpec` with `#[chaos]`, `HedgingSpec` with `#[hedged]`"
)]
pub trait CircuitBreakerSpec: Spec<Mechanism = Breaker> + Sized {
    /// The type whose [`Classify`] implementations decide what a failure is,
    /// as the derive's `classify` option names it.
    type Classifier;

    /// The spec's shared breaker, from the registry in use.
    ///
    /// # Errors
    ///
    /// [`Error::NotConfigured`] when the registry in use has no settings for
    /// this spec.
    fn get() -> Result<CircuitBreakerHandle<Self>, Error> {
        crate::registry::handle::<Self>().map(|inner| CircuitBreakerHandle {
            inner,
            _spec: PhantomData,
        })
    }
    /// The instance of `key` among the spec's keyed instances (see
    /// [`keyed`](crate::keyed)): the one `key = ..` in the attribute reaches
    /// for an equal key (equal texts, or equal numbers: a number and its
    /// text are two keys), made now if the key has none. While the handle
    /// lives, the key's instance is not evicted, and it holds one of the
    /// spec's `keys.max` places: take a handle to act on a key, not to look
    /// at every key (the snapshot's [`keys`](crate::SpecSnapshot::keys)
    /// shows them without making any). When `keys.max` keys are all held,
    /// a new key's handle is the spec's own instance, shared with every key
    /// that overflows.
    ///
    /// ```
    /// # use resilient_core::CircuitBreakerSpec;
    /// # #[derive(CircuitBreakerSpec)] #[spec("resilient.circuitbreaker.host")] pub struct HostBreaker;
    /// # fn demo() -> Result<(), resilient_core::Error> {
    /// // Take a host out of rotation by hand, as `#[circuit_breakable(HostBreaker,
    /// // key = host)]` would see it.
    /// HostBreaker::for_key("db-3.internal")?.force_open();
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::NotConfigured`] when the registry in use has no settings for
    /// this spec.
    fn for_key(key: &(impl PartitionKey + ?Sized)) -> Result<CircuitBreakerHandle<Self>, Error> {
        key.with_key(crate::registry::handle_keyed::<Self>)
            .map(|inner| CircuitBreakerHandle {
                inner,
                _spec: PhantomData,
            })
    }
}

/// A snapshot of a breaker's counts: its part of the registry's
/// [`Snapshot`](crate::Snapshot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Metrics {
    /// The state now.
    pub state: State,
    /// The window's counts (empty unless closed: every transition clears it,
    /// and a forced-open or disabled breaker counts nothing; while open,
    /// [`opened_by`](Self::opened_by) keeps the window that opened it).
    pub window: Counts,
    /// Failures in the window, in whole percent; `None` for an empty window.
    pub failure_rate: Option<u8>,
    /// Slow calls in the window, in whole percent; `None` for an empty window.
    pub slow_rate: Option<u8>,
    /// Probes running now (half-open only): taken and not yet succeeded.
    pub probes_in_flight: u16,
    /// Times the breaker opened.
    pub opened: u64,
    /// Times it moved to half-open.
    pub half_opened: u64,
    /// Times it closed after half-open.
    pub closed: u64,
    /// Calls it rejected.
    pub rejected: u64,
    /// What opened the breaker, while it is open or half-open: its window
    /// as it was at the moment it opened from closed, kept through
    /// half-open and any reopening by a probe until the breaker closes.
    /// `None` while closed, and while forced open or disabled by hand (left
    /// out of the serialized snapshot then). Recorded at the transition: a
    /// call that changes no state does not pay for it.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub opened_by: Option<Opening>,
}

/// The window that opened a breaker, as it was then: in
/// [`Metrics::opened_by`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Opening {
    /// The window's counts when the failure (or slow call) that opened the
    /// breaker was recorded, that call included.
    pub window: Counts,
    /// Failures among them, in whole percent (rounded down, as the
    /// threshold is compared).
    pub failure_rate: u8,
    /// Slow calls among them, in whole percent (rounded down).
    pub slow_rate: u8,
}

/// Access to a circuit breaker spec's shared breaker; cheap to clone.
///
/// # Example
///
/// ```
/// use resilient_core::prelude::*;
/// use resilient_core::Registry;
///
/// #[derive(CircuitBreakerSpec)]
/// #[spec("resilient.circuitbreaker.pet")]
/// pub struct PetBreaker;
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
/// #         "[resilient.circuitbreaker.pet]\nfailure_rate_threshold = 50\nminimum_required_calls = 2\nwait_duration_in_open_state = \"30s\"\npermitted_calls_in_half_open_state = 1\ncount_based = { window_size = 2 }",
/// #         config::FileFormat::Toml,
/// #     ))
/// #     .build()?;
/// # let registry = resilient_config::build(Registry::builder().spec::<PetBreaker>(), &settings)?;
/// # let _guard = registry.set_default();
/// let breaker = PetBreaker::get()?;
/// for _ in 0..2 {
///     let _: Result<u32, PetError> = breaker.call(|| async { Err(PetError::Down) }).await;
/// }
/// assert_eq!(breaker.state(), resilient_core::circuit_breaker::State::Open);
/// let rejected: Result<u32, PetError> = breaker.call(|| async { Ok(1) }).await;
/// assert!(matches!(rejected, Err(PetError::Resilience(resilient_core::Error::CallNotPermitted { .. }))));
/// breaker.reset(); // closed again, its window emptied
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct CircuitBreakerHandle<S> {
    inner: Shared<Breaker>,
    _spec: PhantomData<fn() -> S>,
}

impl<S> Clone for CircuitBreakerHandle<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            _spec: PhantomData,
        }
    }
}

impl<S: CircuitBreakerSpec> CircuitBreakerHandle<S> {
    /// The spec's validated settings, as running now.
    pub fn settings(&self) -> &CircuitBreakerSettings {
        self.inner.settings()
    }

    /// A permit for one call, or `None` when the breaker rejects it.
    #[must_use = "a permit that is dropped at once releases the call as cancelled"]
    #[inline]
    pub fn try_acquire(&self) -> Option<Permit<'_>> {
        Permit::new(&self.inner).ok()
    }

    /// A permit for one call.
    ///
    /// # Errors
    ///
    /// [`Error::CallNotPermitted`] when the breaker rejects the call.
    pub fn acquire(&self) -> Result<Permit<'_>, Error> {
        Permit::new(&self.inner).map_err(|state| Error::CallNotPermitted {
            spec: S::NAME,
            state,
            retry_after: self.inner.until_half_open(),
        })
    }

    /// Runs `f` if the breaker permits, and records its outcome as the spec
    /// classifies it.
    pub fn call<T, E, F, Fut>(
        &self,
        f: F,
    ) -> impl Future<Output = Result<T, E>> + use<'_, S, T, E, F, Fut>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        S::Classifier: Classify<T, E>,
        E: From<Error>,
    {
        crate::outcome::lowered(run(
            ops::<S, T, E>(),
            Some(CallInstance::Borrowed(&self.inner)),
            || crate::outcome::lifted(f()),
        ))
    }

    /// The state now.
    pub fn state(&self) -> State {
        self.inner.state()
    }

    /// A snapshot of the counts.
    pub fn metrics(&self) -> Metrics {
        self.inner.metrics()
    }

    /// Rejects every call until [`reset`](Self::reset).
    pub fn force_open(&self) {
        self.inner.force_open();
    }

    /// Closes the breaker with an empty window, undoing
    /// [`force_open`](Self::force_open) and [`disable`](Self::disable) (and
    /// `enabled = false` in the config).
    pub fn reset(&self) {
        self.inner.reset();
    }

    /// Lets every call through and counts nothing until
    /// [`reset`](Self::reset).
    pub fn disable(&self) {
        self.inner.disable();
    }
}

/// Leave to make one call through a breaker; complete it with
/// [`success`](Self::success), [`failure`](Self::failure) or
/// [`ignore`](Self::ignore).
///
/// Dropping it uncompleted (the call was cancelled, or panicked) releases it
/// as if ignored: it counts as neither success nor failure, and a half-open
/// probe's place is freed.
#[derive(Debug)]
#[must_use = "complete the permit with success(), failure() or ignore()"]
pub struct Permit<'a> {
    breaker: &'a Breaker,
    /// What the permit was taken in; `Free` once it has ended, so that its
    /// drop records nothing.
    taken: Taken,
    /// When the call started, in nanoseconds of the breaker's clock, if it
    /// is timed ([`UNTIMED`] if not): one word, so that the guard a call's
    /// future holds stays small.
    started: u64,
}

/// [`Permit::started`] of a call that is not timed.
const UNTIMED: u64 = u64::MAX;

impl<'a> Permit<'a> {
    #[inline(always)]
    pub(crate) fn new(breaker: &'a Breaker) -> Result<Self, State> {
        let taken = breaker.try_acquire()?;
        // The clock is read only for a slow-call threshold, or for metrics.
        let started = match taken {
            Taken::Free => UNTIMED,
            _ if breaker.slow_threshold().is_some() || breaker.telemetry.timed() => {
                breaker.now_ns()
            }
            _ => UNTIMED,
        };
        Ok(Self {
            breaker,
            taken,
            started,
        })
    }

    /// The call succeeded.
    #[inline]
    pub fn success(mut self) {
        self.end(End::Success);
    }

    /// The call failed.
    #[inline]
    pub fn failure(mut self) {
        self.end(End::Failure);
    }

    /// The call's outcome does not count: nothing changes, and a half-open
    /// probe's place is freed.
    #[inline]
    pub fn ignore(mut self) {
        self.end(End::Neither);
    }

    /// Whether the permit is a half-open probe's.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn probe(&self) -> bool {
        matches!(self.taken, Taken::Probe(_))
    }

    /// How long the call took, if it is timed.
    fn took(&self) -> Option<Duration> {
        (self.started != UNTIMED)
            .then(|| Duration::from_nanos(self.breaker.now_ns().saturating_sub(self.started)))
    }

    /// Records how the call ended; the drop then records nothing.
    #[inline]
    fn end(&mut self, end: End) {
        self.end_after(end, None);
    }

    /// Records how the call ended, `fixed` long if given (a stream's time
    /// to its first item), else as long as since the permit was taken (if
    /// timed).
    #[inline(always)]
    fn end_after(&mut self, end: End, fixed: Option<Duration>) {
        let taken = std::mem::replace(&mut self.taken, Taken::Free);
        if taken == Taken::Free {
            // Ended already, or taken from a disabled breaker.
            return;
        }
        let took = fixed.or_else(|| self.took());
        let slow = match (took, self.breaker.slow_threshold()) {
            (Some(took), Some(threshold)) => took > threshold,
            _ => false,
        };
        self.breaker.release(taken, end, slow);
        let outcome = match end {
            End::Success => Outcome::Success,
            End::Failure => Outcome::Failure,
            End::Neither => Outcome::Ignored,
        };
        self.breaker.telemetry.ended(outcome, took);
    }
}

/// A [`Permit`], as plain data (see [`crate::stream`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PermitParts {
    taken: Taken,
    started: u64,
    /// A stream's time to its first item, once it came (if timed): what
    /// its outcome is timed by, so that a long healthy stream is no slow
    /// call.
    first: Option<Duration>,
}

impl PermitParts {
    /// Whether the permit is a half-open probe's.
    pub(crate) fn probe(&self) -> bool {
        matches!(self.taken, Taken::Probe(_))
    }

    /// A stream's first item came: its time is fixed now.
    pub(crate) fn first_item(&mut self, breaker: &Breaker) {
        if self.first.is_none() && self.started != UNTIMED {
            self.first = Some(Duration::from_nanos(
                breaker.now_ns().saturating_sub(self.started),
            ));
        }
    }
}

impl<'a> Permit<'a> {
    /// The permit as plain data: nothing is recorded until
    /// [`from_parts`](Self::from_parts) makes it a permit again.
    pub(crate) fn into_parts(self) -> PermitParts {
        let parts = PermitParts {
            taken: self.taken,
            started: self.started,
            first: None,
        };
        std::mem::forget(self);
        parts
    }

    /// The permit `parts` came from, of `breaker`.
    pub(crate) fn from_parts(breaker: &'a Breaker, parts: PermitParts) -> Self {
        Self {
            breaker,
            taken: parts.taken,
            started: parts.started,
        }
    }

    /// Ends a stream's permit as `verdict` says, timed to its first item
    /// if one came (`parts` are this permit's).
    #[inline]
    pub(crate) fn judged(mut self, verdict: Verdict, parts: PermitParts) {
        let end = match verdict {
            Verdict::Success => End::Success,
            Verdict::Failure | Verdict::RetryAfter(_) | Verdict::Fatal => End::Failure,
            Verdict::Ignore => End::Neither,
        };
        self.end_after(end, parts.first);
    }
}

impl<C> BreakerCall<'_, C> {
    /// The breaker this call enters, if the spec has settings.
    pub(crate) fn breaker(&self) -> Option<&Breaker> {
        self.instance.as_deref()
    }
}

impl<C: Copy> BreakerCall<'_, C> {
    /// How the spec classifies an outcome.
    pub(crate) fn classify(&self) -> C {
        self.ops.classify
    }
}

impl<C> Entered<'_, C> {
    /// The permit as plain data (see [`Permit::into_parts`]).
    pub(crate) fn into_parts(self) -> PermitParts {
        self.permit.into_parts()
    }
}

/// How a breaker counts a resilience error raised inside it (for streams).
pub(crate) fn on_resilience_error(error: &Error) -> Verdict {
    on_resilience(error)
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        if self.taken != Taken::Free {
            self.breaker.release(self.taken, End::Neither, false);
            self.breaker
                .telemetry
                .ended(Outcome::Cancelled, self.took());
        }
    }
}

/// What a breaker needs to know of one spec: its key, and `C`, how it
/// classifies an outcome (a fn item: called directly, and inlined).
#[doc(hidden)]
#[derive(Debug)]
pub struct BreakerOps<C> {
    pub(crate) key: &'static Key<Breaker>,
    classify: C,
}

/// The operations of spec `S` for `Result<T, E>`. Its classification is
/// typed as any fn of the outcome, so that it carries no bound of its own: a
/// classifier that does not fit is reported once, here.
#[inline(always)]
pub(crate) fn ops<S, T, E>() -> BreakerOps<impl Fn(&Result<T, E>) -> Verdict + Copy>
where
    S: CircuitBreakerSpec,
    S::Classifier: Classify<T, E>,
{
    BreakerOps {
        key: const { &Key::of::<S>() },
        classify: <S::Classifier as Classify<T, E>>::classify,
    }
}

/// How a breaker counts a resilience error raised inside it.
fn on_resilience(error: &Error) -> Verdict {
    match error {
        // Another mechanism's rejection says nothing of the dependency.
        Error::NotConfigured { .. }
        | Error::CallNotPermitted { .. }
        | Error::RateLimitExceeded { .. }
        | Error::ConcurrencyLimitReached { .. }
        | Error::BackendUnavailable { .. }
        | Error::Throttled { .. } => Verdict::Ignore,
        // Retry gave up on the dependency, or it was too slow: one failure.
        Error::RetryExhausted(_) | Error::Timeout { .. } => Verdict::Failure,
        // An injected fault stands for the dependency failing: the point of
        // injecting one is to see the breaker count it.
        Error::Injected { .. } => Verdict::Failure,
    }
}

/// A call through the breaker of `S` that classifies its outcome itself
/// (a tower layer's, whose service's error may carry a resilience error).
#[cfg(feature = "tower")]
#[inline(always)]
pub(crate) fn unclassified<S: CircuitBreakerSpec>() -> BreakerCall<'static, ()> {
    let key = const { &Key::of::<S>() };
    BreakerCall::new(
        BreakerOps { key, classify: () },
        crate::registry::lookup(key),
    )
}

/// As [`unclassified`], through `instance` (a keyed one, for a stack's
/// spec keyed by the request).
#[cfg(feature = "tower")]
#[inline(always)]
pub(crate) fn unclassified_in<S: CircuitBreakerSpec>(
    instance: Option<CallInstance<'static, Breaker>>,
) -> BreakerCall<'static, ()> {
    let key = const { &Key::of::<S>() };
    BreakerCall::new(BreakerOps { key, classify: () }, instance)
}

/// One call through a breaker, as the generated code makes it: [`enter`]
/// before the layers inside, [`Entered::exit`] with their outcome.
///
/// [`enter`]: BreakerCall::enter
#[doc(hidden)]
pub struct BreakerCall<'a, C> {
    ops: BreakerOps<C>,
    instance: Option<CallInstance<'a, Breaker>>,
}

/// A call the breaker let through.
#[doc(hidden)]
pub struct Entered<'a, C> {
    permit: Permit<'a>,
    classify: C,
}

impl<'a, C: Copy> BreakerCall<'a, C> {
    #[inline]
    pub(crate) fn new(ops: BreakerOps<C>, instance: Option<CallInstance<'a, Breaker>>) -> Self {
        Self { ops, instance }
    }

    /// A permit, or the error that ends the call: the breaker rejected it,
    /// or the spec has no settings. A resilience error, not the fn's: what
    /// the layer holds across the awaits inside it is `Send` whatever the
    /// fn's error type is.
    #[inline(always)]
    pub fn enter(&self) -> Result<Entered<'_, C>, Error> {
        let Some(instance) = &self.instance else {
            return Err(self.ops.key.not_configured());
        };
        let breaker = &**instance;
        match Permit::new(breaker) {
            Ok(permit) => Ok(Entered {
                permit,
                classify: self.ops.classify,
            }),
            Err(state) => Err(Error::CallNotPermitted {
                spec: self.ops.key.name,
                state,
                retry_after: breaker.until_half_open(),
            }),
        }
    }
}

impl<C> Entered<'_, C> {
    /// Counts the outcome of the call and passes it on; left in place (the
    /// generated code matches on it by reference), it is dropped with the
    /// layer's block. Dropped without an outcome (the call was cancelled),
    /// the permit counts nothing.
    #[inline(always)]
    pub fn exit<T, E>(&mut self, outcome: Result<T, Fail<E>>) -> Result<T, Fail<E>>
    where
        C: Fn(&Result<T, E>) -> Verdict,
    {
        let (outcome, verdict) = outcome::classify(outcome, &self.classify, on_resilience);
        self.permit.end(match verdict {
            Verdict::Success => End::Success,
            Verdict::Failure | Verdict::RetryAfter(_) | Verdict::Fatal => End::Failure,
            Verdict::Ignore => End::Neither,
        });
        outcome
    }
}

/// One call through the breaker `instance`, for a handle.
pub(crate) async fn run<T, E, C, F, Fut>(
    ops: BreakerOps<C>,
    instance: Option<CallInstance<'_, Breaker>>,
    f: F,
) -> Result<T, Fail<E>>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<T, Fail<E>>>,
    C: Fn(&Result<T, E>) -> Verdict + Copy,
{
    let call = BreakerCall::new(ops, instance);
    let mut entered = call.enter().map_err(Fail::Resilience)?;
    // If this future is dropped while `f` runs, the permit's drop releases it.
    entered.exit(f().await)
}
