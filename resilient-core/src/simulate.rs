//! A stack of specs run against a described dependency on tokio's paused
//! clock: how many calls a request costs, how many succeed, how long they
//! wait, when a breaker opens, what a limit and a budget refuse, before a
//! single request reaches production (feature `simulate`).
//!
//! The stack is a [`StackLayer`]: the same mechanism code as the
//! attributes, with the attributes' nesting (see the guide's [one layer
//! for a whole stack](crate::guide::tower#one-layer-for-a-whole-stack)),
//! and the instances of the registry given to [`run`]. Nothing here models
//! a mechanism: each virtual request is a task that calls the stack, and
//! the [`Dependency`] is a tower service that sleeps its latency on the
//! virtual clock and answers as described. A minute of virtual time costs
//! no minute of real time.
//!
//! ```
//! use std::time::Duration;
//! use resilient_core::layer::StackLayer;
//! use resilient_core::settings::Value;
//! use resilient_core::simulate::{self, Dependency, Load, Outage};
//! use resilient_core::{CircuitBreakerSpec, Registry, RetrySpec};
//!
//! #[derive(RetrySpec)]
//! #[spec("resilient.retry.pet")]
//! pub struct PetRetry;
//!
//! #[derive(CircuitBreakerSpec)]
//! #[spec("resilient.circuitbreaker.pet")]
//! pub struct PetBreaker;
//!
//! # fn table(pairs: Vec<(&str, Value)>) -> Value {
//! #     Value::Table(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
//! # }
//! let root = table(vec![("resilient", table(vec![
//!     ("retry", table(vec![("pet", table(vec![
//!         ("delay", Value::Str("100ms".into())),
//!         ("attempts", Value::Int(2)),
//!     ]))])),
//!     ("circuitbreaker", table(vec![("pet", table(vec![
//!         ("failure_rate_threshold", Value::Int(50)),
//!         ("minimum_required_calls", Value::Int(20)),
//!         ("wait_duration_in_open_state", Value::Str("5s".into())),
//!         ("permitted_calls_in_half_open_state", Value::Int(3)),
//!         ("count_based", table(vec![("window_size", Value::Int(50))])),
//!     ]))])),
//! ]))]);
//! // A registry of its own: the simulation leaves its instances as it ends.
//! let registry = Registry::builder()
//!     .spec::<PetRetry>()
//!     .spec::<PetBreaker>()
//!     .build(&root)
//!     .map_err(|problems| format!("{problems:?}"))?;
//!
//! // Half the calls fail for 30 s, starting 10 s in.
//! let dependency = Dependency::new()
//!     .latency_fixed(Duration::from_millis(20))
//!     .outage(Outage::new(Duration::from_secs(10), Duration::from_secs(30)).failing(0.5));
//! // One request every 10 ms for a minute.
//! let load = Load::new(6_000, 100.0).seed(7);
//!
//! // As `#[retryable(PetRetry)] #[circuit_breakable(PetBreaker)]`.
//! let stack = StackLayer::new().spec::<PetRetry>().spec::<PetBreaker>();
//! let report = simulate::run(&registry, stack, &dependency, &load)?;
//! report.assert_amplification_at_most(1.5);
//! assert!(report.transitions.iter().any(|t| t.to == "open"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # What a run is
//!
//! - Requests arrive at the [`Load`]'s rate, evenly spaced or as a Poisson
//!   process drawn from its seed, each on its own task of a current-thread
//!   runtime whose clock is paused: the clock moves only when every task
//!   waits, straight to the next timer.
//! - The run takes place on a thread of its own, so that it can be called
//!   from a test that runs on a runtime already, and so that the thread's
//!   random numbers (a retry's jitter, adaptive throttling, fault
//!   injection) are seeded from the load's seed: the same inputs give the
//!   same [`Report`], to the byte.
//! - The registry's instances run the calls: give each run a registry
//!   built for it. A breaker left open by one run, a budget spent, and the
//!   timestamps of one run's virtual clock would otherwise carry into the
//!   next. Events are read from the registry while the run lasts
//!   ([`Registry::subscribe`]): a registry that other threads use at the
//!   same time would mix their events in.
//! - Every failure of the dependency is an `Err` ([`DependencyFailed`] in
//!   a [`BoxError`]), which every spec's default classification and
//!   `classify = http` count as a failure; an [`Answer`] is an
//!   [`HttpResponse`], so that the specs of an HTTP client run as they are.
//!   With [`Dependency::retry_after`], a failure is instead an answer 503
//!   with a `Retry-After` header, a value as an HTTP client returns it:
//!   `classify = http` waits what it asks, a default classification
//!   counts it as a success (seed 002's lesson), and the report counts it
//!   among the failures the caller got. A spec with a classification of
//!   its own sees these types, not the fn's.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;
use tower_layer::Layer;
use tower_service::Service;

use crate::explain::human;
use crate::http::HttpResponse;
use crate::layer::{
    BreakerLevel, Chain, ChaosLevel, End, Inner, LimitLevel, RateLevel, RetryLevel, StackLayer,
    Then, TimeoutLevel,
};
use crate::registry::uses::{Attr, FnChain};
use crate::registry::{Registry, Spec};
use crate::telemetry::{Event, StoppedBy};
use crate::{BoxError, Error};

// ------------------------------------------------------------- the inputs

/// How long the dependency takes to answer one call.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Latency {
    /// Always this long.
    Fixed(Duration),
    /// Drawn evenly between `min` and `max`.
    Uniform {
        /// The shortest.
        min: Duration,
        /// The longest.
        max: Duration,
    },
    /// Drawn from a log-normal distribution with this median and 99th
    /// percentile: the long tail of a real dependency. Draws beyond six
    /// standard deviations are clamped there.
    LogNormal {
        /// The median.
        p50: Duration,
        /// The 99th percentile (at least the median).
        p99: Duration,
    },
}

