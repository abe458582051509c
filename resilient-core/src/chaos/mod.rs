//! Fault injection: make a share of the calls slow, or fail, on purpose, to
//! see the resilience settings around them at work before an outage does.
//!
//! ```
//! use resilient_core::ChaosSpec;
//!
//! #[derive(ChaosSpec)]
//! #[spec("resilient.chaos.pet")]
//! pub struct PetChaos;
//! ```
//!
//! ```toml
//! [resilient.chaos.pet]
//! enabled = true          # off unless set: a deployment turns it on
//! latency_rate = 0.1      # 10 % of the calls wait `latency` first
//! latency = "2s"
//! error_rate = 0.05       # 5 % of the calls fail with Error::Injected
//! seed = 42               # the same calls are chosen on every run
//! ```
//!
//! # Off by default
//!
//! A chaos spec injects nothing unless its section says `enabled = true`,
//! so that the same binary and file run in production untouched and a
//! staging deployment turns it on with one environment variable
//! (`APP__RESILIENT__CHAOS__PET__ENABLED=true` with the `config` crate's
//! environment source as `resilient_config` documents it, prefix `APP`,
//! separator `__`). Disabled, a call pays what every spec lookup pays and
//! one branch on the settings' tag: no random draw, no clock read, no lock
//! and no reference count. A reload turns it on and off without a restart.
//!
//! # An attribute of its own
//!
//! Chaos is an attribute, `#[chaos(PetChaos)]`, and not a section that every
//! spec could carry, because where it sits in the chain decides what the
//! test shows, and that place is the user's to choose, as for any other
//! attribute (top = outermost):
//!
//! - below `#[timeout]`, an injected latency counts against the limit and
//!   times out as a slow dependency would;
//! - below `#[retryable]`, an injected error is retried; below
//!   `#[circuit_breakable]`, it is counted as a failure and can open the
//!   breaker; below `#[fallback]`, the fallback answers it;
//! - above them all, it reaches the caller untouched: what a caller sees
//!   when the whole chain fails.
//!
//! # What a call can get
//!
//! Each call draws once per kind of fault, each at its own rate in
//! `0.0..=1.0`: a latency (`latency_rate`: the call waits `latency` before
//! going on, at an await that an outer `#[timeout]` bounds), then an error
//! (`error_rate`: the call ends with [`Error::Injected`] without running
//! what is inside, converted through the fn's `From<resilient_core::Error>`
//! like every resilience error). Both can fall on one call: it waits, then
//! fails. A third, where the attribute names a fn of the annotated fn's
//! output (`#[chaos(PetChaos, outcome = unavailable)]`): a replaced outcome
//! (`outcome_rate`: the call returns that fn's output instead of running
//! what is inside, and the classifiers outside judge it as the body's).
//!
//! [`Error::Injected`] is a failure to every mechanism that classifies:
//! a retry around it tries again, a breaker around it counts a failure (it
//! stands for the dependency failing, which is what the test is about), and
//! a fallback with `on = resilience` or the default answers it.
//!
//! # Deterministic draws
//!
//! The draws come from a counter-based generator: call `n` (counted from 0
//! among the calls made while the spec is enabled) takes the outputs `2n`
//! and `2n + 1` of splitmix64 started at the seed, for latency and error.
//! With `seed` set, a given sequence of calls is injected the same way on
//! every run; without it, the seed is drawn once when the spec's instance is
//! built. Under concurrency, which call gets which index is the order in
//! which they entered. A reload that changes the seed starts the count
//! again from 0, also one back to a seed run before (11, 12, then 11 again
//! repeats 11's injections from its first call); a reload that keeps the
//! seed goes on from the index reached.

use std::future::Future;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use metrics::Counter;

use crate::error::Error;
use crate::registry::{CallInstance, Key, Mechanism, Part, Sealed, Shared, Spec, Tag, Versions};
use crate::settings::Section;
use crate::spec::SpecKind;
pub use crate::telemetry::Fault;
use crate::telemetry::{Event, Telemetry};

impl SpecKind {
    /// `#[derive(ChaosSpec)]`, used by `#[chaos]`.
    pub const CHAOS: SpecKind = SpecKind::new("chaos", "chaos");
}

