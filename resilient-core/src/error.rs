//! The error every resilience mechanism ends a call with, and the breaker
//! states it names (at the bottom of the crate with it: a breaker's
//! rejection says which state rejected the call).

use std::any::Any;
use std::error::Error as StdError;
use std::fmt;

/// A failure kept by [`Error::RetryExhausted`].
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// How a resilience mechanism ended a call.
///
/// An annotated fn returns it through its own error type, which must implement
/// `From<resilient_core::Error>`. The body's own errors are never turned into
/// this type except by retry exhaustion, and then the last one is kept as the
/// [`source`](StdError::source).
///
/// ```
/// use resilient_core::Error;
///
/// #[derive(Debug, thiserror::Error)]
/// enum PetError {
///     #[error("pet store unavailable")]
///     Unavailable,
///     #[error(transparent)]
///     Resilience(#[from] Error),
/// }
/// # let _ = PetError::Unavailable;
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The spec has no settings: no registry was installed
    /// (`resilient_config::init` was not called), the registry in use was
    /// built without this spec, or (in tests) the call ran where no
    /// [`Registry::scope`](crate::Registry::scope) or
    /// [`Registry::set_default`](crate::Registry::set_default) reaches while
    /// one is alive, such as a task on another worker thread. `reason` says
    /// which, and the message what to do.
    #[error("{}", reason.message(spec, path))]
    NotConfigured {
        /// The spec type's name.
        spec: &'static str,
        /// The spec's config path.
        path: &'static str,
        /// Why the call found no settings.
        reason: Unconfigured,
    },

    /// A circuit breaker rejected the call without running it.
    #[error("`{spec}` is {state}: call not permitted")]
    CallNotPermitted {
        /// The circuit breaker spec's name.
        spec: &'static str,
        /// The state that rejected the call: open, half-open with every probe
        /// taken, or forced open.
        state: State,
        /// When open: the rest of `wait_duration_in_open_state`, after which
        /// the next call is a probe. `None` in the other states, which end at
        /// no known time. A retry outside the breaker with
        /// `retry_call_not_permitted = true` waits this long.
        retry_after: Option<std::time::Duration>,
    },

    /// The call took longer than the timeout spec's `duration` and was
    /// cancelled.
    #[error("`{spec}` timed out after {after:?}")]
    Timeout {
        /// The timeout spec's name.
        spec: &'static str,
        /// The limit that passed.
        after: std::time::Duration,
    },

    /// A rate limiter had no permit for the call.
    #[error("`{spec}` rate limit exceeded; a permit is free in {retry_after:?}")]
    RateLimitExceeded {
        /// The rate limiter spec's name.
        spec: &'static str,
        /// The time until a permit would be free.
        retry_after: std::time::Duration,
    },

    /// A spec whose state lives in a shared backend (a rate limiter with
    /// `backend = "redis"`) refused the call because the backend made no
    /// decision (down, slower than its `timeout`, or its breaker open) and
    /// the spec's `on_backend_failure` is `deny`. No limit was reached, and
    /// nothing says when the backend answers again.
    #[error("`{spec}` refused the call: its {backend} backend is unavailable, and its `on_backend_failure` is \"deny\"")]
    BackendUnavailable {
        /// The spec's name.
        spec: &'static str,
        /// The backend, `"redis"`.
        backend: &'static str,
    },

    /// Adaptive throttling refused the call before its first attempt: the
    /// retry spec's `throttle` table has `first_calls = true`, and its
    /// window holds more than `throttle.k` requests per accepted one (the
    /// dependency is failing). The body did not run. The refusal counts in
    /// the window as a request, so refusals grow while the dependency keeps
    /// failing and stop once it accepts again.
    #[error("`{spec}` refused the call before its first attempt: its dependency accepted {accepts} of the {requests} requests in adaptive throttling's window, fewer than one in `throttle.k`, and `throttle.first_calls = true` refuses calls at random until it accepts more; raise `throttle.k` to refuse fewer, or set `throttle.first_calls = false` to refuse retries only")]
    Throttled {
        /// The retry spec's name.
        spec: &'static str,
        /// Requests in the window when the call was refused (attempts
        /// made, and first attempts refused).
        requests: u32,
        /// Of those, the attempts the dependency accepted.
        accepts: u32,
    },

    /// Every place of a concurrency limit was taken (and, with
    /// `policy = "block"`, none came free within `max_wait`).
    #[error("`{spec}` concurrency limit of {limit} reached")]
    ConcurrencyLimitReached {
        /// The concurrency limit spec's name.
        spec: &'static str,
        /// The limit.
        limit: u32,
    },

    /// Retry gave up: every attempt it was allowed failed, or the next wait
    /// would have crossed the spec's overall `timeout`.
    ///
    /// Returned only by specs whose exhaustion mode is the default,
    /// [`ReturnError`](crate::retry::ReturnError). The details are boxed:
    /// giving up is rare, and a small `Error` keeps every call's future
    /// small. Its [`source`](StdError::source) is the last failure.
    ///
    /// ```
    /// use resilient_core::{Error, GaveUp};
    ///
    /// fn gave_up_after(e: &Error) -> Option<u64> {
    ///     match e {
    ///         Error::RetryExhausted(x) if x.reason == GaveUp::Attempts => Some(x.calls),
    ///         _ => None,
    ///     }
    /// }
    /// # let _ = gave_up_after;
    /// ```
    #[error(transparent)]
    RetryExhausted(Box<Exhausted>),

    /// A chaos spec failed the call on purpose (see
    /// [`chaos`](mod@crate::chaos)): what is inside `#[chaos]` did not run.
    ///
    /// It stands for the dependency failing: a retry around it tries again,
    /// a breaker around it counts a failure, and a fallback with the default
    /// `on` or `on = resilience` answers it.
    #[error("`{spec}` injected a fault into call {call}")]
    Injected {
        /// The chaos spec's name.
        spec: &'static str,
        /// The call's index among the calls the spec drew for (from 0): with
        /// a `seed`, the same index on every run.
        call: u64,
    },
}