/// A window of virtual time during which the dependency fails more.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outage {
    /// When it starts, from the run's start.
    pub start: Duration,
    /// How long it lasts.
    pub length: Duration,
    /// The fraction of calls during it that fail (1 unless
    /// [`failing`](Self::failing) says otherwise).
    pub failing: f64,
    /// How long a failing call takes to answer: the dependency's latency
    /// unless [`slow`](Self::slow) says otherwise (a dependency that hangs
    /// until a timeout gives up on it).
    pub answer_after: Option<Duration>,
}

impl Outage {
    /// Every call that starts in `[start, start + length)` fails.
    pub fn new(start: Duration, length: Duration) -> Self {
        Self {
            start,
            length,
            failing: 1.0,
            answer_after: None,
        }
    }

    /// Only the fraction `rate` (from 0 to 1) of the calls fail.
    pub fn failing(mut self, rate: f64) -> Self {
        self.failing = rate;
        self
    }

    /// A failing call answers after `after` instead of the usual latency.
    pub fn slow(mut self, after: Duration) -> Self {
        self.answer_after = Some(after);
        self
    }

    fn covers(&self, at: Duration) -> bool {
        at >= self.start && at - self.start < self.length
    }
}

/// The dependency a simulated stack calls: how often it fails, how long it
/// takes, when it is down, and how much it can take at once.
#[derive(Debug, Clone, PartialEq)]
pub struct Dependency {
    failure_rate: f64,
    latency: Latency,
    outages: Vec<Outage>,
    capacity: Option<u64>,
    retry_after: Option<Duration>,
}

impl Default for Dependency {
    fn default() -> Self {
        Self::new()
    }
}

impl Dependency {
    /// A dependency that answers every call at once, successfully.
    pub fn new() -> Self {
        Self {
            failure_rate: 0.0,
            latency: Latency::Fixed(Duration::ZERO),
            outages: Vec::new(),
            capacity: None,
            retry_after: None,
        }
    }

    /// The fraction of calls (from 0 to 1) that fail outside outages, each
    /// drawn on its own.
    pub fn failure_rate(mut self, rate: f64) -> Self {
        self.failure_rate = rate;
        self
    }

    /// How long a call takes.
    pub fn latency(mut self, latency: Latency) -> Self {
        self.latency = latency;
        self
    }

    /// Every call takes `latency`.
    pub fn latency_fixed(self, latency: Duration) -> Self {
        self.latency(Latency::Fixed(latency))
    }

    /// A window during which calls fail (several may overlap: a call fails
    /// if one of them says so).
    pub fn outage(mut self, outage: Outage) -> Self {
        self.outages.push(outage);
        self
    }

    /// With more than `calls` calls in flight, each new call's latency is
    /// multiplied by the calls in flight divided by `calls`: a dependency
    /// that queues what it cannot serve at once.
    pub fn capacity(mut self, calls: u64) -> Self {
        self.capacity = Some(calls);
        self
    }

    /// Each failure (of the failure rate or an outage) answers 503 with a
    /// `Retry-After` of `wait`, in whole seconds rounded up, instead of an
    /// error: a server that says when to come back (see the [module
    /// docs](self) for how specs classify it).
    pub fn retry_after(mut self, wait: Duration) -> Self {
        self.retry_after = Some(wait);
        self
    }

    fn check(&self) -> Result<(), SimulateError> {
        if !(0.0..=1.0).contains(&self.failure_rate) {
            return Err(SimulateError::FailureRate(self.failure_rate));
        }
        match self.latency {
            Latency::Fixed(_) => {}
            Latency::Uniform { min, max } if min > max => {
                return Err(SimulateError::Latency(format!(
                    "`Uniform` has `min` {} above `max` {}: give `min <= max`",
                    human(min),
                    human(max)
                )))
            }
            Latency::Uniform { .. } => {}
            Latency::LogNormal { p50, p99 } if p50.is_zero() || p99 < p50 => {
                return Err(SimulateError::Latency(format!(
                    "`LogNormal` has p50 {} and p99 {}: give a median above 0 and a p99 at or above it",
                    human(p50),
                    human(p99)
                )))
            }
            Latency::LogNormal { .. } => {}
        }
        for (index, o) in self.outages.iter().enumerate() {
            if o.length.is_zero() {
                return Err(SimulateError::Outage {
                    index,
                    why: "lasts 0s, so it changes nothing: give it a length".into(),
                });
            }
            if !(0.0..=1.0).contains(&o.failing) {
                return Err(SimulateError::Outage {
                    index,
                    why: format!(
                        "fails a fraction {} of calls: a fraction is from 0 to 1 (0.5 for half)",
                        o.failing
                    ),
                });
            }
        }
        if self.capacity == Some(0) {
            return Err(SimulateError::Capacity);
        }
        Ok(())
    }
}

/// How requests arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Arrivals {
    /// One every `1 / rate` seconds.
    Even,
    /// A Poisson process of the rate: gaps drawn from an exponential
    /// distribution, from the seed.
    Poisson,
}

/// The requests of a run: how many, how fast, and the seed of every
/// random draw.
#[derive(Debug, Clone, PartialEq)]
pub struct Load {
    requests: u64,
    rate: f64,
    arrivals: Arrivals,
    seed: u64,
    bucket: Duration,
}

impl Load {
    /// `requests` requests, `per_second` of them each second of virtual
    /// time, evenly spaced, seed 0, a timeline in buckets of one second.
    pub fn new(requests: u64, per_second: f64) -> Self {
        Self {
            requests,
            rate: per_second,
            arrivals: Arrivals::Even,
            seed: 0,
            bucket: Duration::from_secs(1),
        }
    }

    /// Arrivals as a Poisson process of the same rate.
    pub fn poisson(mut self) -> Self {
        self.arrivals = Arrivals::Poisson;
        self
    }

    /// The seed of every random draw of the run.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The report's timeline in buckets of `width` (at most 10,000 of
    /// them: the last one counts whatever comes after).
    pub fn timeline(mut self, width: Duration) -> Self {
        self.bucket = width;
        self
    }