/// A chaos spec: implemented by `#[derive(ChaosSpec)]`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a chaos spec",
    label = "`#[chaos]` needs a type declared with `#[derive(ChaosSpec)]`",
    note = "declare one with `#[derive(ChaosSpec)] #[spec(\"resilient.chaos.name\")] pub struct Name;`",
    note = "each spec kind goes with its own attribute: `RetrySpec` with `#[retryable]`, `CircuitBreakerSpec` with `#[circuit_breakable]`, `TimeoutSpec` with `#[timeout]`, `ConcurrencyLimitSpec` with `#[concurrency_limit]`, `RateLimiterSpec` with `#[rate_limited]`, `ChaosSpec` with `#[chaos]`, `HedgingSpec` with `#[hedged]`"
)]
pub trait ChaosSpec: Spec<Mechanism = Chaos> + Sized {
    /// The spec's shared instance, from the registry in use.
    ///
    /// # Errors
    ///
    /// [`Error::NotConfigured`] when the registry in use has no settings for
    /// this spec.
    fn get() -> Result<ChaosHandle<Self>, Error> {
        crate::registry::handle::<Self>().map(|inner| ChaosHandle {
            inner,
            _spec: PhantomData,
        })
    }
}

/// The settings of one chaos spec.
///
/// | key | default | rule |
/// |---|---|---|
/// | `enabled` | `false` | `true` turns injection on; off, the spec is a pass-through (still validated) |
/// | `latency_rate` | `0.0` | in `0.0..=1.0`: the share of calls that wait `latency` first |
/// | `latency` | required when `latency_rate` > 0 | duration > 0: how long such a call waits; refused when `latency_rate` is not written, since no call would wait |
/// | `error_rate` | `0.0` | in `0.0..=1.0`: the share of calls that end with `Error::Injected` |
/// | `outcome_rate` | `0.0` | in `0.0..=1.0`: the share of the calls no injected error ends that return the attribute's `outcome = ..` instead (none with `error_rate = 1`, where it is refused) |
/// | `seed` | drawn when built | whole number ≥ 0: the generator's seed, for runs that choose the same calls |
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct ChaosSettings {
    /// `true` turns injection on.
    pub enabled: bool,
    /// The share of calls delayed by `latency`.
    pub latency_rate: f64,
    /// How long a delayed call waits.
    #[cfg_attr(
        feature = "serde",
        serde(serialize_with = "crate::settings::ser::duration")
    )]
    pub latency: Duration,
    /// The share of calls that fail with [`Error::Injected`].
    pub error_rate: f64,
    /// The share of calls whose outcome is replaced by the attribute's
    /// `outcome = ..` fn, for the classifiers outside to judge (calls of a
    /// fn whose `#[chaos]` names none draw nothing for it).
    pub outcome_rate: f64,
    /// The generator's seed, if set.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub seed: Option<u64>,
}

const RATE_RULE: &str = "must be a number in 0.0..=1.0 (a share of the calls: 0.1 is 10 %)";

