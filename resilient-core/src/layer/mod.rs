//! Specs as [tower] layers (feature `tower`).
//!
//! Every retry, circuit breaker, concurrency limit, rate limiter, timeout
//! and chaos spec is also a [`tower_layer::Layer`]: [`Layered::layer`] gives it, and
//! the service it makes runs each request through the spec's one shared
//! instance, the same one its attributes and handles use. A route's layer
//! and an annotated fn of one spec share one breaker, one budget, one
//! limit, and one reload.
//!
//! ```
//! use resilient_core::layer::Layered;
//! use resilient_core::{BoxError, CircuitBreakerSpec, ConcurrencyLimitSpec, TimeoutSpec};
//! use tower::{service_fn, ServiceBuilder, ServiceExt};
//!
//! #[derive(CircuitBreakerSpec)]
//! #[spec("resilient.circuitbreaker.pet")]
//! pub struct PetBreaker;
//!
//! #[derive(ConcurrencyLimitSpec)]
//! #[spec("resilient.concurrency.pet")]
//! pub struct PetLimit;
//!
//! #[derive(TimeoutSpec)]
//! #[spec("resilient.timeout.pet")]
//! pub struct PetTimeout;
//!
//! # async fn demo() -> Result<(), BoxError> {
//! // Outermost first, as attributes are written.
//! let pets = ServiceBuilder::new()
//!     .layer(PetBreaker::layer())
//!     .layer(PetLimit::layer())
//!     .layer(PetTimeout::layer())
//!     .service(service_fn(|id: u64| async move { Ok::<_, BoxError>(format!("pet {id}")) }));
//! let pet = pets.oneshot(7).await?;
//! # let _ = pet; Ok(()) }
//! ```
//!
//! # What each layer does
//!
//! | layer | per request | needs |
//! |---|---|---|
//! | retry | calls the inner service again after a failure the spec retries, after its wait, within `attempts`; each retry waits for the inner service's `poll_ready` first | a request that is `Clone` (kept for the retries, cloned per attempt) and a service that is `Clone` (one clone per request) |
//! | circuit breaker | takes a permit in `call` (an open breaker answers at once), counts the response as the spec classifies it | |
//! | concurrency limit | takes a place in `call`, holds it until the response future ends or is dropped; a full limit rejects at once, or waits inside the response future up to `max_wait` (its `block` policy); applied with `reading_retry_header()`, a request that announces a retry in the spec's `retry_header` is refused at once instead | a service that is `Clone`: a request that waits takes the ready service with it |
//! | rate limiter | takes a permit in `call`; one reserved within `max_wait` is waited for inside the response future | a service that is `Clone`, as above |
//! | timeout | bounds the response future; the timer starts when it first waits | |
//! | chaos | draws in `call` what the spec injects: a latency is waited inside the response future before the inner service is called, an error ([`Error::Injected`]) answers without calling it | a service that is `Clone`, as above |
//!
//! A hedging spec is not a layer: its attempts run side by side, each with
//! a copy of the request and of the service. Use `#[hedged]` on the fn that
//! sends the request, or tower's own `hedge` middleware; `PetHedging::layer()`
//! is a compile error that says so.
//!
//! A layer's type names the request type of the service it layers
//! (`CircuitBreakerLayer<PetBreaker, Req>`), inferred where it is applied,
//! so that everything the layered service needs is checked there: an inner
//! service that does not fit (an error type that cannot carry a rejection,
//! a request a retry cannot copy) is a compile error at
//! `ServiceBuilder::service` or axum's `layer`/`route_layer`, the line that
//! applies the layer, rather than at the first method called on the
//! layered service. A layered service serves that one request type, and a
//! layer kept apart from the service it wraps (a fn that returns it, a
//! struct field) names it: `PetBreaker::layer::<http::Request<Body>>()`.
//!
//! `poll_ready` is the inner service's, and no layer waits there: a place or
//! a permit is taken in `call`, so an axum router (always ready) and a
//! `tower::buffer::Buffer` (whose worker calls `poll_ready` long before
//! `call`) see the same limit, and a caller that reserves readiness and then
//! drops it holds nothing. tower's own `ConcurrencyLimit` waits in
//! `poll_ready`, without bound.
//!
//! # Errors
//!
//! A layer's service has its inner service's error type, which implements
//! [`LayerError`]: it takes a [`resilient_core::Error`](crate::Error)
//! through `From`, as an annotated fn's error does, and shows the one it
//! carries. [`BoxError`] does (tower's convention: find the rejection with
//! `error.downcast_ref::<Error>()`); an error type of yours implements it
//! in four lines (see [`LayerError`]). A service with another error
//! (`hyper::Error`, `std::io::Error`) is refused where the layer is applied,
//! with a message that says so; map its errors first, as the last layer:
//! `ServiceBuilder::new().layer(PetBreaker::layer()).map_err(BoxError::from)`.
//!
//! On an HTTP server, [`RespondLayer`] (with the `http` feature) answers
//! the layers' rejections as responses instead (429 with `Retry-After`,
//! 503, 504), so that a service whose error is `Infallible` (an axum route)
//! keeps it; with the `axum` feature, [`Error`] is an
//! `IntoResponse` for handlers whose error wraps one.
//!
//! A failure is what the spec's classification says of the response and
//! the error (with `classify = http`, a 503 response is one), except for a
//! resilience error raised by a layer inside (the one
//! [`LayerError::resilience`] shows): a breaker ignores another mechanism's
//! rejection and counts a timeout, a retry retries a timeout, waits out a
//! rate limiter's `retry_after` and passes an open breaker's rejection on,
//! as they do in an attribute chain.
//!
//! # Requests that are dropped, and services that fail
//!
//! A response future dropped at any point, before its first poll included,
//! gives back what its request took (a place, a permit, a reserved permit,
//! a budget token for a retry not yet started) and counts it as cancelled.
//! A retry makes its service ready before each retry; a service whose
//! `poll_ready` fails is done (tower's contract), so the retry ends with
//! that error and does not retry. The retry's overall `timeout` is checked
//! when a retry is scheduled, as for an annotated fn: the wait for the
//! service's readiness after the delay is the service's, bounded by a
//! timeout layer outside the retry if it must be.
//!
//! The instance is looked up in `call`, in the registry in use there, as an
//! annotated fn looks it up when called; the layers inside a retry (or a
//! limit's wait) are called again when the response future is polled, and
//! look theirs up there.
//!
//! [tower]: https://docs.rs/tower

