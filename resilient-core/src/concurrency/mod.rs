//! Concurrency limit: at most `limit` calls of a spec run at once.
//!
//! ```
//! use resilient_core::ConcurrencyLimitSpec;
//!
//! #[derive(ConcurrencyLimitSpec)]
//! #[spec("resilient.concurrency.reviews")]
//! pub struct Reviews;
//! ```
//!
//! ```toml
//! [resilient.concurrency.reviews]
//! limit = 2
//! policy = "block"      # or "reject" (the default)
//! max_wait = "500ms"    # optional, with "block" only
//! ```
//!
//! One limiter per spec type, shared by every fn that names it. The permit is
//! held for the whole life of the call's future and released when it
//! completes, fails, panics or is dropped. Waiters are served first come,
//! first served.
//!
//! A `reject` limiter has no waiters, so it is one atomic counter: taking and
//! freeing a place is a compare-and-swap and a subtraction, with no lock. A
//! `block` limiter is tokio's fair semaphore; a call that finds a free place
//! takes it at once, and only a call that must wait allocates its wait.

use std::future::Future;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use metrics::Gauge;
use tokio::sync::{Semaphore, SemaphorePermit};

use crate::error::Error;
use crate::outcome::Fail;
use crate::registry::{CallInstance, Key, Mechanism, Part, Sealed, Shared, Spec, Tag, Versions};
use crate::settings::Section;
use crate::spec::SpecKind;
use crate::telemetry::{Outcome, Telemetry};

impl SpecKind {
    /// `#[derive(ConcurrencyLimitSpec)]`, used by `#[concurrency_limit]`.
    pub const CONCURRENCY_LIMIT: SpecKind = SpecKind::new("concurrency_limit", "concurrency limit");
}

/// A concurrency limit spec: implemented by `#[derive(ConcurrencyLimitSpec)]`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a concurrency limit spec",
    label = "`#[concurrency_limit]` needs a type declared with `#[derive(ConcurrencyLimitSpec)]`",
    note = "declare one with `#[derive(ConcurrencyLimitSpec)] #[spec(\"resilient.concurrency.name\")] pub struct Name;`",
    note = "each spec kind goes with its own attribute: `RetrySpec` with `#[retryable]`, `CircuitBreakerSpec` with `#[circuit_breakable]`, `TimeoutSpec` with `#[timeout]`, `ConcurrencyLimitSpec` with `#[concurrency_limit]`, `RateLimiterSpec` with `#[rate_limited]`"
)]
pub trait ConcurrencyLimitSpec: Spec<Mechanism = Limiter> + Sized {
    /// The spec's shared limiter, from the registry in use.
    ///
    /// # Errors
    ///
    /// [`Error::NotConfigured`] when the registry in use has no settings for
    /// this spec.
    fn get() -> Result<ConcurrencyLimitHandle<Self>, Error> {
        crate::registry::handle::<Self>().map(|inner| ConcurrencyLimitHandle {
            inner,
            _spec: PhantomData,
        })
    }
}

/// What a call does when every permit is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize),
    serde(rename_all = "snake_case", tag = "policy")
)]
pub enum Policy {
    /// Fail at once with [`Error::ConcurrencyLimitReached`].
    Reject,
    /// Wait for a permit, at most `max_wait` if set.
    Block {
        /// How long to wait before failing.
        #[cfg_attr(
            feature = "serde",
            serde(
                serialize_with = "crate::settings::ser::option_duration",
                skip_serializing_if = "Option::is_none"
            )
        )]
        max_wait: Option<Duration>,
    },
}