impl ChaosSettings {
    /// Reads and validates a chaos section, recording every problem found.
    pub fn read(s: &mut Section<'_>) -> Option<Self> {
        s.alias("injection_rate", "error_rate", |_| {
            "each kind of fault has its own rate here: `error_rate` for errors, `latency_rate` for latency".into()
        });
        s.alias("fault_rate", "error_rate", |_| {
            "the share of calls that end with `Error::Injected`".into()
        });
        s.alias("delay", "latency", |_| {
            "the wait an injected latency adds, beside `latency_rate`".into()
        });
        let rate = |x: f64| (0.0..=1.0).contains(&x);
        let enabled = s.bool("enabled", false);
        let latency_rate = s.float("latency_rate", Some(0.0), RATE_RULE, rate);
        let error_rate = s.float("error_rate", Some(0.0), RATE_RULE, rate);
        let outcome_rate = s.float("outcome_rate", Some(0.0), RATE_RULE, rate);
        // An outcome is drawn for a call that no injected error ends.
        let outcome_rate = match (error_rate, outcome_rate) {
            (Some(e), Some(o)) if e >= 1.0 && o > 0.0 => {
                s.invalid(
                    "outcome_rate",
                    "has no effect with `error_rate` = 1: every call ends with `Error::Injected` before an outcome is drawn; lower `error_rate`, or remove `outcome_rate`",
                );
                None
            }
            (_, o) => o,
        };
        let latency = match s.duration("latency", false) {
            Some(Some(d)) if d.is_zero() && latency_rate.is_some_and(|r| r > 0.0) => {
                s.invalid("latency", "must be > 0 when `latency_rate` > 0");
                None
            }
            Some(Some(d)) if !d.is_zero() && !s.has("latency_rate") => {
                s.invalid(
                    "latency",
                    "has no effect while `latency_rate` is 0, its default: no call is delayed; set `latency_rate` (a share of calls in 0..=1), or remove `latency`",
                );
                None
            }
            Some(Some(d)) => Some(d),
            Some(None) => None,
            None => match latency_rate {
                Some(r) if r > 0.0 => {
                    s.problem(
                        "latency",
                        "is required when `latency_rate` > 0 (a duration such as \"100ms\", \"2s\" or \"1m\")",
                        None,
                    );
                    None
                }
                _ => Some(Duration::ZERO),
            },
        };
        let seed = if s.present("seed") {
            s.int("seed", None, 0, u64::MAX).map(Some)
        } else {
            Some(None)
        };
        Some(Self {
            enabled: enabled?,
            latency_rate: latency_rate?,
            latency: latency?,
            error_rate: error_rate?,
            outcome_rate: outcome_rate?,
            seed: seed?,
        })
    }
}

/// The settings a chaos spec runs with, the seed its draws start from, and
/// the index of the next call's draws. The index lives with the seed: a
/// call draws its index and its seed from the same version, so a reload
/// that changes the seed (and starts its index at 0) can neither skip nor
/// repeat an index of either seed. Every version of one seed holds the
/// seed's one counter (`Chaos::counters`): a version published again by
/// a reload back to a seed used before has the counter that reload set to
/// 0, not the index that seed had reached.
#[derive(Debug)]
struct ChaosConfig {
    settings: ChaosSettings,
    seed: u64,
    calls: Arc<AtomicU64>,
}

/// Whether injection is on: all a disabled call reads.
const ENABLED: usize = 0b1;

impl Tag for ChaosConfig {
    fn tag(&self) -> usize {
        if self.settings.enabled {
            ENABLED
        } else {
            0
        }
    }
}

/// What a chaos spec has done since it was built, in its part of the
/// [`Snapshot`](crate::Snapshot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct ChaosCounts {
    /// Calls that drew while enabled (the index the next call takes, since
    /// the seed last changed).
    pub calls: u64,
    /// Calls that were delayed.
    pub latency_injected: u64,
    /// Calls that were failed.
    pub errors_injected: u64,
    /// Calls whose outcome was replaced by the attribute's `outcome = ..`.
    pub outcomes_injected: u64,
}

/// The metric handles of a chaos spec.
#[derive(Debug)]
struct ChaosMeters {
    injected: [Counter; 3],
}

/// The shared instance of one chaos spec: its settings, its draw counter,
/// what it injected and its telemetry. Reached through a [`ChaosHandle`].
#[derive(Debug)]
pub struct Chaos {
    config: Versions<ChaosConfig>,
    /// One draw counter per seed the spec has run with, shared by every
    /// version of that seed; as bounded as the versions are (by the
    /// distinct settings published). Read and written by reloads only.
    counters: Mutex<Vec<(u64, Arc<AtomicU64>)>>,
    /// The seed used when the settings set none: drawn once, when built.
    drawn_seed: u64,
    latency_injected: AtomicU64,
    errors_injected: AtomicU64,
    outcomes_injected: AtomicU64,
    telemetry: Telemetry,
    meters: OnceLock<ChaosMeters>,
}

impl Sealed for Chaos {}

impl Mechanism for Chaos {
    const KIND: SpecKind = SpecKind::CHAOS;
    // A call's outcome is counted by the mechanisms around it; chaos counts
    // what it injects (`resilient_chaos_injected_total`).
    const OUTCOMES: &'static [crate::telemetry::Outcome] = &[];
    type Settings = ChaosSettings;