#[cfg(feature = "http")]
mod attempt_header;
mod breaker;
mod gate;
#[cfg(feature = "reqwest-middleware")]
pub mod middleware;
#[cfg(feature = "http")]
mod respond;
mod retry;
mod stack;
#[cfg(feature = "reqwest-middleware")]
mod stack_middleware;
mod timeout;

use std::future::Future;

#[cfg(feature = "http")]
pub use attempt_header::{AttemptHeader, AttemptHeaderLayer};
pub use breaker::{CircuitBreakerFuture, CircuitBreakerLayer, CircuitBreakerService};
pub use gate::{
    ChaosFuture, ChaosLayer, ChaosService, ConcurrencyLimitFuture, ConcurrencyLimitLayer,
    ConcurrencyLimitService, GateFuture, RateLimitFuture, RateLimitLayer, RateLimitService,
};
#[cfg(feature = "http")]
pub use gate::{
    RequestHeaders, RetryHeaderLimitFuture, RetryHeaderLimitLayer, RetryHeaderLimitService,
};
#[cfg(feature = "grpc")]
pub use respond::GrpcAnswers;
#[cfg(feature = "http")]
pub use respond::{
    Answers, BoxErrors, BoxErrorsFuture, HttpAnswers, Respond, RespondFuture, RespondLayer,
};
pub use retry::{RetryFuture, RetryLayer, RetryService};
#[cfg(feature = "http")]
pub use stack::RetryHeaderLimitLevel;
#[doc(hidden)]
pub use stack::{
    Apart, Append, Chain, HasKeyedLevel, HasLevel, InPlace, Inner, InnerCall, KeyOf, MakeGate,
    Part, Resend, Running, Slot,
};
pub use stack::{
    BreakerLevel, ByKey, ChaosLevel, End, KeyedStackSpec, LimitLevel, RateLevel, RetryLevel,
    StackFuture, StackLayer, StackOut, StackService, StackSpec, Then, TimeoutLevel, Unkeyed,
};
pub use timeout::{TimeoutFuture, TimeoutLayer, TimeoutService};

