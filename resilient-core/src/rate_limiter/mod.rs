//! Rate limiter: at most `limit_for_period` calls per `limit_refresh_period`.
//!
//! ```
//! use resilient_core::RateLimiterSpec;
//!
//! #[derive(RateLimiterSpec)]
//! #[spec("resilient.ratelimiter.pet")]
//! pub struct PetRate;
//! ```
//!
//! ```toml
//! [resilient.ratelimiter.pet]
//! limit_for_period = 10
//! limit_refresh_period = "1s"
//! type = "token_bucket"   # or "fixed_window" (the default)
//! ```
//!
//! - `fixed_window` (Kora's): a window of `limit_refresh_period` starts when
//!   the limiter is built and again at the first call after the previous one
//!   expired; it admits `limit_for_period` calls, and unused permits are lost.
//! - `token_bucket`: permits come back continuously, one every
//!   `limit_refresh_period / limit_for_period`, and up to `limit_for_period`
//!   can be spent at once (a GCRA: one atomic word, the theoretical arrival
//!   time).
//!
//! A rejected call fails with [`Error::RateLimitExceeded`], whose
//! `retry_after` is the time until a permit would be free. With `max_wait`,
//! a call that can have a permit within `max_wait` reserves it at once and
//! sleeps until it is due; a call that cannot fails at once, without waiting.
//! A reserved permit is spent even if the call is cancelled while it sleeps
//! (`token_bucket` gives it back if no later call reserved one meanwhile).
//!
//! A `fixed_window` period is a whole number of milliseconds and a window
//! starts at the millisecond of the call that opens it; reserved permits fill
//! the windows that follow, back to back.
//!
//! A permit reads the clock once: the CPU's time-stamp counter through
//! quanta (calibrated against the monotonic clock; quanta reads the
//! monotonic clock itself where the counter cannot be trusted), or tokio's
//! clock for a limiter built while tokio's clock was paused, so that tests
//! on the paused clock stay exact: build a test's registry inside its
//! `#[tokio::test(start_paused = true)]`, or call [`use_tokio_clock`]
//! before building a registry that tests share. A limiter that reads the
//! counter under a paused clock logs one warning at its first refusal or
//! reservation that finds the two clocks moving apart.

use std::future::Future;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

mod clock;

use tokio::time::Instant;

use self::clock::Clock;
use crate::backend::{
    Answer, Ask, Backend, LocalShare, OnBackendFailure, Policy, Remote, Unavailable,
};
use crate::concurrency::Enter;
use crate::error::Error;
use crate::keyed::PartitionKey;
use crate::outcome::Fail;
use crate::registry::{Context, Key, Mechanism, Part, Sealed, Shared, Spec, Tag, Versions};
use crate::settings::Section;
use crate::spec::SpecKind;
use crate::telemetry::{Outcome, Telemetry};

/// Makes every rate limiter built from now on, in this process, read
/// tokio's clock instead of the CPU's time-stamp counter: for tests on
/// tokio's paused clock whose registry is shared (a `static`, or one
/// `resilient_config::init` for the whole suite) and so may be built by a
/// test whose clock is not paused. Call it before the registry is built, in
/// its initializer. A registry built inside each paused test needs no call:
/// a limiter built while tokio's clock is paused reads it anyway.
///
/// A shared limiter keeps its permits and windows from one test to the
/// next, and each test's paused clock starts where the machine's clock is
/// when its runtime is built: a limiter's time never goes back, so after a
/// test that advanced an hour, the others find its windows an hour on and
/// their own `advance` short of it. Tests that advance the clock to refill
/// permits build their own registry.
///
/// A permit then reads tokio's clock (with tokio's `test-util` feature, a
/// lock per read): not for production code.
///
/// ```
/// use std::sync::LazyLock;
/// use resilient_core::Registry;
///
/// static REGISTRY: LazyLock<Registry> = LazyLock::new(|| {
///     resilient_core::rate_limiter::use_tokio_clock();
///     Registry::builder().build(&resilient_core::settings::Value::Table(Default::default()))
///         .unwrap_or_else(|problems| panic!("{problems:?}"))
/// });
/// # let _ = &*REGISTRY;
/// ```
pub fn use_tokio_clock() {
    clock::use_tokio_clock();
}

impl SpecKind {
    /// `#[derive(RateLimiterSpec)]`, used by `#[rate_limited]`.
    pub const RATE_LIMITER: SpecKind = SpecKind::new("rate_limiter", "rate limiter");
}