    fn read(section: &mut Section<'_>) -> Option<ChaosSettings> {
        ChaosSettings::read(section)
    }

    fn build(settings: ChaosSettings, telemetry: Telemetry) -> Self {
        let drawn_seed = fastrand::u64(..);
        let seed = settings.seed.unwrap_or(drawn_seed);
        let calls = Arc::new(AtomicU64::new(0));
        let chaos = Self {
            config: Versions::new(ChaosConfig {
                seed,
                settings,
                calls: Arc::clone(&calls),
            }),
            counters: Mutex::new(vec![(seed, calls)]),
            drawn_seed,
            latency_injected: AtomicU64::new(0),
            errors_injected: AtomicU64::new(0),
            outcomes_injected: AtomicU64::new(0),
            telemetry,
            meters: OnceLock::new(),
        };
        chaos.register_meters();
        chaos
    }

    fn reconfigure(&self, settings: ChaosSettings) -> Vec<String> {
        let mut notes = Vec::new();
        let seed = settings.seed.unwrap_or(self.drawn_seed);
        let old = self.config.get();
        let mut counters = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
        let calls = match counters.iter().find(|(s, _)| *s == seed) {
            Some((_, calls)) => Arc::clone(calls),
            None => {
                let calls = Arc::new(AtomicU64::new(0));
                counters.push((seed, Arc::clone(&calls)));
                calls
            }
        };
        if seed != old.seed {
            // A seed run before starts again too: its versions, which the
            // publish below may find, hold this counter.
            calls.store(0, Ordering::Relaxed);
            notes.push("the chaos draws start again from call 0 with the new seed".to_owned());
        }
        self.config.publish(
            |c| c.settings == settings,
            || ChaosConfig {
                settings,
                seed,
                calls,
            },
        );
        drop(counters);
        notes
    }