/// The settings of one concurrency limit spec.
///
/// | key | default | rule |
/// |---|---|---|
/// | `enabled` | `true` | `false` makes the spec a pass-through (still validated) |
/// | `limit` | required | whole number in 1..=536870911: calls that may run at once |
/// | `policy` | `"reject"` | `"reject"` (fail at once when full) or `"block"` (wait for a permit) |
/// | `max_wait` | none | duration > 0, with `policy = "block"` only: how long to wait before failing |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ConcurrencyLimitSettings {
    /// `false` turns the spec into a pass-through.
    pub enabled: bool,
    /// Calls that may run at once.
    pub limit: u32,
    /// What a call does when every permit is taken.
    #[cfg_attr(feature = "serde", serde(flatten))]
    pub policy: Policy,
}

impl Tag for ConcurrencyLimitSettings {}

/// The largest limit tokio's semaphore holds.
const LIMIT_MAX: u64 = (u32::MAX >> 3) as u64;

impl ConcurrencyLimitSettings {
    /// Reads and validates a concurrency limit section, recording every
    /// problem found.
    pub fn read(s: &mut Section<'_>) -> Option<Self> {
        s.alias("max_concurrent_calls", "limit", |_| {
            "the same number of calls at once under this project's name".into()
        });
        s.alias("max_wait_duration", "max_wait", |_| {
            "`max_wait` applies with `policy = \"block\"` only: Resilience4j's `max_wait_duration` is `policy = \"block\"` with `max_wait`, and its `0` is the default `policy = \"reject\"`".into()
        });
        let enabled = s.bool("enabled", true);
        let limit = s.int("limit", None, 1, LIMIT_MAX);
        let policy = s.choice("policy", &["reject", "block"], "reject");
        let max_wait = s.duration("max_wait", false);
        let policy = match (policy?, max_wait) {
            ("reject", Some(Some(_))) => {
                s.invalid(
                    "max_wait",
                    "applies to `policy = \"block\"` only; set `policy = \"block\"`, or remove `max_wait`",
                );
                return None;
            }
            ("reject", _) => Policy::Reject,
            (_, Some(None)) => return None,
            (_, Some(Some(d))) if d.is_zero() => {
                s.invalid(
                    "max_wait",
                    "must be > 0 (with `policy = \"reject\"` a full limiter fails at once)",
                );
                return None;
            }
            (_, max_wait) => Policy::Block {
                max_wait: max_wait.flatten(),
            },
        };
        Some(Self {
            enabled: enabled?,
            limit: u32::try_from(limit?).ok()?,
            policy,
        })
    }
}

/// The shared instance of one concurrency limit spec: its places, its
/// settings and its telemetry. Reached through a
/// [`ConcurrencyLimitHandle`].
#[derive(Debug)]
pub struct Limiter {
    config: Versions<ConcurrencyLimitSettings>,
    telemetry: Telemetry,
    /// `block`: the places, and the queue of waiters.
    semaphore: Semaphore,
    /// The limit the semaphore holds places for (whatever the policy, so
    /// that a reload to `block` finds it sized).
    semaphore_limit: AtomicU32,
    /// Places the semaphore holds beyond its limit, after a reload made the
    /// limit smaller while they were taken: each given back is dropped
    /// instead, until none is left.
    debt: AtomicU32,
    /// `reject`: the places taken.
    taken: AtomicU32,
    in_use: OnceLock<Gauge>,
}

/// A concurrency limit's places, in its part of the
/// [`Snapshot`](crate::Snapshot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Places {
    /// Places held now.
    pub permits_in_use: u32,
    /// Places in all.
    pub permits_limit: u32,
}

impl Sealed for Limiter {}