/// A rate limiter spec: implemented by `#[derive(RateLimiterSpec)]`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a rate limiter spec",
    label = "`#[rate_limited]` needs a type declared with `#[derive(RateLimiterSpec)]`",
    note = "declare one with `#[derive(RateLimiterSpec)] #[spec(\"resilient.ratelimiter.name\")] pub struct Name;`",
    note = "each spec kind goes with its own attribute: `RetrySpec` with `#[retryable]`, `CircuitBreakerSpec` with `#[circuit_breakable]`, `TimeoutSpec` with `#[timeout]`, `ConcurrencyLimitSpec` with `#[concurrency_limit]`, `RateLimiterSpec` with `#[rate_limited]`, `ChaosSpec` with `#[chaos]`, `HedgingSpec` with `#[hedged]`"
)]
pub trait RateLimiterSpec: Spec<Mechanism = RateLimiter> + Sized {
    /// The spec's shared limiter, from the registry in use.
    ///
    /// # Errors
    ///
    /// [`Error::NotConfigured`] when the registry in use has no settings for
    /// this spec.
    fn get() -> Result<RateLimiterHandle<Self>, Error> {
        crate::registry::handle::<Self>().map(|inner| RateLimiterHandle {
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
    /// # use resilient_core::RateLimiterSpec;
    /// # #[derive(RateLimiterSpec)] #[spec("resilient.ratelimiter.tenant")] pub struct TenantQuota;
    /// # fn demo() -> Result<(), resilient_core::Error> {
    /// let quota = TenantQuota::for_key("tenant-7")?;
    /// # let _ = quota; Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::NotConfigured`] when the registry in use has no settings for
    /// this spec.
    fn for_key(key: &(impl PartitionKey + ?Sized)) -> Result<RateLimiterHandle<Self>, Error> {
        key.with_key(crate::registry::handle_keyed::<Self>)
            .map(|inner| RateLimiterHandle {
                inner,
                _spec: PhantomData,
            })
    }
}

/// The rate limiter's algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize),
    serde(rename_all = "snake_case")
)]
pub enum Algorithm {
    /// Windows that start at the first call after the previous one expired.
    FixedWindow,
    /// Permits that come back continuously (GCRA).
    TokenBucket,
}

/// The settings of one rate limiter spec.
///
/// | key | default | rule |
/// |---|---|---|
/// | `enabled` | `true` | `false` makes the spec a pass-through (still validated) |
/// | `type` | `"fixed_window"` | `"fixed_window"` or `"token_bucket"` |
/// | `limit_for_period` | required | whole number in 1..=1048575: calls per period |
/// | `limit_refresh_period` | required | duration ≥ 1ms: the period; a whole number of milliseconds for `fixed_window`; for `token_bucket` ≥ 1ns per permit and at most 584 years |
/// | `max_wait` | none | duration > 0: how long a call may wait for a permit instead of failing at once |
/// | `backend` | `"local"` | `"local"` (this process) or `"redis"` (shared by every replica, through the section `resilient.redis`) |
/// | `on_backend_failure` | `"deny"` | with `backend = "redis"`: `"deny"`, `"allow"` or `"local"`, what a call gets while Redis makes no decision |
/// | `local_limit_for_period` | required with `"local"` | whole number in 1..=`limit_for_period`: this process's permits per period while Redis makes no decision |
/// | `lease` | `1` | with `backend = "redis"`: whole number in 1..=`limit_for_period`, the permits due now one round trip takes at most, handed out by this process to the calls that follow |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct RateLimiterSettings {
    /// `false` turns the spec into a pass-through.
    pub enabled: bool,
    /// The algorithm.
    #[cfg_attr(feature = "serde", serde(rename = "type"))]
    pub algorithm: Algorithm,
    /// Calls per period.
    pub limit_for_period: u32,
    /// The period.
    #[cfg_attr(
        feature = "serde",
        serde(serialize_with = "crate::settings::ser::duration")
    )]
    pub limit_refresh_period: Duration,
    /// How long a call may wait for a permit.
    #[cfg_attr(
        feature = "serde",
        serde(
            serialize_with = "crate::settings::ser::option_duration",
            skip_serializing_if = "Option::is_none"
        )
    )]
    pub max_wait: Option<Duration>,
    /// Where the permits are kept.
    pub backend: Backend,
    /// What a call gets while a shared backend makes no decision.
    pub on_backend_failure: OnBackendFailure,
    /// With a shared backend: the permits due now one round trip takes at
    /// most, for this process's calls that follow (1: none beyond the
    /// caller's).
    pub lease: u32,
}

const COUNT_BITS: u32 = 20;

/// Why a call got no permit.
#[derive(Debug, Clone, Copy)]
enum Refused {
    /// The limit: a permit would be free after this long.
    Limit(Duration),
    /// The backend made no decision, and `on_backend_failure` is `deny`.
    Unavailable,
}

/// A backend named and not attached: never once the registry is built (it
/// checks), answered as a backend making no decision.
const NO_BACKEND: Unavailable = Unavailable;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;

impl RateLimiterSettings {
    /// Reads and validates a rate limiter section, recording every problem
    /// found.
    pub fn read(s: &mut Section<'_>) -> Option<Self> {
        s.alias("timeout_duration", "max_wait", |_| {
            "how long a call may wait for a permit, as Resilience4j's `timeout_duration`; its `0`, fail at once, is leaving `max_wait` out".into()
        });
        let enabled = s.bool("enabled", true);
        let algorithm = s.choice("type", &["fixed_window", "token_bucket"], "fixed_window");
        let limit = s.int("limit_for_period", None, 1, COUNT_MASK);
        let period = match s.duration("limit_refresh_period", true) {
            Some(Some(d)) if d < Duration::from_millis(1) => {
                s.invalid("limit_refresh_period", "must be at least 1ms");
                None
            }
            other => other.flatten(),
        };
        let (backend, on_backend_failure, lease) = read_backend(s, limit);
        let max_wait = match s.duration("max_wait", false) {
            Some(Some(d)) if d.is_zero() => {
                s.invalid("max_wait", "must be > 0 (leave it out to fail at once)");
                Some(None)
            }
            other => other,
        };
        match (algorithm, limit, period) {
            (Some("token_bucket"), Some(limit), Some(period)) => {
                if period.as_nanos() < u128::from(limit) {
                    s.invalid(
                        "limit_refresh_period",
                        format!("is too short for `limit_for_period` = {limit} with `type = \"token_bucket\"`: each permit needs at least 1ns"),
                    );
                    return None;
                }
                if u64::try_from(period.as_nanos()).is_err() {
                    s.invalid(
                        "limit_refresh_period",
                        "must be at most 584 years for `type = \"token_bucket\"` (its clock counts nanoseconds in 64 bits)",
                    );
                    return None;
                }
                // Redis counts a token bucket's interval in whole
                // microseconds, rounded up: a shorter one would lower the
                // rate in silence, down to a millionth of it.
                if backend == Some(Backend::Redis) && period.as_nanos() < u128::from(limit) * 1000 {
                    s.invalid(
                        "limit_refresh_period",
                        format!("is too short for `limit_for_period` = {limit} with `type = \"token_bucket\"` and `backend = \"redis\"`: the shared bucket gives at most one permit per microsecond (1,000,000 per second); lengthen the period, lower `limit_for_period`, or use `type = \"fixed_window\"`"),
                    );
                    return None;
                }
            }
            (Some("fixed_window"), _, Some(period)) if period.subsec_nanos() % 1_000_000 != 0 => {
                s.invalid(
                    "limit_refresh_period",
                    "must be a whole number of milliseconds for `type = \"fixed_window\"` (use `type = \"token_bucket\"` for a finer period)",
                );
                return None;
            }
            _ => {}
        }
        Some(Self {
            enabled: enabled?,
            algorithm: match algorithm? {
                "token_bucket" => Algorithm::TokenBucket,
                _ => Algorithm::FixedWindow,
            },
            limit_for_period: u32::try_from(limit?).ok()?,
            limit_refresh_period: period?,
            max_wait: match max_wait {
                None => None,
                Some(d) => Some(d?),
            },
            backend: backend?,
            on_backend_failure: on_backend_failure?,
            lease: lease?,
        })
    }
}