    fn check(&self) -> Result<(), SimulateError> {
        if self.requests == 0 {
            return Err(SimulateError::NoRequests);
        }
        if !(self.rate.is_finite() && self.rate > 0.0) {
            return Err(SimulateError::Rate(self.rate));
        }
        if self.bucket.is_zero() {
            return Err(SimulateError::Timeline);
        }
        #[allow(clippy::cast_precision_loss)]
        let span = (self.requests - 1) as f64 / self.rate;
        if span > MAX_SPAN_SECS {
            return Err(SimulateError::Span(span));
        }
        Ok(())
    }
}

/// Why a simulation did not run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum SimulateError {
    /// The dependency's failure rate is not a fraction.
    #[error(
        "the dependency's `failure_rate` is {0}: a rate is a fraction from 0 to 1 (0.3 for 30 %)"
    )]
    FailureRate(f64),
    /// The dependency's latency cannot be drawn.
    #[error("the dependency's latency {0}")]
    Latency(String),
    /// An outage that cannot be.
    #[error("outage {index} (counting from 0) {why}")]
    Outage {
        /// Its place among the dependency's outages.
        index: usize,
        /// What is wrong with it.
        why: String,
    },
    /// A capacity of 0 calls.
    #[error("the dependency's capacity is 0 calls: give 1 or more, or no capacity for one without a limit")]
    Capacity,
    /// A load without requests.
    #[error("the load has 0 requests: give at least 1")]
    NoRequests,
    /// A rate at which no request arrives.
    #[error("the load's rate is {0} requests per second: give a finite rate above 0")]
    Rate(f64),
    /// Requests that would arrive over more virtual time than a run counts.
    #[error("the load's last request would arrive {0:e} s in: more than the 10^9 s a run counts; give a higher rate or fewer requests")]
    Span(f64),
    /// A timeline bucket of no width.
    #[error("the load's timeline has buckets of 0s: give them a width")]
    Timeline,
    /// No annotated fn has this name.
    #[error("no annotated fn is named `{name}`{}", near.as_deref().map(|n| format!(": did you mean `{n}`?")).unwrap_or_default())]
    UnknownFn {
        /// The name given.
        name: String,
        /// The closest name of an annotated fn, if one is close.
        near: Option<String>,
    },
    /// The stack is not the fn's chain.
    #[error("the stack ({}) is not the chain of `{function}` ({}): give the stack the fn's specs, outermost first, as its attributes are written (its `#[fallback]` is not simulated)", stack.join(", "), chain.join(", "))]
    NotTheChain {
        /// The fn's path.
        function: String,
        /// The fn's specs, outermost first.
        chain: Vec<String>,
        /// The stack's specs, outermost first.
        stack: Vec<String>,
    },
    /// The runtime or the run's thread could not start.
    #[error("the simulation could not start: {0}")]
    Start(String),
}

// ---------------------------------------------------------- the dependency

/// One virtual request, as the stack's service receives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Its number, from 0, in order of arrival.
    pub index: u64,
}

/// An answer of the simulated dependency: 200, or with
/// [`Dependency::retry_after`] a failure's 503 and its `Retry-After`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The number of the call that answered, from 0.
    pub call: u64,
    /// Its HTTP status.
    pub status: u16,
    /// Its `Retry-After` header's value (whole seconds), if any.
    pub retry_after: Option<String>,
}

impl HttpResponse for Answer {
    fn status(&self) -> u16 {
        self.status
    }

    fn header(&self, name: &str) -> Option<&[u8]> {
        match name {
            "retry-after" => self.retry_after.as_deref().map(str::as_bytes),
            _ => None,
        }
    }
}

/// The simulated dependency's failure, in a [`BoxError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the simulated dependency failed call {call}{}", if *.outage { " (outage)" } else { "" })]
pub struct DependencyFailed {
    /// The number of the call, from 0.
    pub call: u64,
    /// Whether an outage failed it (rather than the failure rate).
    pub outage: bool,
}

/// What the dependency counts while a run lasts.
struct Upstate {
    spec: Dependency,
    origin: Instant,
    rng: RefCell<fastrand::Rng>,
    calls: Cell<u64>,
    in_flight: Cell<u64>,
    max_in_flight: Cell<u64>,
    call_times: RefCell<Vec<Duration>>,
    buckets: RefCell<Vec<Bucket>>,
    bucket: Duration,
}

impl Upstate {
    fn bucket(&self, at: Duration) -> std::cell::RefMut<'_, Bucket> {
        let index =
            usize::try_from(at.as_nanos() / self.bucket.as_nanos().max(1)).unwrap_or(usize::MAX);
        let mut buckets = self.buckets.borrow_mut();
        // A bucket per width of time up to this one (a run's last bucket
        // bounds them: its requests end before the run does).
        while buckets.len() <= index && buckets.len() < MAX_BUCKETS {
            let n = u32::try_from(buckets.len()).unwrap_or(u32::MAX);
            buckets.push(Bucket {
                at: self.bucket.saturating_mul(n),
                ..Bucket::default()
            });
        }
        let last = buckets.len() - 1;
        std::cell::RefMut::map(buckets, |b| &mut b[index.min(last)])
    }

    fn latency(&self) -> Duration {
        let mut rng = self.rng.borrow_mut();
        match self.spec.latency {
            Latency::Fixed(d) => d,
            Latency::Uniform { min, max } => {
                let span = (max - min).as_nanos();
                min.saturating_add(nanos(rng.u128(0..=span)))
            }
            Latency::LogNormal { p50, p99 } => {
                // Box-Muller: one standard normal draw from two uniform ones.
                let u1 = 1.0 - rng.f64(); // (0, 1]
                let u2 = rng.f64();
                let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                let sigma = (p99.as_secs_f64() / p50.as_secs_f64()).ln() / Z99;
                let factor = (sigma * z.clamp(-6.0, 6.0)).exp();
                scaled(p50, factor)
            }
        }
    }
}

/// The 99th percentile of the standard normal distribution.
const Z99: f64 = 2.326_347_874;

/// The longest a load's arrivals may span, in seconds of virtual time
/// (about 31 years).
const MAX_SPAN_SECS: f64 = 1e9;

/// The most rows of the timeline a report's `Display` shows.
const SHOWN_ROWS: usize = 40;

