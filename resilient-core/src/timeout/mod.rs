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
//! When the limit passes, the call ends at the await where it waits: what
//! is inside the timeout is dropped (cancelled, so the permits it holds are
//! released) and the call ends with [`Error::Timeout`]. Every await inside
//! the timeout counts: the body's, and those of the attributes written below
//! it (a retry's waits, a limit's wait for a place, an async fallback). An error the body returns
//! before the limit passes through unchanged.
//!
//! The limit counts from the moment the call first waits: the timer is
//! armed there, so a call that completes without waiting arms none (and the
//! synchronous work before its first wait, which no timer could interrupt,
//! is not counted).

use std::future::Future;
use std::marker::PhantomData;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::task::Unconstrained;
use tokio::time::{Instant, Sleep};

use crate::error::Error;
use crate::outcome::Fail;
use crate::registry::{CallInstance, Key, Mechanism, Part, Sealed, Shared, Spec, Tag, Versions};
use crate::settings::Section;
use crate::spec::SpecKind;
use crate::telemetry::{Event, Outcome, Telemetry};

impl SpecKind {
    /// `#[derive(TimeoutSpec)]`, used by `#[timeout]`.
    pub const TIMEOUT: SpecKind = SpecKind::new("timeout", "timeout");
}

/// A timeout spec: implemented by `#[derive(TimeoutSpec)]`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a timeout spec",
    label = "`#[timeout]` needs a type declared with `#[derive(TimeoutSpec)]`",
    note = "declare one with `#[derive(TimeoutSpec)] #[spec(\"resilient.timeout.name\")] pub struct Name;`",
    note = "each spec kind goes with its own attribute: `RetrySpec` with `#[retryable]`, `CircuitBreakerSpec` with `#[circuit_breakable]`, `TimeoutSpec` with `#[timeout]`, `ConcurrencyLimitSpec` with `#[concurrency_limit]`, `RateLimiterSpec` with `#[rate_limited]`, `ChaosSpec` with `#[chaos]`, `HedgingSpec` with `#[hedged]`"
)]
pub trait TimeoutSpec: Spec<Mechanism = Timeout> + Sized {
    /// The spec's shared instance, from the registry in use.
    ///
    /// # Errors
    ///
    /// [`Error::NotConfigured`] when the registry in use has no settings for
    /// this spec.
    fn get() -> Result<TimeoutHandle<Self>, Error> {
        crate::registry::handle::<Self>().map(|inner| TimeoutHandle {
            inner,
            _spec: PhantomData,
        })
    }
}

/// The settings of one timeout spec.
///
/// | key | default | rule |
/// |---|---|---|
/// | `enabled` | `true` | `false` makes the spec a pass-through (still validated) |
/// | `duration` | required | duration > 0: how long a call may take, from its first wait; on a stream, how long its first item may take |
/// | `idle` | none | duration > 0, streams only: the longest gap between two items |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct TimeoutSettings {
    /// `false` turns the spec into a pass-through.
    pub enabled: bool,
    /// How long a call may take (a stream: until its first item).
    #[cfg_attr(
        feature = "serde",
        serde(serialize_with = "crate::settings::ser::duration")
    )]
    pub duration: Duration,
    /// A stream's longest gap between two items; `None`: no limit. A call
    /// of an `async fn` has no items, and ignores it.
    #[cfg_attr(
        feature = "serde",
        serde(
            serialize_with = "crate::settings::ser::option_duration",
            skip_serializing_if = "Option::is_none"
        )
    )]
    pub idle: Option<Duration>,
}

impl TimeoutSettings {
    /// Reads and validates a timeout section, recording every problem found.
    pub fn read(s: &mut Section<'_>) -> Option<Self> {
        s.alias("timeout_duration", "duration", |_| {
            "the same limit under this project's name; it counts from the call's first wait".into()
        });
        s.alias("timeout", "duration", |_| {
            "the limit is `duration`, in the spec's own section".into()
        });
        let enabled = s.bool("enabled", true);
        let duration = match s.duration("duration", true) {
            Some(Some(d)) if d.is_zero() => {
                s.invalid("duration", "must be > 0");
                None
            }
            other => other.flatten(),
        };
        // Outer `None`: a problem (recorded); inner `None`: no idle limit.
        let idle = match s.duration("idle", false) {
            None => Some(None),
            Some(Some(d)) if d.is_zero() => {
                s.invalid(
                    "idle",
                    "must be > 0 (leave it out for no limit between items)",
                );
                None
            }
            Some(Some(d)) => Some(Some(d)),
            Some(None) => None,
        };
        Some(Self {
            enabled: enabled?,
            duration: duration?,
            idle: idle?,
        })
    }
}

