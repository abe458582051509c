//! Specs as reqwest-middleware middleware (feature `reqwest-middleware`).
//!
//! Many clients add retries to reqwest through
//! [reqwest-middleware](https://docs.rs/reqwest-middleware), which is not
//! tower: a `ClientWithMiddleware` runs a chain of [`Middleware`]s around
//! each request. Every retry, circuit breaker, concurrency limit, rate
//! limiter and timeout spec is one too, through [`Middlewares::middleware`],
//! running each request through the spec's one shared instance (the one its
//! attributes and layers use), in the order attached (first = outermost):
//!
//! ```
//! use resilient_core::layer::middleware::Middlewares;
//! use resilient_core::{CircuitBreakerSpec, RetrySpec};
//!
//! #[derive(RetrySpec)]
//! #[spec("resilient.retry.payments", classify = http)]
//! pub struct PaymentsRetry;
//!
//! #[derive(CircuitBreakerSpec)]
//! #[spec("resilient.circuitbreaker.payments", classify = http)]
//! pub struct PaymentsBreaker;
//!
//! let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
//!     .with(PaymentsRetry::middleware())
//!     .with(PaymentsBreaker::middleware())
//!     .build();
//! # let _ = client;
//! ```
//!
//! The errors are reqwest-middleware's: a rejection is its
//! `Error::Middleware` holding a [`resilient_core::Error`](Error), and the
//! middleware inside one another see it, as the attributes do (a breaker
//! ignores a limit's rejection; a retry passes an open breaker's on). A
//! failure is what the spec's classification says (`classify = http`: a
//! 503 response is one).
//!
//! [`Error::from_middleware`] finds the rejection in a
//! `reqwest_middleware::Error`, and `resilient_core::Error::try_from(e)`
//! takes it out (giving back any other error unchanged), so that an
//! application's error keeps it as its resilience error and answers it as
//! one, 503 for an open breaker rather than the 502 of a failed upstream
//! (with the `axum` feature, through [`Error`]'s `IntoResponse`):
//!
//! ```
//! #[derive(Debug, thiserror::Error)]
//! pub enum ApiError {
//!     #[error("the upstream failed: {0}")]
//!     Upstream(reqwest_middleware::Error),
//!     #[error(transparent)]
//!     Resilience(#[from] resilient_core::Error),
//! }
//!
//! impl From<reqwest_middleware::Error> for ApiError {
//!     fn from(e: reqwest_middleware::Error) -> Self {
//!         match resilient_core::Error::try_from(e) {
//!             Ok(rejected) => ApiError::Resilience(rejected),
//!             Err(e) => ApiError::Upstream(e),
//!         }
//!     }
//! }
//! ```
//!
//! A retry sends a copy of the request per attempt (`Request::try_clone`);
//! a request whose body is a stream cannot be copied, and a retry that
//! could retry it refuses it before sending it, with an error that says so
//! ([`NotRetryable`], counted as a rejected call; a breaker outside does
//! not count it). A retry that is disabled or allows no retry
//! (`attempts = 0`) sends any request once, as it is.

use std::marker::PhantomData;

use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next};

use super::retry::LayerJudge;
use super::LayerError;
use crate::circuit_breaker::{unclassified, CircuitBreakerSpec, Permit};
use crate::concurrency::{ConcurrencyLimitSpec, Enter, LimitCall};
use crate::error::Error;
use crate::outcome::Fail;
use crate::rate_limiter::{RateCall, RateLimiterSpec};
use crate::registry::{Key, Spec};
use crate::retry::{Exhaustion, InAttempt, RetryCall, RetrySpec, Step};
use crate::spec::{Classify, Verdict};
use crate::telemetry::Outcome;
use crate::timeout::{TimeoutCall, TimeoutSpec};

/// reqwest-middleware's error.
type MwError = reqwest_middleware::Error;

impl From<Error> for reqwest_middleware::Error {
    fn from(error: Error) -> Self {
        reqwest_middleware::Error::Middleware(error.into())
    }
}

impl LayerError for reqwest_middleware::Error {
    fn resilience(&self) -> Option<&Error> {
        Error::from_middleware(self)
    }
}