impl Mechanism for Limiter {
    const KIND: SpecKind = SpecKind::CONCURRENCY_LIMIT;
    const OUTCOMES: &'static [Outcome] = &[
        Outcome::Success,
        Outcome::Failure,
        Outcome::Rejected,
        Outcome::Cancelled,
    ];
    type Settings = ConcurrencyLimitSettings;

    fn read(section: &mut Section<'_>) -> Option<ConcurrencyLimitSettings> {
        ConcurrencyLimitSettings::read(section)
    }

    fn build(settings: ConcurrencyLimitSettings, telemetry: Telemetry) -> Self {
        Limiter::new(settings, telemetry)
    }

    fn reconfigure(&self, settings: ConcurrencyLimitSettings) -> Vec<String> {
        let was = *self.config.get();
        self.resize(settings.limit);
        self.config.publish(|c| *c == settings, || settings);
        let policy = |p: Policy| match p {
            Policy::Reject => "reject",
            Policy::Block { .. } => "block",
        };
        if policy(was.policy) == policy(settings.policy) {
            return Vec::new();
        }
        vec![format!(
            "`policy` is now \"{}\": the calls in flight under \"{}\" keep their places there, and are not counted against the limit until they end",
            policy(settings.policy),
            policy(was.policy)
        )]
    }

    fn settings(&self) -> &ConcurrencyLimitSettings {
        self.config.get()
    }

    fn telemetry(&self) -> &Telemetry {
        &self.telemetry
    }

    fn status(&self) -> Option<Arc<dyn Part>> {
        Some(Arc::new(Places {
            permits_in_use: self.in_use(),
            permits_limit: self.limit(),
        }))
    }

    fn telemetry_switched(&self) {
        self.register_meters();
    }
}

/// A place taken from a [`Limiter`], counted in its in-use gauge; dropping
/// it frees the place. Two words: the limiter, and what was taken from it (a
/// semaphore permit is forgotten when taken and given back here), so that a
/// call's guard stays small.
#[derive(Debug)]
struct Place<'a> {
    limiter: &'a Limiter,
    kind: Kind,
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    /// The limiter is disabled: nothing was taken.
    Free,
    /// A place of a `reject` limiter's counter.
    Counted,
    /// A permit of a `block` limiter's semaphore.
    Queued,
}

impl<'a> Place<'a> {
    #[inline(always)]
    fn new(limiter: &'a Limiter, kind: Kind) -> Self {
        // Made first: if counting it panics, its drop still frees it.
        let place = Self { limiter, kind };
        limiter.held(true);
        place
    }

    /// A semaphore permit, as a place.
    fn queued(limiter: &'a Limiter, permit: SemaphorePermit<'a>) -> Self {
        permit.forget();
        Self::new(limiter, Kind::Queued)
    }
}

impl Drop for Place<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        // Counted out before it is freed: the gauge never shows more places
        // than the limit.
        self.limiter.held(false);
        match self.kind {
            Kind::Free => {}
            Kind::Counted => {
                self.limiter.taken.fetch_sub(1, Ordering::Release);
            }
            Kind::Queued => self.limiter.give_back(),
        }
    }
}

impl Limiter {
    pub(crate) fn new(settings: ConcurrencyLimitSettings, telemetry: Telemetry) -> Self {
        let limiter = Self {
            telemetry,
            semaphore: Semaphore::new(settings.limit as usize),
            semaphore_limit: AtomicU32::new(settings.limit),
            debt: AtomicU32::new(0),
            taken: AtomicU32::new(0),
            config: Versions::new(settings),
            in_use: OnceLock::new(),
        };
        limiter.register_meters();
        limiter
    }

    /// Registers the in-use gauge once metrics are switched on, set to the
    /// places held now.
    fn register_meters(&self) {
        if self.telemetry.metrics_on() {
            let gauge = self
                .in_use
                .get_or_init(|| self.telemetry.gauge("resilient_concurrency_in_use"));
            gauge.set(f64::from(self.in_use()));
        }
    }

    /// A place was taken (`true`) or freed: the in-use gauge.
    #[inline(always)]
    fn held(&self, taken: bool) {
        if self.telemetry.metrics_on() {
            if let Some(gauge) = self.in_use.get() {
                if taken {
                    gauge.increment(1.0);
                } else {
                    gauge.decrement(1.0);
                }
            }
        }
    }