/// The tag of a timeout's settings: whether it is enabled.
const ENABLED: usize = 0b1;

impl Tag for TimeoutSettings {
    fn tag(&self) -> usize {
        if self.enabled {
            ENABLED
        } else {
            0
        }
    }
}

/// The shared instance of one timeout spec: its settings and telemetry.
/// Reached through a [`TimeoutHandle`].
#[derive(Debug)]
pub struct Timeout {
    config: Versions<TimeoutSettings>,
    telemetry: Telemetry,
}

impl Sealed for Timeout {}

impl Mechanism for Timeout {
    const KIND: SpecKind = SpecKind::TIMEOUT;
    const OUTCOMES: &'static [Outcome] = &[
        Outcome::Success,
        Outcome::Failure,
        Outcome::TimedOut,
        Outcome::Cancelled,
    ];
    type Settings = TimeoutSettings;

    fn read(section: &mut Section<'_>) -> Option<TimeoutSettings> {
        TimeoutSettings::read(section)
    }

    fn build(settings: TimeoutSettings, telemetry: Telemetry) -> Self {
        Self {
            config: Versions::new(settings),
            telemetry,
        }
    }

    fn reconfigure(&self, settings: TimeoutSettings) -> Vec<String> {
        self.config.publish(|c| *c == settings, || settings);
        Vec::new()
    }

    fn settings(&self) -> &TimeoutSettings {
        self.config.get()
    }

    fn telemetry(&self) -> &Telemetry {
        &self.telemetry
    }

    fn status(&self) -> Option<Arc<dyn Part>> {
        None
    }
}

/// Access to a timeout spec's settings; cheap to clone.
///
/// # Example
///
/// ```
/// use resilient_core::prelude::*;
/// use resilient_core::Registry;
///
/// #[derive(TimeoutSpec)]
/// #[spec("resilient.timeout.pet")]
/// pub struct PetTimeout;
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
/// #         "[resilient.timeout.pet]\nduration = \"1s\"",
/// #         config::FileFormat::Toml,
/// #     ))
/// #     .build()?;
/// # let registry = resilient_config::build(Registry::builder().spec::<PetTimeout>(), &settings)?;
/// # let _guard = registry.set_default();
/// let timeout = PetTimeout::get()?;
/// let quick: Result<u32, PetError> = timeout.call(|| async { Ok(7) }).await;
/// assert_eq!(quick?, 7);
/// assert_eq!(timeout.settings().duration, std::time::Duration::from_secs(1));
/// # Ok(())
/// # }
/// ```
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
    /// The spec's validated settings, as running now.
    pub fn settings(&self) -> &TimeoutSettings {
        self.inner.config.get()
    }

    /// Runs `f`, and gives up on it with [`Error::Timeout`] when it takes
    /// longer than the spec's `duration`, counted from its first wait.
    pub fn call<T, E, F, Fut>(
        &self,
        f: F,
    ) -> impl Future<Output = Result<T, E>> + use<'_, S, T, E, F, Fut>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: From<Error>,
    {
        let call = TimeoutCall::new(
            const { &Key::of::<S>() },
            Some(CallInstance::Borrowed(&self.inner)),
        );
        // `f` is called in `run`, when the call is first polled: a future
        // made and dropped unpolled runs none of it.
        crate::outcome::lowered(run(call, move || crate::outcome::lifted(f())))
    }
}

/// One call under `timeout`: what a handle's `call` runs, from the same
/// pieces as the code `#[timeout]` expands to.
pub(crate) async fn run<T, E, F, Fut>(call: TimeoutCall<'_>, f: F) -> Result<T, Fail<E>>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<T, Fail<E>>>,
{
    let fut = f();
    let timer = match call.enter() {
        Ok(timer) => timer,
        Err(e) => return Err(Fail::Resilience(e)),
    };
    let mut sleep = pin!(None);
    let out = match Bounded::new(&timer, sleep.as_mut(), pin!(fut)).await {
        Ok(out) => out,
        Err(e) => return Err(Fail::Resilience(e)),
    };
    timer.exit(out)
}

/// One call under a timeout, as the generated code makes it:
/// [`enter`](TimeoutCall::enter), then every await inside the timeout
/// [`Bounded`] by the call's [`Timer`], then [`Timer::exit`] with the
/// outcome. A timeout ends the call where it waits: at the await that sees
/// the limit pass, dropping what is inside.
#[doc(hidden)]
pub struct TimeoutCall<'a> {
    key: &'static Key<Timeout>,
    instance: Option<CallInstance<'a, Timeout>>,
}