impl Error {
    /// The resilience error a reqwest-middleware error holds: a rejection
    /// by a spec's middleware (an open breaker, a rate limit, a timeout,
    /// a retry that gave up), found in its `Error::Middleware`. `None` for
    /// reqwest's own errors and other middleware's.
    ///
    /// ```
    /// use resilient_core::Error;
    ///
    /// let limited = Error::RateLimitExceeded {
    ///     spec: "PaymentsRate",
    ///     retry_after: std::time::Duration::from_secs(1),
    /// };
    /// let e = reqwest_middleware::Error::from(limited);
    /// assert!(matches!(Error::from_middleware(&e), Some(Error::RateLimitExceeded { .. })));
    /// ```
    pub fn from_middleware(error: &reqwest_middleware::Error) -> Option<&Error> {
        match error {
            reqwest_middleware::Error::Middleware(e) => e.downcast_ref::<Error>(),
            reqwest_middleware::Error::Reqwest(_) => None,
        }
    }
}

/// The resilience error a reqwest-middleware error holds, taken out of it
/// (see [`Error::from_middleware`]); any other error is given back
/// unchanged, as `Err`.
impl TryFrom<reqwest_middleware::Error> for Error {
    type Error = reqwest_middleware::Error;

    fn try_from(error: reqwest_middleware::Error) -> Result<Self, Self::Error> {
        match error {
            reqwest_middleware::Error::Middleware(e) => e
                .downcast::<Error>()
                .map_err(reqwest_middleware::Error::Middleware),
            reqwest => Err(reqwest),
        }
    }
}

/// A spec as reqwest-middleware middleware: implemented for every retry,
/// circuit breaker, concurrency limit, rate limiter and timeout spec.
pub trait Middlewares: Spec {
    /// The spec's middleware type.
    type Middleware: Default;

    /// The spec's middleware, for `ClientBuilder::with`.
    fn middleware() -> Self::Middleware {
        Self::Middleware::default()
    }
}

/// A mechanism with middleware. Not a public API.
#[doc(hidden)]
pub trait HasMiddleware {
    /// The middleware of a spec `S` of this mechanism.
    type Middleware<S: Spec>: Default;
}

impl<S: Spec> Middlewares for S
where
    S::Mechanism: HasMiddleware,
{
    type Middleware = <S::Mechanism as HasMiddleware>::Middleware<S>;
}

/// A request a retry cannot copy (its body is a stream): refused before it
/// is sent, since it could not be sent again.
#[derive(Debug, thiserror::Error)]
#[error(
    "`{spec}` cannot retry a request whose body is a stream (`Request::try_clone` gave none): \
     send its body as bytes, or send this request through a client without the retry"
)]
pub struct NotRetryable {
    /// The retry spec's name.
    pub spec: &'static str,
}

/// Whether `out` is a retry's refusal of a request it could not copy.
fn refused_unsent(out: &reqwest_middleware::Result<Response>) -> bool {
    matches!(out, Err(reqwest_middleware::Error::Middleware(e)) if e.is::<NotRetryable>())
}

macro_rules! spec_middleware {
    ($(#[$doc:meta])* $name:ident for $mechanism:ty) => {
        $(#[$doc])*
        pub struct $name<S> {
            _spec: PhantomData<fn() -> S>,
        }

        impl<S> Default for $name<S> {
            fn default() -> Self {
                Self { _spec: PhantomData }
            }
        }

        impl<S> std::fmt::Debug for $name<S> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_tuple(stringify!($name))
                    .field(&std::any::type_name::<S>())
                    .finish()
            }
        }

        impl HasMiddleware for $mechanism {
            type Middleware<S: Spec> = $name<S>;
        }
    };
}

spec_middleware! {
    /// A retry spec as middleware: see the [module docs](self).
    RetryMiddleware for crate::retry::Retry
}

spec_middleware! {
    /// A circuit breaker spec as middleware: a permit per request.
    CircuitBreakerMiddleware for crate::circuit_breaker::Breaker
}

spec_middleware! {
    /// A concurrency limit spec as middleware: a place per request, held
    /// until its response (or error) comes.
    ConcurrencyLimitMiddleware for crate::concurrency::Limiter
}

spec_middleware! {
    /// A rate limiter spec as middleware: a permit per request.
    RateLimitMiddleware for crate::rate_limiter::RateLimiter
}

spec_middleware! {
    /// A timeout spec as middleware: a request that takes longer than the
    /// spec's `duration` ends with `Error::Timeout`.
    TimeoutMiddleware for crate::timeout::Timeout
}