/// Reads `backend`, `on_backend_failure`, `local_limit_for_period` and
/// `lease`; `limit` is `limit_for_period`, if valid.
fn read_backend(
    s: &mut Section<'_>,
    limit: Option<u64>,
) -> (Option<Backend>, Option<OnBackendFailure>, Option<u32>) {
    let lease = match (s.int("lease", Some(1), 1, COUNT_MASK), limit) {
        (Some(lease), Some(limit)) if lease > limit => {
            s.invalid(
                "lease",
                format!("must be at most `limit_for_period` ({limit}): one round trip takes at most a period's permits"),
            );
            None
        }
        (lease, _) => lease.and_then(|l| u32::try_from(l).ok()),
    };
    let share = LocalShare {
        key: "local_limit_for_period",
        most: COUNT_MASK,
        of: "limit_for_period",
        is: "the permits per period this process gives on its own while Redis makes no decision",
        shared: "limit",
        local: "limiter",
        redis_only: &["lease"],
    };
    let (backend, policy) = crate::backend::read_backend(s, &share, limit);
    let policy = policy.map(|p| match p {
        Policy::Deny => OnBackendFailure::Deny,
        Policy::Allow => OnBackendFailure::Allow,
        Policy::Local(limit_for_period) => OnBackendFailure::Local { limit_for_period },
    });
    (backend, policy, lease)
}

/// The shared instance of one rate limiter spec: its permits, its settings
/// and its telemetry. Reached through a [`RateLimiterHandle`].
#[derive(Debug)]
pub struct RateLimiter {
    config: Versions<Config>,
    telemetry: Telemetry,
    /// Read once per permit: see [`clock`].
    clock: Clock,
    /// `fixed_window`: the window's start (ms since `origin`, high bits) and
    /// the permits taken in it (low 20 bits). `token_bucket`: the theoretical
    /// arrival time, in ns since `origin`.
    word: AtomicU64,
    /// The shared backend of the registry, if it has one: asked when the
    /// settings say `backend = "redis"`.
    /// Boxed: a limiter kept in the process stays as small as before.
    remote: OnceLock<Box<Remote>>,
}

/// The settings a rate limiter runs with, in its clock's units.
#[derive(Debug)]
struct Config {
    settings: RateLimiterSettings,
    /// Whether a permit takes another way than the local word: disabled, or
    /// decided by a backend. One test on the way of every permit.
    unusual: bool,
    /// `backend = "redis"`: what to ask, and the limiter of
    /// `on_backend_failure = "local"`.
    remote: Option<RemoteConfig>,
    period_ms: u64,
    /// `token_bucket`: ns between two permits, and the burst tolerance.
    interval_ns: u64,
    tolerance_ns: u64,
}

/// What a limiter whose permits live in a backend asks it.
#[derive(Debug)]
struct RemoteConfig {
    ask: Ask,
    lease: u64,
    /// `on_backend_failure = "local"`: the local limiter's settings, with
    /// this process's share.
    local: Option<Box<Config>>,
}

impl Tag for Config {}

impl Config {
    fn of(settings: RateLimiterSettings) -> Self {
        let period_ns = nanos(settings.limit_refresh_period);
        let interval_ns = (period_ns / u64::from(settings.limit_for_period.max(1))).max(1);
        let remote = (settings.backend == Backend::Redis).then(|| RemoteConfig {
            lease: u64::from(settings.lease),
            ask: match settings.algorithm {
                Algorithm::FixedWindow => {
                    Ask::fixed_window(settings.limit_for_period, settings.limit_refresh_period)
                }
                Algorithm::TokenBucket => {
                    Ask::token_bucket(settings.limit_for_period, settings.limit_refresh_period)
                }
            },
            local: match settings.on_backend_failure {
                OnBackendFailure::Local { limit_for_period } => {
                    Some(Box::new(Config::of(RateLimiterSettings {
                        enabled: true,
                        limit_for_period,
                        backend: Backend::Local,
                        on_backend_failure: OnBackendFailure::Deny,
                        ..settings
                    })))
                }
                _ => None,
            },
        });
        Self {
            unusual: !settings.enabled || remote.is_some(),
            remote,
            period_ms: u64::try_from(settings.limit_refresh_period.as_millis())
                .unwrap_or(u64::MAX)
                .max(1),
            interval_ns,
            tolerance_ns: interval_ns
                .saturating_mul(u64::from(settings.limit_for_period.saturating_sub(1))),
            settings,
        }
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A fixed window's word brought to `now_ms`: its window's start and the
/// permits taken in it. Windows that passed give back their permits;
/// reserved permits that remain keep the windows back to back, else a new
/// window starts at `now_ms`. Divides only when a window has passed.
#[inline(always)]
fn roll(word: u64, now_ms: u64, period: u64, limit: u64) -> (u64, u64) {
    let (start, taken) = (word >> COUNT_BITS, word & COUNT_MASK);
    let elapsed = now_ms.saturating_sub(start);
    if elapsed < period {
        return (start, taken);
    }
    let passed = elapsed / period;
    match taken.checked_sub(passed.saturating_mul(limit)) {
        Some(left) if left > 0 => (start + passed * period, left),
        _ => (now_ms, 0),
    }
}

/// A fixed window due at `due_ms`, past what u64 nanoseconds hold: whether
/// its wait from `now` (ns) is longer than `max_wait`, and the wait in ns.
#[cold]
fn far(due_ms: u64, now: u64, max_wait: Duration) -> (bool, u128) {
    let wait = (u128::from(due_ms) * 1_000_000).saturating_sub(u128::from(now));
    (wait > max_wait.as_nanos(), wait)
}

/// `ns` nanoseconds as a Duration, exactly (past u64 nanoseconds too).
#[inline]
fn from_nanos(ns: u128) -> Duration {
    if ns == 0 {
        return Duration::ZERO;
    }
    match u64::try_from(ns) {
        Ok(ns) => Duration::from_nanos(ns),
        Err(_) => {
            let secs = u64::try_from(ns / 1_000_000_000).unwrap_or(u64::MAX);
            let sub = u32::try_from(ns % 1_000_000_000).unwrap_or(0);
            Duration::new(secs, sub)
        }
    }
}

impl Sealed for RateLimiter {}

impl Mechanism for RateLimiter {
    const KIND: SpecKind = SpecKind::RATE_LIMITER;
    const OUTCOMES: &'static [Outcome] = &[
        Outcome::Success,
        Outcome::Failure,
        Outcome::Rejected,
        Outcome::Cancelled,
    ];
    type Settings = RateLimiterSettings;

    fn read(section: &mut Section<'_>) -> Option<RateLimiterSettings> {
        RateLimiterSettings::read(section)
    }

    fn build(settings: RateLimiterSettings, telemetry: Telemetry) -> Self {
        Self {
            config: Versions::new(Config::of(settings)),
            telemetry,
            clock: Clock::new(),
            word: AtomicU64::new(0),
            remote: OnceLock::new(),
        }
    }

    fn attach(&self, context: &Context) {
        if let Some(remote) = Remote::of(context, self.telemetry.path(), None) {
            let _ = self.remote.set(Box::new(remote));
        }
    }

    fn inherit(&self, base: &Self, key: crate::keyed::KeyRef<'_>) {
        if let Some(remote) = base.remote.get() {
            let _ = self
                .remote
                .set(Box::new(remote.for_key(self.telemetry.path(), key)));
        }
    }

    fn check(settings: &RateLimiterSettings, context: &Context) -> Option<(&'static str, String)> {
        match settings.backend {
            Backend::Redis => crate::backend::check_redis(context),
            Backend::Local => None,
        }
    }

    fn reconfigure(&self, settings: RateLimiterSettings) -> Vec<String> {
        let was = self.config.get();
        let (old_algorithm, old_interval, old_backend) = (
            was.settings.algorithm,
            was.interval_ns,
            was.settings.backend,
        );
        let (now, _) = self
            .config
            .publish(|c| c.settings == settings, || Config::of(settings));
        if let Some(remote) = self.remote.get() {
            remote.forget();
        }
        if now.settings.algorithm != old_algorithm {
            // The other algorithm's word means something else: start afresh.
            self.word.store(0, Ordering::Release);
            return vec!["a new `type`: its permits start afresh, as at startup".to_owned()];
        }
        if now.settings.backend != old_backend {
            // The local word counted the whole limit, or the local share.
            self.word.store(0, Ordering::Release);
            return vec!["a new `backend`: the permits of this process start afresh".to_owned()];
        }
        if now.settings.algorithm == Algorithm::TokenBucket && now.interval_ns != old_interval {
            // The permits spent, counted in the new interval: what is owed
            // beyond now stays owed.
            let at = self.now_ns();
            let _ = self
                .word
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |tat| {
                    let owed = u128::from(tat.saturating_sub(at));
                    let scaled = owed * u128::from(now.interval_ns) / u128::from(old_interval);
                    Some(at.saturating_add(u64::try_from(scaled).unwrap_or(u64::MAX)))
                });
        }
        Vec::new()
    }