    /// Sizes the semaphore's places to `limit`: more wake waiters at once;
    /// fewer are taken from the free places, and the rest from the places
    /// given back later (the debt).
    fn resize(&self, limit: u32) {
        let was = self.semaphore_limit.swap(limit, Ordering::AcqRel);
        if limit > was {
            let mut more = limit - was;
            // Places still owed are forgiven first.
            let _ = self
                .debt
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |d| {
                    let paid = d.min(limit - was);
                    more = limit - was - paid;
                    Some(d - paid)
                });
            self.semaphore.add_permits(more as usize);
        } else if limit < was {
            let fewer = was - limit;
            let forgotten = u32::try_from(self.semaphore.forget_permits(fewer as usize))
                .unwrap_or(fewer)
                .min(fewer);
            self.debt.fetch_add(fewer - forgotten, Ordering::AcqRel);
        }
    }

    /// A semaphore place comes back: into the semaphore, or against the
    /// debt of a limit made smaller.
    fn give_back(&self) {
        let owed = self
            .debt
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |d| d.checked_sub(1))
            .is_ok();
        if !owed {
            self.semaphore.add_permits(1);
        }
    }

    /// A place if one is free now.
    #[inline]
    fn try_take(&self, settings: &ConcurrencyLimitSettings) -> Option<Place<'_>> {
        if !settings.enabled {
            return Some(Place::new(self, Kind::Free));
        }
        match settings.policy {
            Policy::Reject => {
                let limit = settings.limit;
                self.taken
                    .fetch_update(Ordering::Acquire, Ordering::Relaxed, |n| {
                        (n < limit).then_some(n + 1)
                    })
                    .ok()
                    .map(|_| Place::new(self, Kind::Counted))
            }
            Policy::Block { .. } => self
                .semaphore
                .try_acquire()
                .ok()
                .map(|permit| Place::queued(self, permit)),
        }
    }

    pub(crate) fn limit(&self) -> u32 {
        self.config.get().limit
    }

    pub(crate) fn in_use(&self) -> u32 {
        let settings = self.config.get();
        match settings.policy {
            Policy::Reject => self.taken.load(Ordering::Acquire),
            Policy::Block { .. } => {
                let free = u32::try_from(self.semaphore.available_permits()).unwrap_or(u32::MAX);
                self.semaphore_limit
                    .load(Ordering::Acquire)
                    .saturating_add(self.debt.load(Ordering::Acquire))
                    .saturating_sub(free)
            }
        }
    }

    /// Tells the telemetry that a call found no place.
    fn rejected(&self, limit: u32) {
        crate::telemetry::log_rejection!(
            "resilient::concurrency",
            &self.telemetry,
            None,
            "all {limit} places taken"
        );
    }

    fn reached(spec: &'static str, limit: u32) -> Error {
        Error::ConcurrencyLimitReached { spec, limit }
    }

    /// A place as the policy says.
    async fn acquire(&self, spec: &'static str) -> Result<Place<'_>, Error> {
        let settings = self.config.get();
        // Free places are taken without a lock or a timer.
        match self.try_take(settings) {
            Some(place) => Ok(place),
            None => self.when_full(spec, settings).await,
        }
    }

    /// A place for a call that found none free: an error at once (`reject`),
    /// or one that comes free in time (`block`).
    async fn when_full(
        &self,
        spec: &'static str,
        settings: &ConcurrencyLimitSettings,
    ) -> Result<Place<'_>, Error> {
        match settings.policy {
            Policy::Reject => Err(Self::reached(spec, settings.limit)),
            // Boxed: the wait's future (a semaphore queue entry and a timer)
            // would otherwise widen every call's future, and only a call
            // that must wait pays for it.
            Policy::Block { max_wait } => Box::pin(self.wait(spec, settings.limit, max_wait)).await,
        }
    }

    /// Waits for a place of a `block` limiter, at most `max_wait`.
    async fn wait(
        &self,
        spec: &'static str,
        limit: u32,
        max_wait: Option<Duration>,
    ) -> Result<Place<'_>, Error> {
        let permit = match max_wait {
            None => self.semaphore.acquire().await.ok(),
            Some(max_wait) => tokio::time::timeout(max_wait, self.semaphore.acquire())
                .await
                .ok()
                .and_then(Result::ok),
        };
        permit
            .map(|permit| Place::queued(self, permit))
            .ok_or_else(|| Self::reached(spec, limit))
    }
}