use crate::error::{BoxError, Error};
use crate::registry::Spec;

/// A spec as a tower layer: implemented for every retry, circuit breaker,
/// concurrency limit, rate limiter, timeout and chaos spec (a hedging
/// spec's `layer()` is a compile error that says what to use instead).
///
/// ```
/// use resilient_core::layer::Layered;
/// use resilient_core::{BoxError, RateLimiterSpec};
/// use tower::{service_fn, ServiceBuilder};
///
/// #[derive(RateLimiterSpec)]
/// #[spec("resilient.ratelimiter.search")]
/// pub struct SearchRate;
///
/// // The request type is inferred from the service the layer wraps.
/// let search = ServiceBuilder::new()
///     .layer(SearchRate::layer())
///     .service(service_fn(|query: String| async move { Ok::<_, BoxError>(query) }));
///
/// // A layer kept apart from that service (a fn's result, a field) names it.
/// let layer = SearchRate::layer::<http::Request<String>>();
/// # let _ = (search, layer);
/// ```
pub trait Layered: Spec {
    /// The spec's layer type, for services of requests `Req`.
    type Layer<Req>: Default + Clone + Copy;

    /// The spec's layer, for `ServiceBuilder::layer` or axum's `layer` and
    /// `route_layer`; the request type is inferred from the service it is
    /// applied to, in the same fn (`layer::<Req>()` names it otherwise).
    /// Free to make and to copy: the state is the spec's instance, found
    /// per request.
    fn layer<Req>() -> Self::Layer<Req> {
        Self::Layer::default()
    }
}

impl<S: LayerSpec> Layered for S {
    type Layer<Req> = <S as LayerSpec>::Layer<Req>;
}

/// A spec with a layer. Not a public API.
///
/// It stands between [`Layered`] and [`HasLayer`] for its message: in
/// `PetHedging::layer()`, rustc makes the message of an unmet bound on the
/// spec's own type (this one) the error itself, where a bound on the
/// mechanism (`HasLayer`) would leave a list of unmet bounds naming
/// hidden types.
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "`{Self}` has no tower layer",
    label = "`layer()` is there for retry, circuit breaker, concurrency limit, rate limiter, timeout and chaos specs",
    note = "a hedging spec's attempts run side by side, each with its own copy of the request and of the service, which a layer cannot give them: put `#[hedged({Self})]` on the fn that sends the request, or use tower's own `hedge` middleware"
)]
pub trait LayerSpec: Spec {
    /// The spec's layer type, for services of requests `Req`.
    type Layer<Req>: Default + Clone + Copy;
}

impl<S: Spec> LayerSpec for S
where
    S::Mechanism: HasLayer,
{
    type Layer<Req> = <S::Mechanism as HasLayer>::Layer<S, Req>;
}

/// A mechanism with a layer. Not a public API.
#[doc(hidden)]
pub trait HasLayer {
    /// The layer of a spec `S` of this mechanism, for requests `Req`.
    type Layer<S: 'static, Req>: Default + Clone + Copy;
}