/// Why a call found no settings for its spec ([`Error::NotConfigured`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unconfigured {
    /// No registry is installed, and no test registry is in use anywhere
    /// in the process: `resilient_config::init` was not called (yet).
    NothingInstalled,
    /// The registry in use (installed, or a test's) was built without
    /// this spec.
    NotInRegistry,
    /// A test registry ([`Registry::scope`](crate::Registry::scope) or
    /// [`Registry::set_default`](crate::Registry::set_default)) is in use
    /// in this process, but this call runs outside it, as a task on
    /// another thread of a multi-thread runtime does. The installed
    /// registry is never used then, so that a test cannot silently run
    /// with the application's settings.
    OutsideTestRegistry,
}

impl Unconfigured {
    fn message(self, spec: &str, path: &str) -> String {
        match self {
            Unconfigured::NothingInstalled => format!(
                "`{spec}` has no settings: no registry is installed; call `resilient_config::init` at startup (the spec's config path is `{path}`)"
            ),
            Unconfigured::NotInRegistry => format!(
                "`{spec}` has no settings in the registry in use: build it with this spec (`.spec::<{spec}>()`, with a section at `{path}`)"
            ),
            Unconfigured::OutsideTestRegistry => format!(
                "`{spec}` has no settings here: a test registry is in use in this process (`Registry::scope` or `Registry::set_default`), but this call runs outside it, as a task on another thread of a multi-thread runtime does; build the runtime with `registry.set_default_on(&mut builder)` so that every thread it starts uses the registry, or run the task's future in `registry.scope(..)`"
            ),
        }
    }
}

/// How retry gave up: what [`Error::RetryExhausted`] holds.
#[derive(Debug, thiserror::Error)]
#[error("`{spec}` gave up after {calls} calls ({reason})")]
#[non_exhaustive]
pub struct Exhausted {
    /// The retry spec's name.
    pub spec: &'static str,
    /// Calls made, the first one included.
    pub calls: u64,
    /// Why retry stopped.
    pub reason: GaveUp,
    /// The last failure.
    #[source]
    pub last: BoxError,
    /// The failures before the last one, oldest first; at most
    /// [`RETRY_TRAIL_MAX`](crate::retry::RETRY_TRAIL_MAX) are kept.
    pub earlier: Vec<BoxError>,
}

/// Why retry gave up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum GaveUp {
    /// The configured number of retries (`attempts`) was used up.
    Attempts,
    /// The wait before the next retry would have crossed the overall `timeout`.
    Timeout,
}

impl fmt::Display for GaveUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GaveUp::Attempts => "attempts exhausted",
            GaveUp::Timeout => "the next wait would cross the overall timeout",
        })
    }
}

/// A value kept by value alone: `Sync` whatever `T` is, since nothing lends
/// out a `&T` from it but [`FailedValue::value`], which asks `T: Sync`. It
/// lets a classifier keep a response whose body is not `Sync` (axum's).
pub(crate) struct Kept<T>(pub(crate) T);