/// The most buckets a timeline holds; the last takes what comes later.
const MAX_BUCKETS: usize = 10_000;

fn nanos(n: u128) -> Duration {
    let secs = u64::try_from(n / 1_000_000_000).unwrap_or(u64::MAX);
    // Below 10^9: fits.
    let sub = u32::try_from(n % 1_000_000_000).unwrap_or(0);
    Duration::new(secs, sub)
}

/// `d` times `factor`, saturating (a factor that is not finite gives `d`).
fn scaled(d: Duration, factor: f64) -> Duration {
    if !factor.is_finite() || factor < 0.0 {
        return d;
    }
    Duration::try_from_secs_f64(d.as_secs_f64() * factor).unwrap_or(Duration::MAX)
}

/// The simulated dependency, as the tower service the stack calls.
#[derive(Clone)]
pub struct Upstream {
    state: Rc<Upstate>,
}

impl fmt::Debug for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Upstream")
            .field("dependency", &self.state.spec)
            .field("calls", &self.state.calls.get())
            .finish()
    }
}

/// A call in flight: counted out when it ends or is dropped (a timeout
/// that gives up on it).
struct InFlight(Rc<Upstate>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0
            .in_flight
            .set(self.0.in_flight.get().saturating_sub(1));
    }
}

impl Service<Request> for Upstream {
    type Response = Answer;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Answer, BoxError>>>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: Request) -> Self::Future {
        let st = Rc::clone(&self.state);
        let at = Instant::now().saturating_duration_since(st.origin);
        let call = st.calls.get();
        st.calls.set(call.saturating_add(1));
        st.call_times.borrow_mut().push(at);
        let in_flight = st.in_flight.get().saturating_add(1);
        st.in_flight.set(in_flight);
        st.max_in_flight.set(st.max_in_flight.get().max(in_flight));
        {
            let mut bucket = st.bucket(at);
            bucket.calls += 1;
            bucket.max_in_flight = bucket.max_in_flight.max(in_flight);
        }

        let outage = st.spec.outages.iter().find(|o| o.covers(at)).copied();
        let mut latency = st.latency();
        if let Some(capacity) = st.spec.capacity {
            if in_flight > capacity {
                #[allow(clippy::cast_precision_loss)]
                let factor = in_flight as f64 / capacity as f64;
                latency = scaled(latency, factor);
            }
        }
        let mut failed = None;
        if let Some(o) = outage {
            if o.failing >= 1.0 || st.rng.borrow_mut().f64() < o.failing {
                failed = Some(true);
                if let Some(after) = o.answer_after {
                    latency = after;
                }
            }
        }
        if failed.is_none()
            && st.spec.failure_rate > 0.0
            && st.rng.borrow_mut().f64() < st.spec.failure_rate
        {
            failed = Some(false);
        }
        if failed.is_some() {
            st.bucket(at).call_failures += 1;
        }
        // Whole seconds, rounded up: what a header can say.
        let hint = st
            .spec
            .retry_after
            .map(|d| d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0)));
        let guard = InFlight(st);
        Box::pin(async move {
            tokio::time::sleep(latency).await;
            drop(guard);
            match (failed, hint) {
                (Some(_), Some(secs)) => Ok(Answer {
                    call,
                    status: 503,
                    retry_after: Some(secs.to_string()),
                }),
                (Some(outage), None) => {
                    Err(Box::new(DependencyFailed { call, outage }) as BoxError)
                }
                (None, _) => Ok(Answer {
                    call,
                    status: 200,
                    retry_after: None,
                }),
            }
        })
    }
}

// -------------------------------------------------------------- the report

/// What the callers got, request by request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Outcomes {
    /// Answered successfully.
    pub succeeded: u64,
    /// Answered with the dependency's 503 (with
    /// [`Dependency::retry_after`]), passed on as a value.
    pub failed_responses: u64,
    /// The dependency's failure, passed on (by a stack without retry, or
    /// a retry that gave up with `exhausted = last_failure`, an empty
    /// budget, or throttling).
    pub dependency_failed: u64,
    /// `Error::RetryExhausted`.
    pub retry_exhausted: u64,
    /// `Error::CallNotPermitted`: a breaker was open.
    pub call_not_permitted: u64,
    /// `Error::Timeout`.
    pub timed_out: u64,
    /// `Error::ConcurrencyLimitReached`.
    pub concurrency_limited: u64,
    /// `Error::RateLimitExceeded`.
    pub rate_limited: u64,
    /// Any other error (`Error::Injected`, a backend's).
    pub other: u64,
}

/// Latency percentiles, in virtual time, from each request's arrival to
/// its answer (whatever it was).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Percentiles {
    /// The median.
    #[cfg_attr(
        feature = "serde",
        serde(serialize_with = "crate::settings::ser::duration")
    )]
    pub p50: Duration,
    /// The 90th percentile.
    #[cfg_attr(
        feature = "serde",
        serde(serialize_with = "crate::settings::ser::duration")
    )]
    pub p90: Duration,
    /// The 99th percentile.
    #[cfg_attr(
        feature = "serde",
        serde(serialize_with = "crate::settings::ser::duration")
    )]
    pub p99: Duration,
    /// The longest.
    #[cfg_attr(
        feature = "serde",
        serde(serialize_with = "crate::settings::ser::duration")
    )]
    pub max: Duration,
}

/// A breaker's change of state, at a virtual time.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Transition {
    /// When, from the run's start.
    #[cfg_attr(
        feature = "serde",
        serde(serialize_with = "crate::settings::ser::duration")
    )]
    pub at: Duration,
    /// The breaker spec's name.
    pub spec: &'static str,
    /// Its key, for a keyed breaker.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub key: Option<String>,
    /// The state it left (`closed`, `open`, `half-open`).
    pub from: String,
    /// The state it entered.
    pub to: String,
}

/// The calls a spec refused (a full limit, an open breaker, spent
/// permits), over the run.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Refusals {
    /// The spec's name.
    pub spec: &'static str,
    /// Its kind (`circuit_breaker`, `concurrency_limit`, `rate_limiter`).
    pub kind: &'static str,
    /// How many calls it refused.
    pub refused: u64,
}