impl HasLayer for crate::circuit_breaker::Breaker {
    type Layer<S: 'static, Req> = CircuitBreakerLayer<S, Req>;
}

impl HasLayer for crate::concurrency::Limiter {
    type Layer<S: 'static, Req> = ConcurrencyLimitLayer<S, Req>;
}

impl HasLayer for crate::rate_limiter::RateLimiter {
    type Layer<S: 'static, Req> = RateLimitLayer<S, Req>;
}

impl HasLayer for crate::timeout::Timeout {
    type Layer<S: 'static, Req> = TimeoutLayer<S, Req>;
}

impl HasLayer for crate::chaos::Chaos {
    type Layer<S: 'static, Req> = ChaosLayer<S, Req>;
}

impl HasLayer for crate::retry::Retry {
    type Layer<S: 'static, Req> = RetryLayer<S, Req>;
}

/// The error of a service under this crate's layers: it takes a
/// resilience [`Error`] (a layer's rejection), and shows the one it
/// carries, so that a layer outside tells a rejection by a layer inside
/// from the service's own failure, as an attribute chain does (a breaker
/// ignores a limit's rejection; a retry passes an open breaker's on).
/// Implemented for [`Error`] and [`BoxError`]; for an error type of yours:
///
/// ```
/// use resilient_core::layer::LayerError;
///
/// #[derive(Debug, thiserror::Error)]
/// pub enum ApiError {
///     #[error("the store answered {0}")]
///     Store(u16),
///     #[error(transparent)]
///     Resilience(#[from] resilient_core::Error),
/// }
///
/// impl LayerError for ApiError {
///     fn resilience(&self) -> Option<&resilient_core::Error> {
///         match self {
///             ApiError::Resilience(e) => Some(e),
///             _ => None,
///         }
///     }
/// }
/// # let _ = ApiError::Store(503);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an error a resilient layer can answer with",
    label = "this service's error type must implement `resilient_core::layer::LayerError`",
    note = "a layer answers a request it refuses through the service's own error type, so that type must take a `resilient_core::Error` (through `From`) and show the one it carries",
    note = "`resilient_core::BoxError` does: map the service's errors to it with `.map_err(BoxError::from)` as the last layer, right above `.service(..)`; an error type of your own does once it implements `LayerError` (see its docs)",
    note = "on an axum route (whose error is `Infallible`), wrap the layers in `resilient_core::layer::RespondLayer`: it answers their rejections as responses (429, 503, 504)"
)]
pub trait LayerError: From<Error> + 'static {
    /// The resilience error this error carries, if it is one.
    fn resilience(&self) -> Option<&Error>;
}

impl LayerError for Error {
    #[inline]
    fn resilience(&self) -> Option<&Error> {
        Some(self)
    }
}

impl LayerError for BoxError {
    #[inline]
    fn resilience(&self) -> Option<&Error> {
        self.downcast_ref::<Error>()
    }
}