    fn settings(&self) -> &RateLimiterSettings {
        &self.config.get().settings
    }

    fn telemetry(&self) -> &Telemetry {
        &self.telemetry
    }

    fn status(&self) -> Option<Arc<dyn Part>> {
        Some(Arc::new(self.permits()?))
    }

    const KEYED: bool = true;

    fn evictable(&self) -> bool {
        let c = self.config.get();
        if !c.settings.enabled {
            return true;
        }
        let (w, now) = (self.word.load(Ordering::Acquire), self.now_ns());
        match c.settings.algorithm {
            // Every permit taken belongs to windows that have passed: a new
            // window would start with the next call, as in a fresh limiter.
            Algorithm::FixedWindow => {
                let (start, taken) = (w >> COUNT_BITS, w & COUNT_MASK);
                let passed = (now / 1_000_000).saturating_sub(start) / c.period_ms;
                taken <= passed.saturating_mul(u64::from(c.settings.limit_for_period))
                    && (taken == 0 || passed > 0)
            }
            // The bucket is full again.
            Algorithm::TokenBucket => w <= now,
        }
    }
}

/// A rate limiter's permits now, as this process counts them: its part of
/// the registry's [`Snapshot`](crate::Snapshot), for a limiter kept in
/// the process and enabled (one whose permits live in Redis shows none:
/// the process does not know them without asking).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Permits {
    /// Permits a call could take now, without waiting.
    pub available: u32,
    /// Permits per period: `limit_for_period`.
    pub limit_for_period: u32,
}

impl RateLimiter {
    /// Its permits now (see [`Permits`]): one clock read, nothing written.
    fn permits(&self) -> Option<Permits> {
        let c = self.config.get();
        if c.unusual {
            return None;
        }
        let limit = u64::from(c.settings.limit_for_period);
        let (w, now) = (self.word.load(Ordering::Acquire), self.now_ns());
        let available = match c.settings.algorithm {
            Algorithm::FixedWindow => {
                let (_, taken) = roll(w, now / 1_000_000, c.period_ms, limit);
                limit.saturating_sub(taken)
            }
            // A permit is due now while the bucket's arrival time lies
            // within the burst tolerance of now; each one moves it an
            // interval later.
            Algorithm::TokenBucket => {
                let ahead = w.saturating_sub(now);
                match c.tolerance_ns.checked_sub(ahead) {
                    Some(room) => room / c.interval_ns.max(1) + 1,
                    None => 0,
                }
            }
        };
        Some(Permits {
            available: u32::try_from(available.min(limit)).unwrap_or(u32::MAX),
            limit_for_period: c.settings.limit_for_period,
        })
    }

    /// Takes a permit due within `max_wait` (now, or reserved for later):
    /// `Ok` with how long until it is due, or `Err` with how long until a
    /// permit would be free.
    #[inline]
    fn take(&self, c: &Config, max_wait: Duration) -> Result<Taken, Duration> {
        if c.unusual {
            return self.unusual(c);
        }
        self.take_usual(c, max_wait)
    }

    /// [`take`](Self::take) of a limiter that is enabled and kept in the
    /// process.
    #[inline]
    fn take_usual(&self, c: &Config, max_wait: Duration) -> Result<Taken, Duration> {
        let now = self.now_ns();
        // Durations are made once, here: the decision itself is integers.
        match c.settings.algorithm {
            // Exact: a window can be due beyond what u64 nanoseconds hold
            // (584 years), and `max_wait` can be longer too.
            Algorithm::FixedWindow => match self.fixed_window(c, now, max_wait) {
                Ok(wait) => Ok(Taken {
                    wait: from_nanos(wait),
                    at: now,
                    tat: 0,
                    interval_ns: 0,
                }),
                Err(wait) => Err(from_nanos(wait)),
            },
            // A bucket's waits fit: its period is at most 584 years.
            Algorithm::TokenBucket => match self.token_bucket(c, now, nanos(max_wait)) {
                Ok((wait, tat, interval_ns)) => Ok(Taken {
                    // A permit due now, the case to keep short, makes no
                    // Duration from nanoseconds.
                    wait: if wait == 0 {
                        Duration::ZERO
                    } else {
                        Duration::from_nanos(wait)
                    },
                    at: now,
                    tat,
                    interval_ns,
                }),
                Err(wait) => Err(Duration::from_nanos(wait)),
            },
        }
    }