/// How a retry spec's calls went.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Retries {
    /// The spec's name.
    pub spec: &'static str,
    /// Retries started (each one a call more below it).
    pub retried: u64,
    /// Calls it gave up on after its last attempt.
    pub gave_up_attempts: u64,
    /// Calls it gave up on because a retry would have crossed its
    /// `timeout`.
    pub gave_up_timeout: u64,
    /// Retries its budget refused.
    pub gave_up_budget: u64,
    /// Retries adaptive throttling refused.
    pub gave_up_throttled: u64,
    /// First calls adaptive throttling refused (`first_calls = true`):
    /// calls that made no attempt.
    pub refused_first_calls: u64,
}

/// One stretch of the run's virtual time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Bucket {
    /// Its start, from the run's start.
    #[cfg_attr(
        feature = "serde",
        serde(serialize_with = "crate::settings::ser::duration")
    )]
    pub at: Duration,
    /// Requests that arrived in it.
    pub requests: u64,
    /// Calls the dependency received in it.
    pub calls: u64,
    /// Of those, calls it failed.
    pub call_failures: u64,
    /// Requests that ended in it successfully.
    pub succeeded: u64,
    /// Requests that ended in it with an error.
    pub failed: u64,
    /// The most calls in flight at the dependency at once in it, as each
    /// call started.
    pub max_in_flight: u64,
    /// Retries started in it.
    pub retries: u64,
    /// Retries a budget or adaptive throttling refused in it.
    pub retries_refused: u64,
    /// Calls a spec refused in it (an open breaker, a full limit, spent
    /// permits).
    pub refused: u64,
}

/// What a run did. Its `Display` is a table a person reads; with the
/// `serde` feature it serializes as JSON.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Report {
    /// Requests sent.
    pub requests: u64,
    /// The load's rate, requests per second.
    pub rate: f64,
    /// The load's seed.
    pub seed: u64,
    /// Calls the dependency received.
    pub calls: u64,
    /// Calls per request.
    pub amplification: f64,
    /// The fraction of requests that succeeded.
    pub success_rate: f64,
    /// What the requests got.
    pub outcomes: Outcomes,
    /// Each request's wait for its answer.
    pub latency: Percentiles,
    /// The run's length in virtual time: until the last request answered.
    #[cfg_attr(
        feature = "serde",
        serde(serialize_with = "crate::settings::ser::duration")
    )]
    pub virtual_time: Duration,
    /// The most calls in flight at the dependency at once.
    pub max_in_flight: u64,
    /// Each retry spec's retries and refusals, by name.
    pub retries: Vec<Retries>,
    /// Each spec's refusals, by name.
    pub refusals: Vec<Refusals>,
    /// Every breaker transition, in order.
    pub transitions: Vec<Transition>,
    /// The run in buckets of the load's timeline width.
    pub timeline: Vec<Bucket>,
    /// When each call reached the dependency, from the run's start, in
    /// order (not serialized: one entry per call).
    #[cfg_attr(feature = "serde", serde(skip))]
    pub call_times: Vec<Duration>,
}

impl Report {
    /// Panics, with the report, unless the dependency received at most
    /// `max` calls per request: the test helper for a bound on a retry
    /// storm.
    #[track_caller]
    pub fn assert_amplification_at_most(&self, max: f64) {
        assert!(
            self.amplification <= max,
            "{:.3} calls per request, above the {max} expected\n{self}",
            self.amplification
        );
    }

    /// Panics, with the report, unless at least the fraction `min` of the
    /// requests succeeded.
    #[track_caller]
    pub fn assert_success_rate_at_least(&self, min: f64) {
        assert!(
            self.success_rate >= min,
            "{:.4} of the requests succeeded, below the {min} expected\n{self}",
            self.success_rate
        );
    }

    /// Panics, with the report, unless the 99th percentile of the
    /// requests' waits is at most `max`.
    #[track_caller]
    pub fn assert_p99_at_most(&self, max: Duration) {
        assert!(
            self.latency.p99 <= max,
            "p99 of {}, above the {} expected\n{self}",
            human(self.latency.p99),
            human(max)
        );
    }