    fn settings(&self) -> &ChaosSettings {
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

/// splitmix64's output number `n` from `seed`: its state after `n + 1`
/// steps of the golden-ratio increment, mixed.
#[inline]
fn splitmix64(seed: u64, n: u64) -> u64 {
    let mut z = seed.wrapping_add(n.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Whether a draw falls under `rate`: the draw's top 53 bits as a number
/// in `0.0..1.0`, below `rate` (never for 0.0, always for 1.0).
#[inline]
fn under(draw: u64, rate: f64) -> bool {
    const SCALE: f64 = 1.0 / (1u64 << 53) as f64;
    ((draw >> 11) as f64) * SCALE < rate
}

impl Chaos {
    /// Registers the chaos metrics once they are switched on.
    fn register_meters(&self) {
        if self.telemetry.metrics_on() {
            self.meters.get_or_init(|| ChaosMeters {
                injected: [Fault::Latency, Fault::Error, Fault::Outcome].map(|f| {
                    self.telemetry
                        .counter("resilient_chaos_injected_total", &[("fault", f.label())])
                }),
            });
        }
    }

    /// What the spec has injected so far.
    fn counts(&self) -> ChaosCounts {
        ChaosCounts {
            calls: self.config.get().calls.load(Ordering::Relaxed),
            latency_injected: self.latency_injected.load(Ordering::Relaxed),
            errors_injected: self.errors_injected.load(Ordering::Relaxed),
            outcomes_injected: self.outcomes_injected.load(Ordering::Relaxed),
        }
    }

    /// The draws of the next call, for an enabled spec.
    #[inline(never)]
    fn draw(&self, spec: &'static str, config: &ChaosConfig, replaces: bool) -> Step {
        let s = &config.settings;
        let call = config.calls.fetch_add(1, Ordering::Relaxed);
        let base = call.wrapping_mul(2);
        let delay = under(splitmix64(config.seed, base), s.latency_rate);
        let fail = under(splitmix64(config.seed, base.wrapping_add(1)), s.error_rate);
        if delay {
            self.latency_injected.fetch_add(1, Ordering::Relaxed);
            self.injected(Fault::Latency, call, s.latency);
        }
        let error = fail.then(|| {
            // A delayed call's error is counted when it is delivered, after
            // the wait: a call cancelled during it (by a timeout outside)
            // never fails with it.
            if !delay {
                self.errored(call, s.latency);
            }
            Error::Injected { spec, call }
        });
        // From a stream of its own (the seed's complement), so that the
        // latency and error draws of a seed are those without outcomes.
        let replace =
            replaces && error.is_none() && under(splitmix64(!config.seed, call), s.outcome_rate);
        if replace && !delay {
            self.replaced(call, s.latency);
        }
        let go = if replace { Go::Replace } else { Go::Run };
        if delay {
            Step::Wait(Delay {
                latency: s.latency,
                error,
                go,
                call,
            })
        } else {
            Step::Ready(error.map_or(Ok(go), Err))
        }
    }

    /// An outcome replaced for call `call`: counted and told.
    fn replaced(&self, call: u64, latency: Duration) {
        self.outcomes_injected.fetch_add(1, Ordering::Relaxed);
        self.injected(Fault::Outcome, call, latency);
    }

    /// An injected error delivered to call `call`: counted and told.
    fn errored(&self, call: u64, latency: Duration) {
        self.errors_injected.fetch_add(1, Ordering::Relaxed);
        self.injected(Fault::Error, call, latency);
    }

    /// Telemetry of one injection: the counter, the listeners, a DEBUG line.
    fn injected(&self, fault: Fault, call: u64, latency: Duration) {
        let t = &self.telemetry;
        if t.metrics_on() {
            if let Some(m) = self.meters.get() {
                m.injected[fault as usize].increment(1);
            }
        }
        t.emit(|| Event::Injected {
            spec: t.spec,
            path: t.path,
            fault,
            call,
        });
        if t.logging() {
            let (spec, path, kind) = (t.spec, t.path, fault.label());
            match fault {
                Fault::Latency => tracing::debug!(
                    target: "resilient::chaos",
                    spec, path, fault = kind, call, ?latency,
                    "injected latency of {latency:?} into call {call}"
                ),
                Fault::Error => tracing::debug!(
                    target: "resilient::chaos",
                    spec, path, fault = kind, call,
                    "injected an error into call {call}"
                ),
                Fault::Outcome => tracing::debug!(
                    target: "resilient::chaos",
                    spec, path, fault = kind, call,
                    "replaced the outcome of call {call}"
                ),
            }
        }
    }
}

/// Access to a chaos spec's settings and counts; cheap to clone.
///
/// # Example
///
/// ```
/// use resilient_core::prelude::*;
/// use resilient_core::Registry;
///
/// #[derive(ChaosSpec)]
/// #[spec("resilient.chaos.pet")]
/// pub struct PetChaos;
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
/// #         "[resilient.chaos.pet]\nenabled = true\nerror_rate = 1.0",
/// #         config::FileFormat::Toml,
/// #     ))
/// #     .build()?;
/// # let registry = resilient_config::build(Registry::builder().spec::<PetChaos>(), &settings)?;
/// # let _guard = registry.set_default();
/// let chaos = PetChaos::get()?;
/// let injected: Result<u32, PetError> = chaos.call(|| async { Ok(7) }).await;
/// assert!(matches!(injected, Err(PetError::Resilience(resilient_core::Error::Injected { .. }))));
/// println!("{:?}", chaos.counts());
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct ChaosHandle<S> {
    inner: Shared<Chaos>,
    _spec: PhantomData<fn() -> S>,
}

impl<S> Clone for ChaosHandle<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            _spec: PhantomData,
        }
    }
}

impl<S: ChaosSpec> ChaosHandle<S> {
    /// The spec's validated settings, as running now.
    pub fn settings(&self) -> &ChaosSettings {
        &self.inner.config.get().settings
    }

    /// What the spec has injected so far (also in the snapshot).
    pub fn counts(&self) -> ChaosCounts {
        self.inner.counts()
    }