    /// [`take`](Self::take) with the spec's `max_wait`; without one, the
    /// short path of a permit due now.
    #[inline(always)]
    fn take_as_set(&self, c: &Config) -> Result<Taken, Duration> {
        if c.unusual {
            return self.unusual(c);
        }
        self.take_as_set_usual(c)
    }

    /// [`take_as_set`](Self::take_as_set) of a limiter that is enabled and
    /// kept in the process: the caller tested `unusual`, once.
    #[inline(always)]
    fn take_as_set_usual(&self, c: &Config) -> Result<Taken, Duration> {
        match c.settings.max_wait {
            None => self.take_now_usual(c).map(|()| Taken::NOW),
            Some(max_wait) => self.take_usual(c, max_wait),
        }
    }

    /// Takes a permit due now, or says how long until one would be: what
    /// [`take`](Self::take) does with no `max_wait`, kept short for a
    /// handle's `try_acquire` (no reservation to describe, a token bucket's
    /// decision inline).
    #[inline(always)]
    fn take_now(&self, c: &Config) -> Result<(), Refused> {
        if c.unusual {
            return self.take_now_unusual(c);
        }
        self.take_now_usual(c).map_err(Refused::Limit)
    }

    /// [`take_now`](Self::take_now) of a limiter that is enabled and kept
    /// in the process.
    #[inline(always)]
    fn take_now_usual(&self, c: &Config) -> Result<(), Duration> {
        let now = self.now_ns();
        match c.settings.algorithm {
            Algorithm::TokenBucket => self
                .token_bucket(c, now, 0)
                .map(drop)
                .map_err(Duration::from_nanos),
            Algorithm::FixedWindow => self.fixed_window_now(c, now),
        }
    }