/// A layer's type: zero-sized, `Copy`, one per spec and request type;
/// what the services it makes need is the spec's instance, found per
/// request.
///
/// The request type is the layer's so that `Layer::layer` can require
/// everything the layered service's `Service` impl needs (after `where`:
/// the needs of one mechanism, beside the error every layer needs): an
/// inner service whose error cannot carry a rejection is refused where the
/// layer is applied (`ServiceBuilder::service`, axum's `route_layer`), with
/// [`LayerError`]'s message, instead of at the first method called on the
/// layered service (`oneshot`, `ready`), where rustc can only say that the
/// layered service is no `Service`.
macro_rules! spec_layer {
    ($(#[$doc:meta])* $layer:ident => $service:ident $(where $($bound:tt)+)?) => {
        $(#[$doc])*
        ///
        /// `Req` is the request type of the services it layers, inferred
        /// where the layer is applied.
        pub struct $layer<S, Req> {
            _spec: std::marker::PhantomData<fn() -> S>,
            _request: std::marker::PhantomData<fn(Req)>,
        }

        impl<S, Req> $layer<S, Req> {
            /// The layer of spec `S` (also `S::layer()`, see
            /// [`Layered`](crate::layer::Layered)).
            pub const fn new() -> Self {
                Self {
                    _spec: std::marker::PhantomData,
                    _request: std::marker::PhantomData,
                }
            }
        }

        impl<S, Req> Default for $layer<S, Req> {
            fn default() -> Self {
                Self::new()
            }
        }

        impl<S, Req> Clone for $layer<S, Req> {
            fn clone(&self) -> Self {
                *self
            }
        }

        impl<S, Req> Copy for $layer<S, Req> {}

        impl<S, Req> std::fmt::Debug for $layer<S, Req> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_tuple(stringify!($layer))
                    .field(&std::any::type_name::<S>())
                    .finish()
            }
        }

        impl<S, Req, Svc> tower_layer::Layer<Svc> for $layer<S, Req>
        where
            Svc: tower_service::Service<Req>,
            Svc::Error: $crate::layer::LayerError,
            $($($bound)+)?
        {
            type Service = $service<S, Svc, Req>;

            fn layer(&self, inner: Svc) -> Self::Service {
                $service::new(inner)
            }
        }

        /// The service a layer of spec `S` makes around `Svc`, for requests
        /// `Req`.
        pub struct $service<S, Svc, Req> {
            inner: Svc,
            _spec: std::marker::PhantomData<fn() -> S>,
            _request: std::marker::PhantomData<fn(Req)>,
        }

        impl<S, Svc, Req> $service<S, Svc, Req> {
            /// `inner` under spec `S`.
            pub const fn new(inner: Svc) -> Self {
                Self {
                    inner,
                    _spec: std::marker::PhantomData,
                    _request: std::marker::PhantomData,
                }
            }

            /// The inner service.
            pub fn get_ref(&self) -> &Svc {
                &self.inner
            }

            /// The inner service, mutably.
            pub fn get_mut(&mut self) -> &mut Svc {
                &mut self.inner
            }

            /// The inner service, taken out.
            pub fn into_inner(self) -> Svc {
                self.inner
            }
        }

        impl<S, Svc: Clone, Req> Clone for $service<S, Svc, Req> {
            fn clone(&self) -> Self {
                Self::new(self.inner.clone())
            }
        }

        impl<S, Svc: std::fmt::Debug, Req> std::fmt::Debug for $service<S, Svc, Req> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($service))
                    .field("spec", &std::any::type_name::<S>())
                    .field("inner", &self.inner)
                    .finish()
            }
        }
    };
}

pub(crate) use spec_layer;

pin_project_lite::pin_project! {
    /// A layer's request: its inner future while it runs, or the refusal
    /// the layer answers it with. One of the two at a time, so a response
    /// future is as large as the larger of them, not their sum (each layer
    /// moves the futures of the layers inside it).
    #[project = FlightProj]
    enum Flight<F> {
        Running {
            #[pin]
            future: F,
        },
        Refused {
            error: Option<Error>,
        },
        Done,
    }
}

impl<F> Flight<F> {
    /// Drops the inner future, if it runs.
    #[inline]
    fn end(mut self: std::pin::Pin<&mut Self>) {
        self.set(Flight::Done);
    }
}

impl<F: Future> Flight<F> {
    /// The inner future's output (the flight then done), or the refusal;
    /// pending after either, like a fused future.
    #[inline]
    fn poll_flight(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<F::Output, Error>> {
        use std::task::Poll;
        let done = match self.as_mut().project() {
            FlightProj::Running { future } => Ok(std::task::ready!(future.poll(cx))),
            FlightProj::Refused { error } => match error.take() {
                Some(error) => Err(error),
                None => return Poll::Pending,
            },
            FlightProj::Done => return Poll::Pending,
        };
        self.set(Flight::Done);
        Poll::Ready(done)
    }
}
