//! Specs as reqwest-middleware middleware (feature `reqwest-middleware`).
//!
//! Many clients add retries to reqwest through
//! [reqwest-middleware](https://docs.rs/reqwest-middleware), which is not
//! tower: a `ClientWithMiddleware` runs a chain of [`Middleware`](reqwest_middleware::Middleware)s around
//! each request. Every retry, circuit breaker, concurrency limit, rate
//! limiter, timeout and chaos spec is one too, through [`Middlewares::middleware`],
//! running each request through the spec's one shared instance (the one its
//! attributes and layers use), in the order attached (first = outermost).
//! Each is the [`StackLayer`] of that one spec, so a spec admits, counts
//! and refuses alike alone and in a stack; a stack of several specs in one
//! middleware runs them as one future:
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
//!
//! What a middleware covers is the request up to its response's head, as
//! reqwest-middleware's chain gives it: the response body is read after
//! the middleware are done (`response.json().await` in the caller). So a
//! timeout does not bound the body's read, a limit's place is free again
//! before it, and an error while reading it is neither retried nor counted
//! by a breaker. An annotated fn that sends the request and reads the
//! body covers both: put the specs that must see the body there.

use reqwest::Request;

use super::stack::{
    BreakerLevel, ChaosLevel, End, LimitLevel, RateLevel, RetryLevel, StackLayer, Then,
    TimeoutLevel,
};
use super::LayerError;
use crate::error::Error;
use crate::registry::Spec;

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
/// circuit breaker, concurrency limit, rate limiter, timeout and chaos
/// spec.
#[diagnostic::on_unimplemented(
    message = "`{Self}` has no middleware",
    label = "retry, circuit breaker, concurrency limit, rate limiter, timeout and chaos specs are middleware",
    note = "a hedging spec's attempts run side by side, each with its own copy of the request: put `#[hedged({Self})]` on the fn that sends the request"
)]
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

macro_rules! spec_middleware {
    ($(#[$doc:meta])* $name:ident = $level:ident for $mechanism:ty) => {
        $(#[$doc])*
        ///
        /// It is the stack of this one spec as middleware
        /// ([`StackLayer`](super::StackLayer)), so that a spec admits,
        /// counts and refuses alike alone or in a stack.
        pub type $name<S> = StackLayer<Then<$level<S>, End>, Request>;

        impl HasMiddleware for $mechanism {
            type Middleware<S: Spec> = $name<S>;
        }
    };
}

spec_middleware! {
    /// A retry spec as middleware: see the [module docs](self).
    RetryMiddleware = RetryLevel for crate::retry::Retry
}

spec_middleware! {
    /// A circuit breaker spec as middleware: a permit per request.
    CircuitBreakerMiddleware = BreakerLevel for crate::circuit_breaker::Breaker
}

spec_middleware! {
    /// A concurrency limit spec as middleware: a place per request, held
    /// until its response (or error) comes.
    ConcurrencyLimitMiddleware = LimitLevel for crate::concurrency::Limiter
}

spec_middleware! {
    /// A rate limiter spec as middleware: a permit per request.
    RateLimitMiddleware = RateLevel for crate::rate_limiter::RateLimiter
}

spec_middleware! {
    /// A timeout spec as middleware: a request whose response head takes
    /// longer than the spec's `duration` ends with `Error::Timeout` (the
    /// body, read after, is not timed: see the [module docs](self)).
    TimeoutMiddleware = TimeoutLevel for crate::timeout::Timeout
}

spec_middleware! {
    /// A chaos spec as middleware: each request draws as the spec says (an
    /// injected error instead of sending it, a latency before it, an
    /// outcome after it).
    ChaosMiddleware = ChaosLevel for crate::chaos::Chaos
}