    /// [`fixed_window`](Self::fixed_window) for a permit due now, in u64:
    /// a window with a permit left gives it; a full one asks the general
    /// path how long until one would be.
    #[inline(always)]
    fn fixed_window_now(&self, c: &Config, now: u64) -> Result<(), Duration> {
        let now_ms = now / 1_000_000;
        let limit = u64::from(c.settings.limit_for_period);
        let period = c.period_ms;
        let taken = self
            .word
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                if w >> COUNT_BITS > now_ms {
                    // A window begun after this call's reading (another
                    // thread read the clock later, the call is deciding
                    // now): the call is counted in it, if it has a permit
                    // left. The word's start is never ahead of the latest
                    // reading, so this is no later window's permit.
                    return (w & COUNT_MASK < limit).then_some(w + 1);
                }
                let (start, taken) = roll(w, now_ms, period, limit);
                // The window began at or before `now` (a new one at `now`,
                // reserved ones back to back up to it): a permit it has left
                // is due now.
                (taken < limit).then_some((start << COUNT_BITS) | (taken + 1))
            });
        match taken {
            Ok(_) => Ok(()),
            Err(_) => self
                .fixed_window(c, now, Duration::ZERO)
                .map(drop)
                .map_err(from_nanos),
        }
    }

    /// The permit of a limiter that is disabled (due now), or whose
    /// backend decides: a permit this process leased, a refusal it knows
    /// of, or [`Taken::ASK`] (the call asks the backend while it waits).
    #[cold]
    #[inline(never)]
    fn unusual(&self, c: &Config) -> Result<Taken, Duration> {
        if !c.settings.enabled || c.remote.is_none() {
            return Ok(Taken::NOW);
        }
        let max_wait = c.settings.max_wait.unwrap_or(Duration::ZERO);
        match self
            .remote
            .get()
            .and_then(|r| r.at_hand(self.now_ns(), max_wait))
        {
            Some(Ok(())) => Ok(Taken::NOW),
            Some(Err(retry_after)) => Err(retry_after),
            None => Ok(Taken::ASK),
        }
    }

    /// [`take_now`](Self::take_now) of a disabled limiter, or of one whose
    /// backend decides: asked at once on the backend's blocking connection,
    /// the thread blocked for the round trip (the handle's `try_acquire`
    /// has no future to wait in).
    #[cold]
    #[inline(never)]
    fn take_now_unusual(&self, c: &Config) -> Result<(), Refused> {
        let Some((rc, remote)) = self.backend_of(c) else {
            return Ok(());
        };
        let answer = match remote {
            Some(remote) => {
                let now = || self.now_ns();
                remote.decide_blocking(rc.ask, Duration::ZERO, rc.lease, &now)
            }
            None => Err(NO_BACKEND),
        };
        match self.answered(c, rc, answer, Duration::ZERO) {
            Ok(wait) if wait.is_zero() => Ok(()),
            // Not given with no `max_wait`; refused if it were.
            Ok(wait) => Err(Refused::Limit(wait)),
            Err(refused) => Err(refused),
        }
    }

    /// What a call gets from a backend's `answer` (or its absence, by
    /// `on_backend_failure`): `Ok` with the wait until its permit is due,
    /// or why it has none.
    fn answered(
        &self,
        c: &Config,
        rc: &RemoteConfig,
        answer: Result<Answer, Unavailable>,
        max_wait: Duration,
    ) -> Result<Duration, Refused> {
        match answer {
            Ok(Answer::Admitted(wait)) => Ok(wait),
            Ok(Answer::Refused(retry_after)) => Err(Refused::Limit(retry_after)),
            Err(_) => {
                let policy = match c.settings.on_backend_failure {
                    OnBackendFailure::Deny => "deny",
                    OnBackendFailure::Allow => "allow",
                    OnBackendFailure::Local { .. } => "local",
                };
                if self.telemetry.metrics_on() {
                    self.telemetry
                        .counter(
                            "resilient_rate_limiter_backend_unavailable_total",
                            &[("policy", policy)],
                        )
                        .increment(1);
                }
                match (c.settings.on_backend_failure, &rc.local) {
                    (OnBackendFailure::Allow, _) => Ok(Duration::ZERO),
                    // This process's share: a refusal of it is its limit's.
                    (OnBackendFailure::Local { .. }, Some(local)) => self
                        .take(local, max_wait)
                        .map(|t| t.wait)
                        .map_err(Refused::Limit),
                    // No limit was reached: the backend could not say.
                    _ => Err(Refused::Unavailable),
                }
            }
        }
    }

    /// The settings `c` decided by a backend, with this limiter's way to it
    /// (always there when they are: the registry checks it when built);
    /// `None` when the settings now in force decide in the process.
    fn backend_of<'c>(&'c self, c: &'c Config) -> Option<(&'c RemoteConfig, Option<&'c Remote>)> {
        let rc = c.remote.as_ref().filter(|_| c.settings.enabled)?;
        Some((rc, self.remote.get().map(|r| &**r)))
    }

    /// A call's outcome: the wait until its permit is due, or the error
    /// that refuses it (counted as a rejection).
    fn settled(
        &self,
        c: &Config,
        spec: &'static str,
        outcome: Result<Duration, Refused>,
    ) -> Result<Duration, Error> {
        outcome.map_err(|refused| match refused {
            Refused::Limit(retry_after) => {
                self.rejected(c, retry_after);
                self.exceeded(spec, retry_after)
            }
            Refused::Unavailable => {
                crate::telemetry::log_rejection!(
                    "resilient::rate_limiter",
                    &self.telemetry,
                    None,
                    "its Redis backend is unavailable, and its `on_backend_failure` is \"deny\""
                );
                Error::BackendUnavailable {
                    spec,
                    backend: "redis",
                }
            }
        })
    }

    /// The error of a handle's `try_acquire` refused for `refused`.
    #[cold]
    fn refused(&self, spec: &'static str, refused: Refused) -> Error {
        match refused {
            Refused::Limit(retry_after) => self.exceeded(spec, retry_after),
            Refused::Unavailable => Error::BackendUnavailable {
                spec,
                backend: "redis",
            },
        }
    }

    /// Asks the backend for the permit of a call (a [`Taken::ASK`]), and
    /// waits until it is due.
    async fn ask(&self, spec: &'static str) -> Result<(), Error> {
        let c = self.config.get();
        let max_wait = c.settings.max_wait.unwrap_or(Duration::ZERO);
        let outcome = match self.backend_of(c) {
            Some((rc, remote)) => {
                let answer = match remote {
                    Some(remote) => {
                        let now = || self.now_ns();
                        Box::pin(remote.decide(rc.ask, max_wait, rc.lease, &now)).await
                    }
                    None => Err(NO_BACKEND),
                };
                self.answered(c, rc, answer, max_wait)
            }
            // Reloaded meanwhile: the settings now in force decide.
            None => self
                .take(c, max_wait)
                .map(|t| t.wait)
                .map_err(Refused::Limit),
        };
        let wait = self.settled(c, spec, outcome)?;
        if !wait.is_zero() {
            Box::pin(tokio::time::sleep(wait)).await;
        }
        Ok(())
    }

    /// [`ask`](Self::ask), blocking the thread.
    fn ask_blocking(&self, spec: &'static str) -> Result<(), Error> {
        let c = self.config.get();
        let max_wait = c.settings.max_wait.unwrap_or(Duration::ZERO);
        let outcome = match self.backend_of(c) {
            Some((rc, remote)) => {
                let now = || self.now_ns();
                let answer = match remote {
                    Some(remote) => remote.decide_blocking(rc.ask, max_wait, rc.lease, &now),
                    None => Err(NO_BACKEND),
                };
                self.answered(c, rc, answer, max_wait)
            }
            None => self
                .take(c, max_wait)
                .map(|t| t.wait)
                .map_err(Refused::Limit),
        };
        crate::blocking::sleep(self.settled(c, spec, outcome)?);
        Ok(())
    }

    /// Nanoseconds since the limiter was built, on its clock.
    #[inline(always)]
    fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    /// `Ok(wait)` for a permit due in `wait` ns, or `Err(wait)` for how
    /// long until one would be; `now` in ns since `origin`.
    fn fixed_window(&self, c: &Config, now: u64, max_wait: Duration) -> Result<u128, u128> {
        let now_ms = now / 1_000_000;
        let max_wait_ns = nanos(max_wait);
        let limit = u64::from(c.settings.limit_for_period);
        let period = c.period_ms;
        let mut outcome = Err(0);
        let _ = self
            .word
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                let (start, taken) = roll(w, now_ms, period, limit);
                // Permit `taken` is due when its window starts.
                let due_ms = if taken < limit {
                    start
                } else {
                    start.saturating_add((taken / limit).saturating_mul(period))
                };
                let late = match due_ms.checked_mul(1_000_000) {
                    // Exact in u64: a `max_wait` past u64 nanoseconds
                    // (saturated) is longer than any such wait.
                    Some(due) => {
                        let wait = due.saturating_sub(now);
                        (wait > max_wait_ns, u128::from(wait))
                    }
                    // Due beyond 584 years: weighed in u128.
                    None => far(due_ms, now, max_wait),
                };
                let (late, wait) = late;
                if late || taken == COUNT_MASK {
                    outcome = Err(wait);
                    return None;
                }
                outcome = Ok(wait);
                Some((start << COUNT_BITS) | (taken + 1))
            });
        outcome
    }

    /// As [`fixed_window`](Self::fixed_window), in u64 nanoseconds:
    /// `Ok((wait, tat, interval))` with the arrival time the permit moved
    /// the bucket to.
    #[inline(always)]
    fn token_bucket(&self, c: &Config, now: u64, max_wait: u64) -> Result<(u64, u64, u64), u64> {
        let mut outcome = Err(0);
        let _ = self
            .word
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |tat| {
                let from = tat.max(now);
                // How far this permit lies beyond the burst the bucket allows.
                let wait = (from - now).saturating_sub(c.tolerance_ns);
                if wait > max_wait {
                    outcome = Err(wait);
                    return None;
                }
                let next = from.saturating_add(c.interval_ns);
                outcome = Ok((wait, next, c.interval_ns));
                Some(next)
            });
        outcome
    }

    /// Gives back a `token_bucket` permit reserved by a call that was
    /// cancelled before it was due, if no later call reserved one since.
    fn give_back(&self, taken: Taken) {
        if taken.interval_ns != 0 {
            let _ = self.word.compare_exchange(
                taken.tat,
                taken.tat - taken.interval_ns,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
    }

    /// Tells the telemetry that a call found no permit.
    fn rejected(&self, c: &Config, retry_after: Duration) {
        let limit = c.settings.limit_for_period;
        let period = c.settings.limit_refresh_period;
        crate::telemetry::log_rejection!(
            "resilient::rate_limiter",
            &self.telemetry,
            Some(retry_after),
            "more than {limit} per {period:?}"
        );
    }

    #[cold]
    fn exceeded(&self, spec: &'static str, retry_after: Duration) -> Error {
        self.clock.check_paused(spec);
        Error::RateLimitExceeded { spec, retry_after }
    }

    /// Takes a permit, reserving one due within `max_wait` and sleeping until
    /// it is due.
    pub(crate) async fn acquire(&self, spec: &'static str) -> Result<(), Error> {
        let c = self.config.get();
        let taken = self.take_as_set(c).map_err(|retry_after| {
            self.rejected(c, retry_after);
            self.exceeded(spec, retry_after)
        })?;
        if !taken.wait.is_zero() {
            if taken.is_ask() {
                return self.ask(spec).await;
            }
            self.clock.check_paused(spec);
            self.wait_for(taken).await;
        }
        Ok(())
    }

    /// Sleeps until the reserved permit `taken` is due; boxed, so that only
    /// a call that waits carries a timer in its future.
    async fn wait_for(&self, taken: Taken) {
        let reservation = Reservation {
            limiter: self,
            taken,
            due: false,
        };
        // Until the moment the permit is due, not `wait` from now: a tower
        // layer's response future may start its wait long after `call`.
        match self.clock.deadline(taken.at, taken.wait) {
            Some(due) => Box::pin(tokio::time::sleep_until(due)).await,
            None => Box::pin(tokio::time::sleep(taken.wait)).await,
        }
        reservation.due();
    }

    /// As [`wait_for`](Self::wait_for), blocking the thread; a panic
    /// meanwhile gives the permit back as a drop does.
    fn wait_blocking(&self, taken: Taken) {
        let reservation = Reservation {
            limiter: self,
            taken,
            due: false,
        };
        crate::blocking::sleep(taken.wait);
        reservation.due();
    }
}

/// A permit taken from a limiter.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Taken {
    /// How long until the permit is due.
    wait: Duration,
    /// When it was taken, in ns since the limiter's origin (the same clock
    /// reading `wait` was computed from): the permit is due at `at + wait`,
    /// however late its wait starts.
    at: u64,
    /// `token_bucket`: the arrival time the permit moved the bucket to.
    tat: u64,
    /// `token_bucket`: the bucket's interval then; 0 for `fixed_window`.
    interval_ns: u64,
}

