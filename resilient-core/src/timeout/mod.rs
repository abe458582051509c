//! Timeout: give up on a call that takes too long, and cancel it.
//!
//! ```
//! use resilient_core::TimeoutSpec;
//!
//! #[derive(TimeoutSpec)]
//! #[spec("resilient.timeout.pet")]
//! pub struct PetTimeout;
//! ```
//!
//! ```toml
//! [resilient.timeout.pet]
//! duration = "300ms"
//! ```
//!
//! When the limit passes, the call's future is dropped (cancelled, so the
//! permits it holds are released) and the call ends with
//! [`Error::Timeout`]. An error the body returns before the limit passes
//! through unchanged.
//!
//! The limit counts from the call's first poll, and the timer is armed only
//! if that poll does not finish the call: a call that completes at once never
//! reads the clock.

use std::future::{poll_fn, Future};
use std::marker::PhantomData;
use std::ops::Deref;
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use crate::error::Error;
use crate::outcome::Fail;
use crate::registry::{Key, Shared};
use crate::settings::{Section, Value};
use crate::spec::Spec;
use crate::telemetry::Telemetry;

/// A timeout spec: implemented by `#[derive(TimeoutSpec)]`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a timeout spec",
    label = "`#[timeout]` needs a type declared with `#[derive(TimeoutSpec)]`",
    note = "declare one with `#[derive(TimeoutSpec)] #[spec(\"resilient.timeout.name\")] pub struct Name;`",
    note = "each spec kind goes with its own attribute: `RetrySpec` with `#[retryable]`, `CircuitBreakerSpec` with `#[circuit_breakable]`, `TimeoutSpec` with `#[timeout]`, `ConcurrencyLimitSpec` with `#[concurrency_limit]`, `RateLimiterSpec` with `#[rate_limited]`"
)]
pub trait TimeoutSpec: Spec + Sized {
    /// The spec's shared instance, from the registry in use.
    ///
    /// # Errors
    ///
    /// [`Error::NotConfigured`] when the registry in use has no settings for
    /// this spec.
    fn get() -> Result<TimeoutHandle<Self>, Error> {
        let key = const { &Key::of::<Self>() };
        crate::registry::lookup_timeout(key)
            .map(|inner| TimeoutHandle {
                inner,
                _spec: PhantomData,
            })
            .ok_or_else(|| key.not_configured())
    }
}

/// The settings of one timeout spec.
///
/// | key | default | rule |
/// |---|---|---|
/// | `enabled` | `true` | `false` makes the spec a pass-through (still validated) |
/// | `duration` | required | duration > 0: how long a call may take, from its first poll |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeoutSettings {
    /// `false` turns the spec into a pass-through.
    pub enabled: bool,
    /// How long a call may take.
    pub duration: Duration,
}

impl TimeoutSettings {
    /// Reads and validates a timeout section, recording every problem found.
    pub fn read(s: &mut Section<'_>) -> Option<Self> {
        let enabled = s.bool("enabled", true);
        let duration = match s.duration("duration", true) {
            Some(Some(d)) if d.is_zero() => {
                s.problem(
                    "duration",
                    "must be > 0",
                    Some(&Value::Str(humantime::format_duration(d).to_string())),
                );
                None
            }
            other => other.flatten(),
        };
        Some(Self {
            enabled: enabled?,
            duration: duration?,
        })
    }
}

/// The shared state of one timeout spec: its settings and telemetry.
#[derive(Debug)]
pub(crate) struct Timeout {
    pub(crate) settings: TimeoutSettings,
    pub(crate) telemetry: Telemetry,
}

impl Timeout {
    pub(crate) fn new(settings: TimeoutSettings, telemetry: Telemetry) -> Self {
        Self {
            settings,
            telemetry,
        }
    }
}

/// Access to a timeout spec's settings; cheap to clone.
#[derive(Debug)]
pub struct TimeoutHandle<S> {
    inner: Shared<Timeout>,
    _spec: PhantomData<fn() -> S>,
}

impl<S> Clone for TimeoutHandle<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            _spec: PhantomData,
        }
    }
}

impl<S: TimeoutSpec> TimeoutHandle<S> {
    /// The spec's validated settings.
    pub fn settings(&self) -> &TimeoutSettings {
        &self.inner.settings
    }

    /// Runs `f`, and gives up on it with [`Error::Timeout`] when it takes
    /// longer than the spec's `duration`.
    pub async fn call<T, E, F, Fut>(&self, f: F) -> Result<T, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: From<Error>,
    {
        run(
            const { &Key::of::<S>() },
            Some(&*self.inner),
            crate::outcome::lifted(f()),
        )
        .await
        .map_err(|fail| fail.into_error(E::from))
    }
}

/// One call under `timeout`.
///
/// `instance` is the spec's timeout, if it has one.
pub(crate) async fn run<T, E, Fut>(
    key: &'static Key,
    instance: Option<impl Deref<Target = Timeout>>,
    call: Fut,
) -> Result<T, Fail<E>>
where
    Fut: Future<Output = Result<T, Fail<E>>>,
{
    let Some(instance) = instance else {
        return Err(Fail::Resilience(key.not_configured()));
    };
    let spec = key.name;
    let timeout = &*instance;
    let s = &timeout.settings;
    if !s.enabled {
        return call.await;
    }
    let t = &timeout.telemetry;
    let started = t.start();
    let mut call = pin!(call);
    // A call that is ready at its first poll needs no timer.
    if let Poll::Ready(out) = poll_fn(|cx| Poll::Ready(call.as_mut().poll(cx))).await {
        return t.done(out, started);
    }
    match tokio::time::timeout(s.duration, call).await {
        Ok(out) => t.done(out, started),
        Err(_) => {
            t.timed_out(s.duration, started);
            Err(Fail::Resilience(Error::Timeout {
                spec,
                after: s.duration,
            }))
        }
    }
}