    /// The transitions of the breaker spec named `spec` into state `to`
    /// (`"open"`, `"half-open"`, `"closed"`), by when.
    pub fn transitions_to<'a>(
        &'a self,
        spec: &'a str,
        to: &'a str,
    ) -> impl Iterator<Item = Duration> + 'a {
        self.transitions
            .iter()
            .filter(move |t| t.spec == spec && t.to == to)
            .map(|t| t.at)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} requests at {}/s (seed {}), {} of virtual time",
            self.requests,
            self.rate,
            self.seed,
            human(self.virtual_time)
        )?;
        writeln!(
            f,
            "  calls to the dependency  {} ({:.3} per request; at most {} in flight)",
            self.calls, self.amplification, self.max_in_flight
        )?;
        let o = &self.outcomes;
        writeln!(
            f,
            "  succeeded                {} ({:.2} %)",
            o.succeeded,
            self.success_rate * 100.0
        )?;
        for (what, n) in [
            ("dependency's failure", o.dependency_failed),
            ("dependency's 503", o.failed_responses),
            ("retry exhausted", o.retry_exhausted),
            ("breaker open", o.call_not_permitted),
            ("timed out", o.timed_out),
            ("concurrency limit", o.concurrency_limited),
            ("rate limited", o.rate_limited),
            ("other error", o.other),
        ] {
            if n > 0 {
                writeln!(f, "  {what:<24} {n}")?;
            }
        }
        let l = &self.latency;
        writeln!(
            f,
            "  latency                  p50 {}, p90 {}, p99 {}, max {}",
            human(l.p50),
            human(l.p90),
            human(l.p99),
            human(l.max)
        )?;
        for r in &self.retries {
            writeln!(
                f,
                "  {} retried {} times; gave up: {} on attempts, {} on timeout, {} on budget, {} throttled",
                r.spec, r.retried, r.gave_up_attempts, r.gave_up_timeout, r.gave_up_budget, r.gave_up_throttled
            )?;
            if r.refused_first_calls > 0 {
                writeln!(
                    f,
                    "  {} refused {} first calls (adaptive throttling, `first_calls = true`)",
                    r.spec, r.refused_first_calls
                )?;
            }
        }
        for r in &self.refusals {
            writeln!(f, "  {} ({}) refused {} calls", r.spec, r.kind, r.refused)?;
        }
        if !self.transitions.is_empty() {
            writeln!(f, "  breaker transitions:")?;
            for t in &self.transitions {
                let key = t
                    .key
                    .as_deref()
                    .map(|k| format!(" [{k}]"))
                    .unwrap_or_default();
                writeln!(
                    f,
                    "    {:>10}  {}{key}: {} -> {}",
                    human(t.at),
                    t.spec,
                    t.from,
                    t.to
                )?;
            }
        }
        // A person reads a screen: at most `SHOWN_ROWS` rows, each the sum
        // of as many buckets as it takes (the JSON keeps every bucket).
        let per_row = self.timeline.len().div_ceil(SHOWN_ROWS).max(1);
        writeln!(
            f,
            "  timeline{}:",
            if per_row > 1 {
                format!(" ({per_row} buckets a row)")
            } else {
                String::new()
            }
        )?;
        writeln!(
            f,
            "    {:>10}  {:>8}  {:>8}  {:>8}  {:>9}  {:>8}  {:>8}  {:>8}  {:>8}  {:>8}",
            "from",
            "requests",
            "calls",
            "failing",
            "in flight",
            "ok",
            "errors",
            "retries",
            "no token",
            "refused"
        )?;
        for rows in self.timeline.chunks(per_row) {
            let mut sum = Bucket {
                at: rows[0].at,
                ..Bucket::default()
            };
            for b in rows {
                sum.requests += b.requests;
                sum.calls += b.calls;
                sum.call_failures += b.call_failures;
                sum.succeeded += b.succeeded;
                sum.failed += b.failed;
                sum.max_in_flight = sum.max_in_flight.max(b.max_in_flight);
                sum.retries += b.retries;
                sum.retries_refused += b.retries_refused;
                sum.refused += b.refused;
            }
            writeln!(
                f,
                "    {:>10}  {:>8}  {:>8}  {:>8}  {:>9}  {:>8}  {:>8}  {:>8}  {:>8}  {:>8}",
                human(sum.at),
                sum.requests,
                sum.calls,
                sum.call_failures,
                sum.max_in_flight,
                sum.succeeded,
                sum.failed,
                sum.retries,
                sum.retries_refused,
                sum.refused
            )?;
        }
        Ok(())
    }
}

// ------------------------------------------------------------------ the run

/// What the registry's events said during a run.
#[derive(Default)]
struct Heard {
    origin: Option<Instant>,
    /// The timeline's width.
    width: Duration,
    retries: BTreeMap<&'static str, Retries>,
    refusals: BTreeMap<&'static str, Refusals>,
    transitions: Vec<Transition>,
    /// Per bucket of the timeline: retries started, retries a budget or
    /// throttling refused, calls a spec refused.
    per_bucket: Vec<[u64; 3]>,
}

impl Heard {
    fn hear(&mut self, event: &Event) {
        let at = self
            .origin
            .map(|o| Instant::now().saturating_duration_since(o))
            .unwrap_or_default();
        let index = usize::try_from(at.as_nanos() / self.width.as_nanos().max(1))
            .unwrap_or(usize::MAX)
            .min(MAX_BUCKETS - 1);
        if self.per_bucket.len() <= index {
            self.per_bucket.resize(index + 1, [0; 3]);
        }
        let counts = &mut self.per_bucket[index];
        match event {
            Event::RetryScheduled { .. } => counts[0] += 1,
            Event::RetryExhausted {
                reason: StoppedBy::Budget | StoppedBy::BudgetUnavailable | StoppedBy::Throttled,
                ..
            } => counts[1] += 1,
            Event::RetryExhausted {
                reason: StoppedBy::ThrottledFirstCall,
                ..
            } => counts[2] += 1,
            Event::Rejected { .. } => counts[2] += 1,
            _ => {}
        }
        match event {
            Event::RetryScheduled { spec, .. } => self.retry(spec).retried += 1,
            Event::RetryExhausted { spec, reason, .. } => {
                let r = self.retry(spec);
                match reason {
                    StoppedBy::Attempts => r.gave_up_attempts += 1,
                    StoppedBy::Timeout => r.gave_up_timeout += 1,
                    StoppedBy::Budget | StoppedBy::BudgetUnavailable => r.gave_up_budget += 1,
                    StoppedBy::Throttled => r.gave_up_throttled += 1,
                    StoppedBy::ThrottledFirstCall => r.refused_first_calls += 1,
                }
            }
            Event::Rejected { spec, kind, .. } => {
                self.refusals
                    .entry(spec)
                    .or_insert(Refusals {
                        spec,
                        kind: kind.label(),
                        refused: 0,
                    })
                    .refused += 1;
            }
            Event::StateTransition {
                spec,
                from,
                to,
                key,
                ..
            } => self.transitions.push(Transition {
                at,
                spec,
                key: key.as_deref().map(str::to_owned),
                from: from.to_string(),
                to: to.to_string(),
            }),
            _ => {}
        }
    }

    fn retry(&mut self, spec: &'static str) -> &mut Retries {
        self.retries.entry(spec).or_insert(Retries {
            spec,
            ..Retries::default()
        })
    }
}

/// One request's end.
struct Ended {
    waited: Duration,
    /// Whether the answer was a success, or the error.
    outcome: Result<bool, BoxError>,
}