impl Taken {
    const NOW: Taken = Taken {
        wait: Duration::ZERO,
        at: 0,
        tat: 0,
        interval_ns: 0,
    };

    /// No permit yet: the backend is asked while the call waits (not due
    /// now, so that a call takes the way of a reserved permit).
    const ASK: Taken = Taken {
        wait: Duration::MAX,
        at: u64::MAX,
        tat: 0,
        interval_ns: 0,
    };

    fn is_ask(&self) -> bool {
        self.at == u64::MAX
    }
}

/// A reserved permit whose call sleeps until it is due; dropped before then
/// (the call was cancelled), it gives the permit back where it can.
struct Reservation<'a> {
    limiter: &'a RateLimiter,
    taken: Taken,
    due: bool,
}

impl Reservation<'_> {
    fn due(mut self) {
        self.due = true;
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if !self.due {
            self.limiter.give_back(self.taken);
        }
    }
}

/// Access to a rate limiter spec's shared limiter; cheap to clone.
///
/// # Example
///
/// ```
/// use resilient_core::prelude::*;
/// use resilient_core::Registry;
///
/// #[derive(RateLimiterSpec)]
/// #[spec("resilient.ratelimiter.pet")]
/// pub struct PetRate;
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
/// #         "[resilient.ratelimiter.pet]\nlimit_for_period = 1\nlimit_refresh_period = \"1h\"",
/// #         config::FileFormat::Toml,
/// #     ))
/// #     .build()?;
/// # let registry = resilient_config::build(Registry::builder().spec::<PetRate>(), &settings)?;
/// # let _guard = registry.set_default();
/// let rate = PetRate::get()?;
/// let first: Result<u32, PetError> = rate.call(|| async { Ok(7) }).await;
/// assert_eq!(first?, 7);
/// // The period's one permit is spent: the next call is refused, not run.
/// assert!(rate.try_acquire().is_err());
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct RateLimiterHandle<S> {
    inner: Shared<RateLimiter>,
    _spec: PhantomData<fn() -> S>,
}

impl<S> Clone for RateLimiterHandle<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            _spec: PhantomData,
        }
    }
}

impl<S: RateLimiterSpec> RateLimiterHandle<S> {
    /// The spec's validated settings, as running now.
    pub fn settings(&self) -> &RateLimiterSettings {
        &self.inner.config.get().settings
    }

    /// Takes a permit now, whatever `max_wait` says.
    ///
    /// # Errors
    ///
    /// [`Error::RateLimitExceeded`] with the time until a permit would be free.
    #[inline]
    pub fn try_acquire(&self) -> Result<(), Error> {
        let c = self.inner.config.get();
        self.inner
            .take_now(c)
            .map_err(|refused| self.inner.refused(S::NAME, refused))
    }

    /// Takes a permit, reserving one due within `max_wait` and waiting until
    /// it is due.
    ///
    /// # Errors
    ///
    /// [`Error::RateLimitExceeded`], at once, when no permit is due within
    /// `max_wait`.
    pub async fn acquire(&self) -> Result<(), Error> {
        self.inner.acquire(S::NAME).await
    }

    /// Runs `f` if a permit can be had.
    pub async fn call<T, E, F, Fut>(&self, f: F) -> Result<T, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: From<Error>,
    {
        self.acquire().await?;
        f().await
    }
}

/// One call under a rate limiter, as the generated code makes it:
/// [`try_enter`](RateCall::try_enter) (and [`wait`](RateCall::wait) for a
/// reserved permit), then [`Granted::exit`] with the outcome.
#[doc(hidden)]
pub struct RateCall {
    key: &'static Key<RateLimiter>,
    instance: Option<Shared<RateLimiter>>,
}

/// A permit granted.
#[doc(hidden)]
pub struct Granted<'a> {
    limiter: &'a RateLimiter,
    started: Option<Instant>,
}

/// A permit reserved, due after a wait.
#[doc(hidden)]
pub struct Reserved<'a> {
    limiter: &'a RateLimiter,
    taken: Taken,
    started: Option<Instant>,
}

/// Counts a call dropped before its outcome as cancelled, if it is timed.
fn cancelled(limiter: &RateLimiter, started: &mut Option<Instant>) {
    if let Some(at) = started.take() {
        limiter
            .telemetry
            .ended(Outcome::Cancelled, Some(at.elapsed()));
    }
}