/// Access to a concurrency limit spec's shared limiter; cheap to clone.
#[derive(Debug)]
pub struct ConcurrencyLimitHandle<S> {
    inner: Shared<Limiter>,
    _spec: PhantomData<fn() -> S>,
}

impl<S> Clone for ConcurrencyLimitHandle<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            _spec: PhantomData,
        }
    }
}

/// A running call's place; dropping it frees the place.
#[derive(Debug)]
#[must_use = "the place is freed as soon as the permit is dropped"]
pub struct ConcurrencyPermit<'a> {
    _place: Place<'a>,
}

impl<S: ConcurrencyLimitSpec> ConcurrencyLimitHandle<S> {
    /// The spec's validated settings, as running now.
    pub fn settings(&self) -> &ConcurrencyLimitSettings {
        self.inner.config.get()
    }

    /// A place if one is free now, whatever the policy. A call that finds
    /// none is counted as rejected, as the attribute's is.
    pub fn try_acquire(&self) -> Option<ConcurrencyPermit<'_>> {
        let settings = self.inner.config.get();
        match self.inner.try_take(settings) {
            Some(place) => Some(ConcurrencyPermit { _place: place }),
            None => {
                self.inner.rejected(settings.limit);
                None
            }
        }
    }

    /// A place as the policy says: at once or fail (`reject`), or after
    /// waiting (`block`, at most `max_wait`).
    ///
    /// # Errors
    ///
    /// [`Error::ConcurrencyLimitReached`] when no place could be had.
    pub async fn acquire(&self) -> Result<ConcurrencyPermit<'_>, Error> {
        match self.inner.acquire(S::NAME).await {
            Ok(place) => Ok(ConcurrencyPermit { _place: place }),
            Err(e) => {
                if let Error::ConcurrencyLimitReached { limit, .. } = e {
                    self.inner.rejected(limit);
                }
                Err(e)
            }
        }
    }

    /// Places taken now.
    pub fn in_use(&self) -> u32 {
        self.inner.in_use()
    }

    /// Places free now.
    pub fn available(&self) -> u32 {
        self.inner.limit().saturating_sub(self.inner.in_use())
    }

    /// Runs `f` holding a place for the whole life of its future.
    pub async fn call<T, E, F, Fut>(&self, f: F) -> Result<T, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: From<Error>,
    {
        run(
            const { &Key::of::<S>() },
            Some(CallInstance::Borrowed(&self.inner)),
            || crate::outcome::lifted(f()),
        )
        .await
        .map_err(|fail| fail.into_error(E::from))
    }
}

/// How a limiter answers a call that asks to enter.
#[doc(hidden)]
pub enum Enter<G, W> {
    /// At once: let in, or the error that ends the call.
    Ready(Result<G, Error>),
    /// The call must wait (`W` says for what) before it knows.
    Wait(W),
}

/// One call under a concurrency limit, as the generated code makes it:
/// [`try_enter`](LimitCall::try_enter) (and [`wait`](LimitCall::wait) when
/// full), then [`Held::exit`] with the outcome of the layers inside.
#[doc(hidden)]
pub struct LimitCall<'a> {
    key: &'static Key<Limiter>,
    instance: Option<CallInstance<'a, Limiter>>,
}