/// Runs `stack` against `dependency` for `load`'s requests, on a paused
/// clock, with the instances of `registry` (see the [module
/// docs](self)), and reports what happened.
///
/// # Errors
///
/// [`SimulateError`] for a dependency or a load that cannot be simulated
/// (a failure rate outside 0..=1, no requests, a rate of 0), and when the
/// run's thread or runtime cannot start.
pub fn run<L>(
    registry: &Registry,
    stack: StackLayer<L, Request>,
    dependency: &Dependency,
    load: &Load,
) -> Result<Report, SimulateError>
where
    L: Chain<Inner<Upstream>, Request> + Send + 'static,
{
    dependency.check()?;
    load.check()?;
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("resilient-simulate".into())
            .spawn_scoped(s, move || run_here(registry, stack, dependency, load))
            .map_err(|e| SimulateError::Start(e.to_string()))?
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// [`run`], for the annotated fn named `function` (its path
/// `module::name`, or its name alone): the stack must hold the fn's specs
/// in the order of its attributes (its `#[fallback]` aside), as recorded
/// by the attributes themselves, so that what is simulated is the fn's
/// chain and cannot drift from it.
///
/// # Errors
///
/// [`SimulateError::UnknownFn`] (with the closest name) when no annotated
/// fn is named so, [`SimulateError::NotTheChain`] when the stack's specs
/// are not the fn's, and the errors of [`run`].
pub fn run_fn<L>(
    registry: &Registry,
    function: &str,
    stack: StackLayer<L, Request>,
    dependency: &Dependency,
    load: &Load,
) -> Result<Report, SimulateError>
where
    L: Chain<Inner<Upstream>, Request> + Specs + Send + 'static,
{
    let chain = find_fn(function)?;
    let entries: Vec<_> = registry
        .spec_settings()
        .into_iter()
        .map(|(entry, _)| entry)
        .collect();
    let name_of = |id: std::any::TypeId| {
        entries.iter().find(|e| (e.type_id)() == id).map_or_else(
            || "(a spec this registry lacks)".to_owned(),
            |e| e.name.to_owned(),
        )
    };
    let wanted: Vec<Option<std::any::TypeId>> = chain
        .links
        .iter()
        .filter(|l| l.attr != Attr::Fallback)
        .map(|l| l.spec.map(|id| id()))
        .collect();
    let mut given = Vec::new();
    L::specs(&mut given);
    if wanted.len() != given.len() || wanted.iter().zip(&given).any(|(w, g)| *w != Some(g.0)) {
        return Err(SimulateError::NotTheChain {
            function: format!("{}::{}", chain.module, chain.name),
            chain: wanted
                .iter()
                .map(|w| w.map_or_else(|| "(a generic spec)".to_owned(), name_of))
                .collect(),
            stack: given.iter().map(|g| g.1.to_owned()).collect(),
        });
    }
    run(registry, stack, dependency, load)
}

/// The annotated fn named `name`, or the error naming the closest.
fn find_fn(name: &str) -> Result<&'static FnChain, SimulateError> {
    let path = |c: &FnChain| format!("{}::{}", c.module, c.name);
    if let Some(c) = FnChain::all().find(|c| path(c) == name || c.name == name) {
        return Ok(c);
    }
    let near = FnChain::all()
        .map(|c| {
            let p = path(c);
            let score = strsim::jaro_winkler(name, &p).max(strsim::jaro_winkler(name, c.name));
            (score, p)
        })
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0).then_with(|| b.1.cmp(&a.1)))
        .map(|(_, p)| p);
    Err(SimulateError::UnknownFn {
        name: name.to_owned(),
        near,
    })
}

