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
//! a call waits that long at most for a permit instead.

use std::any::TypeId;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::Error;
use crate::outcome::Fail;
use crate::settings::{Section, Value};
use crate::spec::Spec;

/// A rate limiter spec: implemented by `#[derive(RateLimiterSpec)]`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a rate limiter spec",
    label = "`#[rate_limited]` needs a type declared with `#[derive(RateLimiterSpec)]`",
    note = "declare one with `#[derive(RateLimiterSpec)] #[spec(\"resilient.ratelimiter.name\")] pub struct Name;`",
    note = "each spec kind goes with its own attribute: `RetrySpec` with `#[retryable]`, `CircuitBreakerSpec` with `#[circuit_breakable]`, `TimeoutSpec` with `#[timeout]`, `ConcurrencyLimitSpec` with `#[concurrency_limit]`, `RateLimiterSpec` with `#[rate_limited]`"
)]
pub trait RateLimiterSpec: Spec + Sized {
    /// The spec's shared limiter, from the registry in use.
    ///
    /// # Errors
    ///
    /// [`Error::NotConfigured`] when the registry in use has no settings for
    /// this spec.
    fn get() -> Result<RateLimiterHandle<Self>, Error> {
        crate::registry::lookup_rate(Self::NAME, Self::PATH, TypeId::of::<Self>()).map(|inner| {
            RateLimiterHandle {
                inner,
                _spec: PhantomData,
            }
        })
    }
}

/// The rate limiter's algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
/// | `limit_refresh_period` | required | duration ≥ 1ms (and ≥ 1ns per permit for `token_bucket`): the period |
/// | `max_wait` | none | duration > 0: how long a call may wait for a permit instead of failing at once |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimiterSettings {
    /// `false` turns the spec into a pass-through.
    pub enabled: bool,
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Calls per period.
    pub limit_for_period: u32,
    /// The period.
    pub limit_refresh_period: Duration,
    /// How long a call may wait for a permit.
    pub max_wait: Option<Duration>,
}

const COUNT_BITS: u32 = 20;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;

fn as_value(d: Duration) -> Value {
    Value::Str(humantime::format_duration(d).to_string())
}

impl RateLimiterSettings {
    /// Reads and validates a rate limiter section, recording every problem
    /// found.
    pub fn read(s: &mut Section<'_>) -> Option<Self> {
        let enabled = s.bool("enabled", true);
        let algorithm = s.choice("type", &["fixed_window", "token_bucket"], "fixed_window");
        let limit = s.int("limit_for_period", None, 1, COUNT_MASK);
        let period = match s.duration("limit_refresh_period", true) {
            Some(Some(d)) if d < Duration::from_millis(1) => {
                s.problem(
                    "limit_refresh_period",
                    "must be at least 1ms",
                    Some(&as_value(d)),
                );
                None
            }
            other => other.flatten(),
        };
        let max_wait = match s.duration("max_wait", false) {
            Some(Some(d)) if d.is_zero() => {
                s.problem(
                    "max_wait",
                    "must be > 0 (leave it out to fail at once)",
                    Some(&as_value(d)),
                );
                Some(None)
            }
            other => other,
        };
        if let (Some("token_bucket"), Some(limit), Some(period)) = (algorithm, limit, period) {
            if period.as_nanos() < u128::from(limit) {
                s.problem(
                    "limit_refresh_period",
                    format!("is too short for `limit_for_period` = {limit} with `type = \"token_bucket\"`: each permit needs at least 1ns"),
                    Some(&as_value(period)),
                );
                return None;
            }
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
        })
    }
}