impl<'a> TimeoutCall<'a> {
    #[inline(always)]
    pub(crate) fn new(
        key: &'static Key<Timeout>,
        instance: Option<CallInstance<'a, Timeout>>,
    ) -> Self {
        Self { key, instance }
    }

    /// The call's timer, not armed yet.
    #[inline(always)]
    pub fn enter(&self) -> Result<Timer<'_>, Error> {
        let Some(instance) = &self.instance else {
            return Err(self.key.not_configured());
        };
        let timeout = &**instance;
        // Read once: the call runs under the settings it started with.
        let (settings, tag) = timeout.config.get_tagged();
        // A disabled spec passes the call through, untimed and uncounted.
        let armed = (tag & ENABLED != 0).then(|| Armed {
            timeout,
            settings,
            started: timeout.telemetry.start(),
            ended: AtomicBool::new(false),
        });
        Ok(Timer {
            spec: self.key.name,
            armed,
        })
    }
}

/// A timer as plain data, beside the instance it came from: what a stream
/// (see [`crate::stream`]) and a tower layer's response future keep between
/// polls.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TimerParts {
    pub(crate) duration: Duration,
    pub(crate) idle: Option<Duration>,
    pub(crate) started: Option<Instant>,
}

impl TimeoutCall<'_> {
    /// A timer kept as plain data, under the settings in force: `None` when
    /// the spec is disabled (the call or stream passes through, untimed and
    /// uncounted).
    pub(crate) fn start_parts(&self) -> Result<Option<TimerParts>, Error> {
        self.start_parts_inline()
    }

    /// [`start_parts`](Self::start_parts), inlined where it is called: a
    /// stack's timeout part, whose whole entry is one inlined path. (Out of
    /// line, as a timeout layer calls it, the layer's own future is
    /// smaller.)
    #[inline(always)]
    pub(crate) fn start_parts_inline(&self) -> Result<Option<TimerParts>, Error> {
        let Some(instance) = &self.instance else {
            return Err(self.key.not_configured());
        };
        let (settings, tag) = instance.config.get_tagged();
        Ok((tag & ENABLED != 0).then(|| TimerParts {
            duration: settings.duration,
            idle: settings.idle,
            started: instance.telemetry.start(),
        }))
    }

    /// A call or stream timed out (`after` its limit: a stream's first-item
    /// or idle limit).
    #[cold]
    pub(crate) fn timed_out_parts(&self, timer: TimerParts, after: Duration) -> Error {
        if let Some(timeout) = self.instance.as_deref() {
            timed_out(timeout, timer.started, after);
        }
        Error::Timeout {
            spec: self.key.name,
            after,
        }
    }

    /// A call or stream ended in time, `failed` or not; or was dropped
    /// before (`None`).
    pub(crate) fn ended_parts(&self, timer: TimerParts, failed: Option<bool>) {
        self.ended_parts_inline(timer, failed);
    }

    /// [`ended_parts`](Self::ended_parts), inlined where it is called (see
    /// [`start_parts_inline`](Self::start_parts_inline)).
    #[inline(always)]
    pub(crate) fn ended_parts_inline(&self, timer: TimerParts, failed: Option<bool>) {
        let Some(timeout) = self.instance.as_deref() else {
            return;
        };
        match failed {
            Some(failed) => {
                let outcome: Result<(), Fail<()>> =
                    if failed { Err(Fail::Body(())) } else { Ok(()) };
                let _ = timeout.telemetry.done(outcome, timer.started);
            }
            None => {
                if let Some(at) = timer.started {
                    timeout
                        .telemetry
                        .ended(Outcome::Cancelled, Some(at.elapsed()));
                }
            }
        }
    }
}