/// A call that found the limit full, and when it started (if timed: a
/// call dropped while it waits is then counted as cancelled).
#[doc(hidden)]
pub struct Full<'a> {
    telemetry: &'a Telemetry,
    settings: &'a ConcurrencyLimitSettings,
    started: Option<tokio::time::Instant>,
}

/// A place taken, held until the call ends or is dropped.
#[doc(hidden)]
pub struct Held<'a> {
    place: Place<'a>,
    started: Option<tokio::time::Instant>,
}

impl<'a> LimitCall<'a> {
    #[inline]
    pub(crate) fn new(
        key: &'static Key<Limiter>,
        instance: Option<CallInstance<'a, Limiter>>,
    ) -> Self {
        Self { key, instance }
    }

    /// A free place, taken without entering an async fn; `Wait` when the
    /// limit is full and its policy is to wait.
    #[inline(always)]
    pub fn try_enter(&self) -> Enter<Held<'_>, Full<'_>> {
        let Some(instance) = &self.instance else {
            return Enter::Ready(Err(self.key.not_configured()));
        };
        let limiter = &**instance;
        let settings = limiter.config.get();
        let started = limiter.telemetry.start();
        match limiter.try_take(settings) {
            Some(place) => Enter::Ready(Ok(Held::new(started, place))),
            None => match settings.policy {
                Policy::Reject => {
                    limiter.rejected(settings.limit);
                    Enter::Ready(Err(Limiter::reached(self.key.name, settings.limit)))
                }
                Policy::Block { .. } => Enter::Wait(Full {
                    telemetry: &limiter.telemetry,
                    settings,
                    started,
                }),
            },
        }
    }

    /// Waits for a place, as the limit's policy (when the call found it
    /// full) says.
    pub async fn wait(&self, mut full: Full<'_>) -> Result<Held<'_>, Error> {
        let Some(instance) = &self.instance else {
            return Err(self.key.not_configured());
        };
        let limiter = &**instance;
        let result = limiter.when_full(self.key.name, full.settings).await;
        // Counted from here on: as held, or as rejected.
        let started = full.started.take();
        match result {
            Ok(place) => Ok(Held::new(started, place)),
            Err(e) => {
                limiter.rejected(full.settings.limit);
                Err(e)
            }
        }
    }
}

impl Drop for Full<'_> {
    #[inline]
    fn drop(&mut self) {
        // Still timed: dropped while it waited for a place.
        if let Some(at) = self.started.take() {
            self.telemetry.ended(Outcome::Cancelled, Some(at.elapsed()));
        }
    }
}

impl<'a> Held<'a> {
    #[inline(always)]
    fn new(started: Option<tokio::time::Instant>, place: Place<'a>) -> Self {
        Self { place, started }
    }

    /// Passes on the outcome of the call; the place is freed when the guard
    /// is dropped, with the layer's block.
    #[inline(always)]
    pub fn exit<T, E>(&mut self, outcome: Result<T, Fail<E>>) -> Result<T, Fail<E>> {
        self.place
            .limiter
            .telemetry
            .done(outcome, self.started.take())
    }
}

impl Drop for Held<'_> {
    #[inline]
    fn drop(&mut self) {
        // Still timed: dropped before its outcome.
        if let Some(at) = self.started.take() {
            self.place
                .limiter
                .telemetry
                .ended(Outcome::Cancelled, Some(at.elapsed()));
        }
    }
}

/// One call under the limiter `instance`, for a handle.
pub(crate) async fn run<T, E, F, Fut>(
    key: &'static Key<Limiter>,
    instance: Option<CallInstance<'_, Limiter>>,
    f: F,
) -> Result<T, Fail<E>>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<T, Fail<E>>>,
{
    let call = LimitCall::new(key, instance);
    let entered = match call.try_enter() {
        Enter::Ready(entered) => entered,
        Enter::Wait(w) => call.wait(w).await,
    };
    let mut held = entered.map_err(Fail::Resilience)?;
    held.exit(f().await)
}