#[async_trait::async_trait]
impl<S> Middleware for RetryMiddleware<S>
where
    S: RetrySpec,
    S::Classifier: Classify<Response, MwError>,
    MwError: Exhaustion<S::Exhausted>,
{
    async fn handle(
        &self,
        req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let ops = crate::retry::ops::<S, Response, MwError>()
            .judged_by(LayerJudge::<S::Classifier>::new());
        let key = const { &Key::of::<S>() };
        let mut call = RetryCall::start(ops, crate::registry::lookup(key));
        if let Some(refused) = call.refused() {
            return Err(refused.into_error(From::from));
        }
        if !call.may_retry() {
            // Sent once, as it is: nothing would send it again.
            let out = next.run(req, extensions).await;
            return match call.step(out.map_err(Fail::Body)) {
                Step::Done(out) => out.map_err(|f| f.into_error(From::from)),
                Step::Wait(_) => Err(MwError::middleware(NotRetryable { spec: S::NAME })),
            };
        }
        loop {
            let Some(mut attempt) = req.try_clone() else {
                call.ended_now(Outcome::Rejected);
                return Err(MwError::middleware(NotRetryable { spec: S::NAME }));
            };
            attempt_header(&call, &mut attempt);
            let out = InAttempt::new(call.attempt(), next.clone().run(attempt, extensions)).await;
            let wait = match call.step(out.map_err(Fail::Body)) {
                Step::Done(out) => return out.map_err(|f| f.into_error(From::from)),
                Step::Wait(wait) => wait,
            };
            wait.wait().await;
        }
    }
}

#[async_trait::async_trait]
impl<S> Middleware for CircuitBreakerMiddleware<S>
where
    S: CircuitBreakerSpec,
    S::Classifier: Classify<Response, MwError>,
{
    async fn handle(
        &self,
        req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let call = unclassified::<S>();
        let parts = call.enter().map(|entered| entered.into_parts())?;
        let Some(breaker) = call.breaker() else {
            return next.run(req, extensions).await;
        };
        // Dropped with the request if it is cancelled: counted as neither.
        let permit = Permit::from_parts(breaker, parts);
        let out = next.run(req, extensions).await;
        // A retry inside that refused a request it could not send again
        // never asked the dependency.
        let verdict = if refused_unsent(&out) {
            Verdict::Ignore
        } else {
            super::breaker::verdict::<S, Response, MwError>(&out)
        };
        permit.judged(verdict, parts);
        out
    }
}

#[async_trait::async_trait]
impl<S: ConcurrencyLimitSpec> Middleware for ConcurrencyLimitMiddleware<S> {
    async fn handle(
        &self,
        req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let key = const { &Key::of::<S>() };
        let call = LimitCall::new(key, crate::registry::lookup(key));
        let mut held = match call.try_enter() {
            Enter::Ready(entered) => entered?,
            Enter::Wait(full) => call.wait(full).await?,
        };
        let out = next.run(req, extensions).await;
        held.exit(out.map_err(Fail::Body))
            .map_err(|f| f.into_error(From::from))
    }
}

#[async_trait::async_trait]
impl<S: RateLimiterSpec> Middleware for RateLimitMiddleware<S> {
    async fn handle(
        &self,
        req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let key = const { &Key::of::<S>() };
        let call = RateCall::new(key, crate::registry::lookup(key));
        let mut granted = match call.try_enter() {
            Enter::Ready(entered) => entered?,
            Enter::Wait(reserved) => call.wait(reserved).await?,
        };
        let out = next.run(req, extensions).await;
        granted
            .exit(out.map_err(Fail::Body))
            .map_err(|f| f.into_error(From::from))
    }
}

#[async_trait::async_trait]
impl<S: TimeoutSpec> Middleware for TimeoutMiddleware<S> {
    async fn handle(
        &self,
        req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let key = const { &Key::of::<S>() };
        let call = TimeoutCall::new(key, crate::registry::lookup(key));
        crate::timeout::run(call, move || async move {
            next.run(req, extensions).await.map_err(Fail::Body)
        })
        .await
        .map_err(|f| f.into_error(From::from))
    }
}

/// Sets the retry's attempt header on `request`, when `call`'s next call is
/// a retry and its spec has an `attempt_header` (replacing one the request
/// already carries: each retry says its own number).
fn attempt_header<T, E, Tr, J>(call: &RetryCall<'_, T, E, Tr, J>, request: &mut Request) {
    let Some((name, previous)) = call.attempt_header() else {
        return;
    };
    // Validated when the settings were read.
    if let Ok(name) = http::HeaderName::from_bytes(name.as_bytes()) {
        request
            .headers_mut()
            .insert(name, http::HeaderValue::from(previous));
    }
}