/// A [`Granted`] permit, as plain data (see [`crate::stream`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct GrantedParts {
    started: Option<Instant>,
}

/// A [`Reserved`] permit, as plain data.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReservedParts {
    taken: Taken,
    started: Option<Instant>,
}

impl<'a> Granted<'a> {
    /// The permit as plain data: nothing is counted until
    /// [`from_parts`](Self::from_parts) makes it a guard again.
    pub(crate) fn into_parts(self) -> GrantedParts {
        let parts = GrantedParts {
            started: self.started,
        };
        std::mem::forget(self);
        parts
    }

    /// The guard `parts` came from, of `limiter`.
    pub(crate) fn from_parts(limiter: &'a RateLimiter, parts: GrantedParts) -> Self {
        Self {
            limiter,
            started: parts.started,
        }
    }
}

impl<'a> Reserved<'a> {
    /// The reservation as plain data (see [`Granted::into_parts`]).
    pub(crate) fn into_parts(self) -> ReservedParts {
        let parts = ReservedParts {
            taken: self.taken,
            started: self.started,
        };
        std::mem::forget(self);
        parts
    }

    /// The reservation `parts` came from, of `limiter`.
    pub(crate) fn from_parts(limiter: &'a RateLimiter, parts: ReservedParts) -> Self {
        Self {
            limiter,
            taken: parts.taken,
            started: parts.started,
        }
    }
}

impl RateCall {
    /// Another call of the same spec and instance.
    pub(crate) fn duplicate(&self) -> Self {
        Self {
            key: self.key,
            instance: self.instance.clone(),
        }
    }

    /// The limiter this call asks, if the spec has settings.
    pub(crate) fn limiter(&self) -> Option<&RateLimiter> {
        self.instance.as_deref()
    }

    /// Gives back the permit reserved in `parts`, and counts its call as
    /// cancelled: its wait was handed out and never started.
    pub(crate) fn abandon_wait(&self, parts: ReservedParts) {
        if let Some(limiter) = self.limiter() {
            drop(Reservation {
                limiter,
                taken: parts.taken,
                due: false,
            });
            drop(Reserved::from_parts(limiter, parts));
        }
    }

    /// [`wait`](Self::wait) for the reservation that `parts` came from.
    pub(crate) async fn wait_from_parts(&self, parts: ReservedParts) -> Result<Granted<'_>, Error> {
        let Some(limiter) = self.limiter() else {
            return Err(self.key.not_configured());
        };
        self.wait(Reserved::from_parts(limiter, parts)).await
    }
}

impl Drop for Reserved<'_> {
    #[inline]
    fn drop(&mut self) {
        cancelled(self.limiter, &mut self.started);
    }
}

impl Drop for Granted<'_> {
    #[inline]
    fn drop(&mut self) {
        cancelled(self.limiter, &mut self.started);
    }
}

impl RateCall {
    #[inline]
    pub(crate) fn new(
        key: &'static Key<RateLimiter>,
        instance: Option<Shared<RateLimiter>>,
    ) -> Self {
        Self { key, instance }
    }

    /// A permit due now, taken without entering an async fn; `Wait` for one
    /// reserved within `max_wait`.
    #[inline(always)]
    pub fn try_enter(&self) -> Enter<Granted<'_>, Reserved<'_>> {
        let Some(instance) = &self.instance else {
            return Enter::Ready(Err(self.key.not_configured()));
        };
        let limiter = &**instance;
        let c = limiter.config.get();
        let started = limiter.telemetry.start();
        if c.unusual {
            return self.enter_unusual(limiter, c, started);
        }
        match limiter.take_as_set_usual(c) {
            Ok(taken) if taken.wait.is_zero() => Enter::Ready(Ok(Granted { limiter, started })),
            Ok(taken) => {
                limiter.clock.check_paused(self.key.name);
                Enter::Wait(Reserved {
                    limiter,
                    taken,
                    started,
                })
            }
            Err(retry_after) => {
                limiter.rejected(c, retry_after);
                Enter::Ready(Err(limiter.exceeded(self.key.name, retry_after)))
            }
        }
    }

    /// [`try_enter`](Self::try_enter) of a limiter that is disabled, or
    /// whose backend decides: out of the way of a permit kept in the
    /// process.
    #[cold]
    #[inline(never)]
    fn enter_unusual<'a>(
        &self,
        limiter: &'a RateLimiter,
        c: &Config,
        started: Option<Instant>,
    ) -> Enter<Granted<'a>, Reserved<'a>> {
        match limiter.unusual(c) {
            Ok(taken) if taken.wait.is_zero() => Enter::Ready(Ok(Granted { limiter, started })),
            Ok(taken) => Enter::Wait(Reserved {
                limiter,
                taken,
                started,
            }),
            Err(retry_after) => {
                limiter.rejected(c, retry_after);
                Enter::Ready(Err(limiter.exceeded(self.key.name, retry_after)))
            }
        }
    }

    /// Sleeps until the reserved permit is due.
    pub async fn wait<'a>(&'a self, mut reserved: Reserved<'a>) -> Result<Granted<'a>, Error> {
        let limiter = reserved.limiter;
        if reserved.taken.is_ask() {
            if let Err(e) = limiter.ask(self.key.name).await {
                // Counted as rejected, not as cancelled.
                reserved.started = None;
                return Err(e);
            }
        } else {
            limiter.wait_for(reserved.taken).await;
        }
        Ok(Granted {
            limiter,
            started: reserved.started.take(),
        })
    }

    /// As [`wait`](Self::wait), blocking the thread (a blocking fn; see
    /// [`crate::blocking`]).
    pub fn wait_blocking<'a>(&'a self, mut reserved: Reserved<'a>) -> Result<Granted<'a>, Error> {
        let limiter = reserved.limiter;
        if reserved.taken.is_ask() {
            if let Err(e) = limiter.ask_blocking(self.key.name) {
                reserved.started = None;
                return Err(e);
            }
        } else {
            limiter.wait_blocking(reserved.taken);
        }
        Ok(Granted {
            limiter,
            started: reserved.started.take(),
        })
    }
}

impl Granted<'_> {
    /// Passes on the outcome of the call.
    #[inline(always)]
    pub fn exit<T, E>(&mut self, outcome: Result<T, Fail<E>>) -> Result<T, Fail<E>> {
        self.limiter.telemetry.done(outcome, self.started.take())
    }
}