    /// Runs `f` under the spec: first the injected latency, if this call
    /// draws one, then [`Error::Injected`] in place of `f` if it draws an
    /// error.
    pub async fn call<T, E, F, Fut>(&self, f: F) -> Result<T, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: From<Error>,
    {
        let call = ChaosCall::new(
            const { &Key::of::<S>() },
            Some(CallInstance::Borrowed(&self.inner)),
        );
        // A handle has no `outcome = ..`: its calls draw no replaced outcome.
        let entered = match call.try_enter(false) {
            Step::Ready(r) => r,
            Step::Wait(d) => call.wait(d).await,
        };
        match entered {
            Ok(_) => f().await,
            Err(e) => Err(E::from(e)),
        }
    }
}

/// One call under a chaos spec, as the generated code makes it:
/// [`try_enter`](ChaosCall::try_enter), then [`wait`](ChaosCall::wait) if
/// it drew a latency, then what is inside unless it drew an error.
#[doc(hidden)]
pub struct ChaosCall<'a> {
    key: &'static Key<Chaos>,
    instance: Option<CallInstance<'a, Chaos>>,
}

/// What a call drew: go on (`Ok`) or the injected error, at once, or after
/// a wait.
#[doc(hidden)]
pub enum Step {
    /// At once.
    Ready(Result<Go, Error>),
    /// After the injected latency.
    Wait(Delay),
}

/// An injected latency, and the error the call ends with after it, if it
/// drew one too.
#[doc(hidden)]
pub struct Delay {
    latency: Duration,
    error: Option<Error>,
    go: Go,
    call: u64,
}

/// What a call the spec lets through does: run what is inside, or return
/// the attribute's `outcome = ..` instead.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Go {
    /// Run what is inside `#[chaos]`.
    Run,
    /// Return the `outcome = ..` fn's output instead.
    Replace,
}

impl<'a> ChaosCall<'a> {
    #[inline(always)]
    pub(crate) fn new(key: &'static Key<Chaos>, instance: Option<CallInstance<'a, Chaos>>) -> Self {
        Self { key, instance }
    }

    /// Another call of the same spec and instance.
    #[cfg(feature = "tower")]
    pub(crate) fn duplicate(&self) -> Self {
        Self {
            key: self.key,
            instance: self.instance.clone(),
        }
    }

    /// The call's draws; for a disabled spec, one branch and no draw.
    #[inline(always)]
    pub fn try_enter(&self, replaces: bool) -> Step {
        let Some(instance) = &self.instance else {
            return Step::Ready(Err(self.key.not_configured()));
        };
        let chaos = &**instance;
        let (config, tag) = chaos.config.get_tagged();
        if tag & ENABLED == 0 {
            return Step::Ready(Ok(Go::Run));
        }
        chaos.draw(self.key.name, config, replaces)
    }

    /// Waits out an injected latency; then the call goes on, or ends with
    /// the error it drew too.
    pub async fn wait(&self, delay: Delay) -> Result<Go, Error> {
        // Boxed: a tokio sleep is large, and only an injected call needs one;
        // kept in place, it would grow the future of every call.
        Box::pin(tokio::time::sleep(delay.latency)).await;
        match delay.error {
            None => {
                if delay.go == Go::Replace {
                    if let Some(chaos) = &self.instance {
                        // Counted now that it is delivered (see `Chaos::draw`).
                        chaos.replaced(delay.call, delay.latency);
                    }
                }
                Ok(delay.go)
            }
            Some(error) => {
                // Counted now that it is delivered (see `Chaos::draw`).
                if let (Some(chaos), Error::Injected { call, .. }) = (&self.instance, &error) {
                    chaos.errored(*call, delay.latency);
                }
                Err(error)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_matches_its_reference_outputs() {
        // The first outputs of splitmix64 seeded with 0, as its reference
        // implementation gives them.
        assert_eq!(splitmix64(0, 0), 0xE220_A839_7B1D_CDAF);
        assert_eq!(splitmix64(0, 1), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(splitmix64(0, 2), 0x06C4_5D18_8009_454F);
    }

    #[test]
    fn rates_zero_and_one_are_never_and_always() {
        for n in 0..1000 {
            let d = splitmix64(7, n);
            assert!(!under(d, 0.0));
            assert!(under(d, 1.0));
        }
        assert!(under(0, f64::MIN_POSITIVE));
        assert!(!under(u64::MAX, 0.999_999));
    }
}