/// The limit passed: telemetry (a call timed out `after` its limit).
fn timed_out(timeout: &Timeout, started: Option<Instant>, after: Duration) {
    let t = &timeout.telemetry;
    t.ended(Outcome::TimedOut, started.map(|s| s.elapsed()));
    t.emit(|| Event::TimedOut {
        spec: t.spec,
        path: t.path,
        after,
    });
    if t.logging() {
        let (spec, path) = (t.spec, t.path);
        tracing::info!(
            target: "resilient::timeout",
            spec, path, ?after,
            "call timed out after {after:?}"
        );
    }
}

/// What a call's timer keeps: the limit, and when the call started (for
/// telemetry, if it measures durations).
#[doc(hidden)]
pub struct Timer<'a> {
    spec: &'static str,
    armed: Option<Armed<'a>>,
}

struct Armed<'a> {
    timeout: &'a Timeout,
    /// The settings when the call started.
    settings: &'a TimeoutSettings,
    started: Option<Instant>,
    /// Whether the call's outcome was counted (it ended in time, or timed
    /// out): a timer dropped before then counts it as cancelled. Written
    /// only when calls are timed; atomic, so that the timer stays `Sync`
    /// and the awaits that borrow it keep the fn's future `Send`.
    ended: AtomicBool,
}

impl Timer<'_> {
    /// Passes on the outcome of a call that ended in time.
    #[inline(always)]
    pub fn exit<T, E>(&self, outcome: Result<T, Fail<E>>) -> Result<T, Fail<E>> {
        match &self.armed {
            Some(a) => {
                a.end();
                a.timeout.telemetry.done(outcome, a.started)
            }
            None => outcome,
        }
    }
}

impl Drop for Timer<'_> {
    #[inline]
    fn drop(&mut self) {
        if let Some(a) = &self.armed {
            if a.started.is_some() && !a.ended.load(Ordering::Relaxed) {
                a.timeout
                    .telemetry
                    .ended(Outcome::Cancelled, a.started.map(|s| s.elapsed()));
            }
        }
    }
}

impl Armed<'_> {
    /// Marks the call's outcome as counted (only a timed call records one).
    #[inline(always)]
    fn end(&self) {
        if self.started.is_some() {
            self.ended.store(true, Ordering::Relaxed);
        }
    }

    /// The limit passed: telemetry, and the error the call ends with (only
    /// an enabled timeout has a sleep that can fire).
    #[cold]
    #[inline(never)]
    fn timed_out(&self, spec: &'static str) -> Error {
        self.end();
        let after = self.settings.duration;
        timed_out(self.timeout, self.started, after);
        Error::Timeout { spec, after }
    }
}

/// The sleep of an armed timer, where the call's future keeps it. Polled
/// without tokio's cooperative budget: a call that spends the whole budget
/// on every poll still times out.
#[doc(hidden)]
pub type TimerSleep = Option<Unconstrained<Sleep>>;

/// One await inside a timeout: `fut`, unless the timer's limit passes
/// first. The timer is armed (it reads the clock) when the first such await
/// inside the timeout does not finish at once.
#[doc(hidden)]
pub struct Bounded<'a, F> {
    timer: &'a Timer<'a>,
    sleep: Pin<&'a mut TimerSleep>,
    fut: Pin<&'a mut F>,
}

impl<'a, F> Bounded<'a, F> {
    #[inline(always)]
    pub(crate) fn new(
        timer: &'a Timer<'a>,
        sleep: Pin<&'a mut TimerSleep>,
        fut: Pin<&'a mut F>,
    ) -> Self {
        Self { timer, sleep, fut }
    }
}

impl<F: Future> Future for Bounded<'_, F> {
    type Output = Result<F::Output, Error>;

    #[inline(always)]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Poll::Ready(out) = this.fut.as_mut().poll(cx) {
            return Poll::Ready(Ok(out));
        }
        let Some(armed) = &this.timer.armed else {
            return Poll::Pending;
        };
        if this.sleep.is_none() {
            let sleep = tokio::time::sleep(armed.settings.duration);
            this.sleep.set(Some(tokio::task::unconstrained(sleep)));
        }
        match this.sleep.as_mut().as_pin_mut().map(|sleep| sleep.poll(cx)) {
            Some(Poll::Ready(())) => Poll::Ready(Err(armed.timed_out(this.timer.spec))),
            _ => Poll::Pending,
        }
    }
}