/// The specs of a stack, outermost first: what [`run_fn`] compares with
/// a fn's chain. Not a public API.
#[doc(hidden)]
pub trait Specs {
    /// Adds each spec's type id and name to `out`.
    fn specs(out: &mut Vec<(std::any::TypeId, &'static str)>);
}

impl Specs for End {
    fn specs(_: &mut Vec<(std::any::TypeId, &'static str)>) {}
}

/// A stack's part, by its spec. Not a public API.
#[doc(hidden)]
pub trait PartSpec {
    /// The spec's type id and name.
    fn spec() -> (std::any::TypeId, &'static str);
}

macro_rules! part_spec {
    ($($level:ident<S $(, $k:ident)?>),*) => {$(
        impl<S: Spec $(, $k)?> PartSpec for $level<S $(, $k)?> {
            fn spec() -> (std::any::TypeId, &'static str) {
                (std::any::TypeId::of::<S>(), S::NAME)
            }
        }
    )*};
}

part_spec!(
    RetryLevel<S>,
    BreakerLevel<S, K>,
    LimitLevel<S, K>,
    RateLevel<S, K>,
    TimeoutLevel<S>,
    ChaosLevel<S>
);

impl<H: PartSpec, T: Specs> Specs for Then<H, T> {
    fn specs(out: &mut Vec<(std::any::TypeId, &'static str)>) {
        out.push(H::spec());
        T::specs(out);
    }
}

fn run_here<L>(
    registry: &Registry,
    stack: StackLayer<L, Request>,
    dependency: &Dependency,
    load: &Load,
) -> Result<Report, SimulateError>
where
    L: Chain<Inner<Upstream>, Request> + 'static,
{
    // This thread's generator draws a retry's jitter, throttling's
    // refusals and injected faults: seeded, the run repeats.
    fastrand::seed(load.seed ^ 0x0005_eed0_fa11_ca11);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(|e| SimulateError::Start(e.to_string()))?;
    let _default = registry.set_default();
    let heard = Arc::new(Mutex::new(Heard::default()));
    let listening = Arc::clone(&heard);
    let subscription = registry.subscribe(move |event| {
        if let Ok(mut h) = listening.lock() {
            h.hear(event);
        }
    });
    let local = tokio::task::LocalSet::new();
    let report = local.block_on(&runtime, drive(stack, dependency, load, &heard));
    registry.unsubscribe(subscription);
    let heard = std::mem::take(&mut *heard.lock().unwrap_or_else(|p| p.into_inner()));
    Ok(report.finish(heard))
}

/// A run's figures before the events join them.
struct Partial {
    report: Report,
}

impl Partial {
    fn finish(mut self, heard: Heard) -> Report {
        self.report.retries = heard.retries.into_values().collect();
        self.report.refusals = heard.refusals.into_values().collect();
        self.report.transitions = heard.transitions;
        for (index, [retried, refused_retries, refused]) in heard.per_bucket.into_iter().enumerate()
        {
            while self.report.timeline.len() <= index {
                let n = u32::try_from(self.report.timeline.len()).unwrap_or(u32::MAX);
                self.report.timeline.push(Bucket {
                    at: heard.width.saturating_mul(n),
                    ..Bucket::default()
                });
            }
            let b = &mut self.report.timeline[index];
            b.retries = retried;
            b.retries_refused = refused_retries;
            b.refused = refused;
        }
        self.report
    }
}

async fn drive<L>(
    stack: StackLayer<L, Request>,
    dependency: &Dependency,
    load: &Load,
    heard: &Mutex<Heard>,
) -> Partial
where
    L: Chain<Inner<Upstream>, Request> + 'static,
{
    let origin = Instant::now();
    if let Ok(mut h) = heard.lock() {
        h.origin = Some(origin);
        h.width = load.bucket;
    }
    let state = Rc::new(Upstate {
        spec: dependency.clone(),
        origin,
        rng: RefCell::new(fastrand::Rng::with_seed(load.seed)),
        calls: Cell::new(0),
        in_flight: Cell::new(0),
        max_in_flight: Cell::new(0),
        call_times: RefCell::new(Vec::new()),
        buckets: RefCell::new(Vec::new()),
        bucket: load.bucket,
    });
    let service = stack.layer(Upstream {
        state: Rc::clone(&state),
    });
    let mut arrivals = fastrand::Rng::with_seed(load.seed.rotate_left(17) ^ 0xa771_7a15);
    let ended: Rc<RefCell<Vec<Ended>>> = Rc::new(RefCell::new(Vec::new()));
    let mut tasks = Vec::new();
    let mut at_secs = 0.0_f64;
    for index in 0..load.requests {
        #[allow(clippy::cast_precision_loss)]
        let due = match load.arrivals {
            Arrivals::Even => index as f64 / load.rate,
            Arrivals::Poisson => {
                // Exponential gaps: -ln(U) / rate, U in (0, 1].
                at_secs += -(1.0 - arrivals.f64()).ln() / load.rate;
                at_secs
            }
        };
        let due = Duration::try_from_secs_f64(due).unwrap_or(Duration::MAX);
        if let Some(when) = origin.checked_add(due) {
            tokio::time::sleep_until(when).await;
        }
        let arrived = Instant::now();
        state
            .bucket(arrived.saturating_duration_since(origin))
            .requests += 1;
        let mut service = service.clone();
        let ended = Rc::clone(&ended);
        let state = Rc::clone(&state);
        tasks.push(tokio::task::spawn_local(async move {
            let outcome = match std::future::poll_fn(|cx| service.poll_ready(cx)).await {
                Ok(()) => service.call(Request { index }).await,
                Err(e) => Err(e),
            };
            let now = Instant::now();
            let mut bucket = state.bucket(now.saturating_duration_since(origin));
            match &outcome {
                Ok(a) if a.status < 500 => bucket.succeeded += 1,
                _ => bucket.failed += 1,
            }
            drop(bucket);
            ended.borrow_mut().push(Ended {
                waited: now.saturating_duration_since(arrived),
                outcome: outcome.map(|a| a.status < 500),
            });
        }));
    }
    for task in tasks {
        // A panic in the stack is the stack's: passed on.
        if let Err(e) = task.await {
            if e.is_panic() {
                std::panic::resume_unwind(e.into_panic());
            }
        }
    }
    let virtual_time = Instant::now().saturating_duration_since(origin);
    drop(service);
    let ended = std::mem::take(&mut *ended.borrow_mut());
    let mut outcomes = Outcomes::default();
    let mut waits: Vec<Duration> = Vec::with_capacity(ended.len());
    for e in &ended {
        waits.push(e.waited);
        match &e.outcome {
            Ok(true) => outcomes.succeeded += 1,
            Ok(false) => outcomes.failed_responses += 1,
            Err(error) => match error.downcast_ref::<Error>() {
                Some(Error::RetryExhausted(_)) => outcomes.retry_exhausted += 1,
                Some(Error::CallNotPermitted { .. }) => outcomes.call_not_permitted += 1,
                Some(Error::Timeout { .. }) => outcomes.timed_out += 1,
                Some(Error::ConcurrencyLimitReached { .. }) => outcomes.concurrency_limited += 1,
                Some(Error::RateLimitExceeded { .. }) => outcomes.rate_limited += 1,
                Some(_) => outcomes.other += 1,
                None if error.is::<DependencyFailed>() => outcomes.dependency_failed += 1,
                None => outcomes.other += 1,
            },
        }
    }
    waits.sort_unstable();
    let calls = state.calls.get();
    #[allow(clippy::cast_precision_loss)]
    let per = |n: u64| n as f64 / load.requests as f64;
    let report = Report {
        requests: load.requests,
        rate: load.rate,
        seed: load.seed,
        calls,
        amplification: per(calls),
        success_rate: per(outcomes.succeeded),
        outcomes,
        latency: Percentiles {
            p50: rank(&waits, 50),
            p90: rank(&waits, 90),
            p99: rank(&waits, 99),
            max: waits.last().copied().unwrap_or_default(),
        },
        virtual_time,
        max_in_flight: state.max_in_flight.get(),
        retries: Vec::new(),
        refusals: Vec::new(),
        transitions: Vec::new(),
        timeline: std::mem::take(&mut *state.buckets.borrow_mut()),
        call_times: std::mem::take(&mut *state.call_times.borrow_mut()),
    };
    Partial { report }
}

/// The nearest-rank `p`th percentile of `sorted`.
fn rank(sorted: &[Duration], p: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    // ceil(p/100 × n), from 1; p ≤ 100 and n a slice's length: no overflow
    // before the division for any n that fits in memory.
    let n = sorted.len();
    let at = (n / 100) * p + ((n % 100) * p).div_ceil(100);
    sorted[at.clamp(1, n) - 1]
}