// SAFETY: a `Kept<T>` is only ever reached behind the `dyn Any` of a
// `FailedValue` (the type is private to the crate). Through a shared
// reference, `FailedValue::value` hands out `&T` only for `T: Sync`; every
// other access takes the `FailedValue` by value (`into_value`), which moves
// the `T` (`T: Send`).
#[allow(unsafe_code)]
unsafe impl<T: Send> Sync for Kept<T> {}

/// The failure recorded when a call returned `Ok` with a value that the spec
/// classifies as a failure (see [`Classify`](crate::Classify)).
///
/// When it is the last failure of [`Error::RetryExhausted`], it holds the
/// value itself if the classification keeps it (see
/// [`Classify::keep_failed_value`](crate::Classify::keep_failed_value); the
/// HTTP classifier keeps the last failed response):
///
/// ```
/// use resilient_core::{Error, FailedValue};
///
/// /// The status of the last response a retry gave up on, if it kept one.
/// fn last_status(e: &Error) -> Option<u16> {
///     match e {
///         Error::RetryExhausted(exhausted) => {
///             let failed = exhausted.last.downcast_ref::<FailedValue>()?;
///             failed.value::<u16>().copied()
///         }
///         _ => None,
///     }
/// }
/// # let _ = last_status;
/// ```
#[derive(Debug, thiserror::Error)]
#[error("`{spec}` classified the returned value as a failure{}", status.map_or_else(String::new, |s| format!(" (status {s})")))]
pub struct FailedValue {
    /// The spec whose classification rejected the value.
    pub spec: &'static str,
    value: Option<Box<dyn Any + Send + Sync>>,
    status: Option<u16>,
}

impl FailedValue {
    pub(crate) fn new(
        spec: &'static str,
        value: Option<Box<dyn Any + Send + Sync>>,
        status: Option<u16>,
    ) -> Self {
        Self {
            spec,
            value,
            status,
        }
    }

    /// The value's status code, if its classification names one (the
    /// response's status with `classify = http`; see
    /// [`Classify::status`](crate::Classify::status)).
    pub fn status(&self) -> Option<u16> {
        self.status
    }

    /// The value, if it was kept and is a `T`. A value that is not `Sync`
    /// (an axum response, whose body is not) is reached by value only,
    /// through [`into_value`](Self::into_value).
    pub fn value<T: Any + Sync>(&self) -> Option<&T> {
        let value = self.value.as_deref()?;
        value
            .downcast_ref::<T>()
            .or_else(|| value.downcast_ref::<Kept<T>>().map(|kept| &kept.0))
    }

    /// The value, if it was kept and is a `T`; otherwise `self` unchanged.
    ///
    /// # Errors
    ///
    /// `self` when no value was kept or it is not a `T`.
    pub fn into_value<T: Any>(self) -> Result<T, Self> {
        let value = match self.value.map(|v| v.downcast::<T>()) {
            Some(Ok(v)) => return Ok(*v),
            Some(Err(v)) => match v.downcast::<Kept<T>>() {
                Ok(kept) => return Ok(kept.0),
                Err(v) => Some(v),
            },
            None => None,
        };
        Err(Self {
            spec: self.spec,
            value,
            status: self.status,
        })
    }
}

/// A breaker's state, as [`Error::CallNotPermitted`](crate::Error::CallNotPermitted) and
/// [`CircuitBreakerHandle::state`](crate::circuit_breaker::CircuitBreakerHandle::state) report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize),
    serde(rename_all = "snake_case")
)]
#[non_exhaustive]
pub enum State {
    /// Calls go through and are counted.
    Closed,
    /// Calls are rejected until the wait is over.
    Open,
    /// A few probes go through.
    HalfOpen,
    /// Opened by hand ([`CircuitBreakerHandle::force_open`](crate::circuit_breaker::CircuitBreakerHandle::force_open)): every call is
    /// rejected until [`CircuitBreakerHandle::reset`](crate::circuit_breaker::CircuitBreakerHandle::reset).
    ForcedOpen,
    /// Turned off (by config or [`CircuitBreakerHandle::disable`](crate::circuit_breaker::CircuitBreakerHandle::disable)): every call
    /// goes through and nothing is counted.
    Disabled,
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            State::Closed => "closed",
            State::Open => "open",
            State::HalfOpen => "half-open",
            State::ForcedOpen => "forced open",
            State::Disabled => "disabled",
        })
    }
}