/// The shared state of one rate limiter spec.
#[derive(Debug)]
pub(crate) struct RateLimiter {
    settings: RateLimiterSettings,
    origin: Instant,
    /// `fixed_window`: the window's start (ms since `origin`, high bits) and
    /// the permits taken in it (low 20 bits). `token_bucket`: the theoretical
    /// arrival time, in ns since `origin`.
    word: AtomicU64,
    period_ms: u64,
    /// `token_bucket`: ns between two permits, and the burst tolerance.
    interval_ns: u64,
    tolerance_ns: u64,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl RateLimiter {
    pub(crate) fn new(settings: RateLimiterSettings) -> Self {
        let period_ns = nanos(settings.limit_refresh_period);
        let interval_ns = (period_ns / u64::from(settings.limit_for_period)).max(1);
        Self {
            period_ms: u64::try_from(settings.limit_refresh_period.as_millis()).unwrap_or(u64::MAX),
            interval_ns,
            tolerance_ns: interval_ns.saturating_mul(u64::from(settings.limit_for_period) - 1),
            settings,
            origin: Instant::now(),
            word: AtomicU64::new(0),
        }
    }

    /// Takes a permit, or says how long until one would be free.
    pub(crate) fn try_acquire(&self) -> Result<(), Duration> {
        if !self.settings.enabled {
            return Ok(());
        }
        let now = self.origin.elapsed();
        match self.settings.algorithm {
            Algorithm::FixedWindow => self.fixed_window(now),
            Algorithm::TokenBucket => self.token_bucket(nanos(now)),
        }
    }

    fn fixed_window(&self, now: Duration) -> Result<(), Duration> {
        let now_ms = u64::try_from(now.as_millis()).unwrap_or(u64::MAX);
        let limit = u64::from(self.settings.limit_for_period);
        let mut retry_after = Duration::ZERO;
        self.word
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                let (start, taken) = (w >> COUNT_BITS, w & COUNT_MASK);
                if now_ms.saturating_sub(start) >= self.period_ms {
                    // The window expired: a new one starts with this call.
                    return Some((now_ms << COUNT_BITS) | 1);
                }
                if taken < limit {
                    return Some(w + 1);
                }
                let end = Duration::from_millis(start.saturating_add(self.period_ms));
                retry_after = end.saturating_sub(now);
                None
            })
            .map(drop)
            .map_err(|_| retry_after)
    }

    fn token_bucket(&self, now: u64) -> Result<(), Duration> {
        let mut retry_after = Duration::ZERO;
        self.word
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |tat| {
                let next = tat.max(now).saturating_add(self.interval_ns);
                // Admitted while the next arrival time stays within the burst.
                let ahead = next.saturating_sub(now).saturating_sub(self.interval_ns);
                if ahead <= self.tolerance_ns {
                    Some(next)
                } else {
                    retry_after = Duration::from_nanos(ahead - self.tolerance_ns);
                    None
                }
            })
            .map(drop)
            .map_err(|_| retry_after)
    }

    fn exceeded(spec: &'static str, retry_after: Duration) -> Error {
        Error::RateLimitExceeded { spec, retry_after }
    }

    /// Takes a permit, waiting up to `max_wait` for one.
    pub(crate) async fn acquire(&self, spec: &'static str) -> Result<(), Error> {
        let Err(mut retry_after) = self.try_acquire() else {
            return Ok(());
        };
        let Some(max_wait) = self.settings.max_wait else {
            return Err(Self::exceeded(spec, retry_after));
        };
        let deadline = Instant::now() + max_wait;
        loop {
            if Instant::now() + retry_after > deadline {
                return Err(Self::exceeded(spec, retry_after));
            }
            tokio::time::sleep(retry_after).await;
            match self.try_acquire() {
                Ok(()) => return Ok(()),
                // Others took the permit first: wait for the next one.
                Err(next) => retry_after = next,
            }
        }
    }
}

/// Access to a rate limiter spec's shared limiter; cheap to clone.
#[derive(Debug)]
pub struct RateLimiterHandle<S> {
    inner: Arc<RateLimiter>,
    _spec: PhantomData<fn() -> S>,
}

impl<S> Clone for RateLimiterHandle<S> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            _spec: PhantomData,
        }
    }
}

impl<S: RateLimiterSpec> RateLimiterHandle<S> {
    /// The spec's validated settings.
    pub fn settings(&self) -> &RateLimiterSettings {
        &self.inner.settings
    }

    /// Takes a permit now, whatever `max_wait` says.
    ///
    /// # Errors
    ///
    /// [`Error::RateLimitExceeded`] with the time until a permit would be free.
    pub fn try_acquire(&self) -> Result<(), Error> {
        self.inner
            .try_acquire()
            .map_err(|retry_after| RateLimiter::exceeded(S::NAME, retry_after))
    }

    /// Takes a permit, waiting up to `max_wait` for one.
    ///
    /// # Errors
    ///
    /// [`Error::RateLimitExceeded`] when none could be had in time.
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

/// One call under `limiter`.
pub(crate) async fn run<T, E, F, Fut>(
    spec: &'static str,
    limiter: &RateLimiter,
    f: F,
) -> Result<T, Fail<E>>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<T, Fail<E>>>,
{
    if let Err(e) = limiter.acquire(spec).await {
        tracing::debug!(target: "resilient::rate_limiter", spec, "rate limit exceeded");
        return Err(Fail::Resilience(e));
    }
    f().await
}
