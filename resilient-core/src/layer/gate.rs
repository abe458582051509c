//! The concurrency limit's, the rate limiter's and chaos's layers: a place
//! or a permit per request (or a chaos draw), taken in `call`; a place or a
//! permit is held until the response future ends or is dropped.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use pin_project_lite::pin_project;
use tower_service::Service;

use super::{spec_layer, Flight, LayerError};
use crate::chaos::{ChaosCall, ChaosSpec};
use crate::concurrency::{ConcurrencyLimitSpec, LimitCall};
use crate::error::Error;
#[cfg(feature = "http")]
use crate::gate::AnnouncedGate;
use crate::gate::{ChaosGate, Entry, Gate, LimitGate, Waiting};
use crate::outcome::Fail;
use crate::rate_limiter::{RateCall, RateLimiterSpec};
use crate::registry::Key;

spec_layer! {
    /// A concurrency limit spec as a tower layer: each request takes a place
    /// in `call` and holds it until its response future ends or is dropped.
    /// A full limit answers at once with [`Error::ConcurrencyLimitReached`],
    /// or (its `block` policy) waits inside the response future, up to
    /// `max_wait`. See [`crate::layer`].
    ConcurrencyLimitLayer => ConcurrencyLimitService
    where
        S: ConcurrencyLimitSpec,
        Svc: Clone,
}

#[cfg(feature = "http")]
spec_layer! {
    /// A concurrency limit spec as a tower layer that reads the spec's
    /// `retry_header` from each request: as [`ConcurrencyLimitLayer`] (made
    /// by its [`reading_retry_header`](ConcurrencyLimitLayer::reading_retry_header)),
    /// but a request that announces a retry is refused at once when the
    /// limit is full (or, with `retry_share`, when its share of the places
    /// is), and never waits. A spec without `retry_header` reads no
    /// header. See the guide's chapter on the concurrency limit.
    RetryHeaderLimitLayer => RetryHeaderLimitService
    where
        S: ConcurrencyLimitSpec,
        Svc: Clone,
        Req: RequestHeaders,
}

/// A request whose HTTP headers a layer reads (a concurrency limit's
/// `retry_header`): `http::Request<B>`; implement it for a request type of
/// yours that carries an [`http::HeaderMap`].
#[cfg(feature = "http")]
#[diagnostic::on_unimplemented(
    message = "`{Self}` has no HTTP headers for `reading_retry_header` to read",
    label = "a layer that reads `retry_header` serves requests with headers",
    note = "apply it to a service of `http::Request<B>` (an axum route, a hyper service), or implement `resilient_core::layer::RequestHeaders` for your request type"
)]
pub trait RequestHeaders {
    /// The request's headers.
    fn headers(&self) -> &http::HeaderMap;
}

#[cfg(feature = "http")]
impl<B> RequestHeaders for http::Request<B> {
    #[inline(always)]
    fn headers(&self) -> &http::HeaderMap {
        http::Request::headers(self)
    }
}

impl<S, Req> ConcurrencyLimitLayer<S, Req> {
    /// The same limit, reading the spec's `retry_header` from each request
    /// (an `http::Request`): a request that announces a retry is refused at
    /// once when the limit is full, and never waits; with `retry_share`,
    /// also once that share of the places is in use. Below a retry layer,
    /// each attempt the retry sends again is a retry here, whatever the
    /// request's header says. A spec without `retry_header` reads no
    /// header, and lets requests in as this layer does.
    ///
    /// ```
    /// use resilient_core::layer::Layered;
    /// use resilient_core::ConcurrencyLimitSpec;
    ///
    /// #[derive(ConcurrencyLimitSpec)]
    /// #[spec("resilient.concurrency.pets")]
    /// pub struct PetsLimit;
    ///
    /// // `retry_header = "x-retry-attempt"` in its section names the header.
    /// let layer = PetsLimit::layer::<http::Request<String>>().reading_retry_header();
    /// # let _ = layer;
    /// ```
    #[cfg(feature = "http")]
    pub const fn reading_retry_header(self) -> RetryHeaderLimitLayer<S, Req> {
        RetryHeaderLimitLayer::new()
    }
}

/// The response future of a [`RetryHeaderLimitService`].
#[cfg(feature = "http")]
pub type RetryHeaderLimitFuture<Svc, Req> = GateFuture<AnnouncedGate, Svc, Req>;

#[cfg(feature = "http")]
impl<S, Svc, Req> Service<Req> for RetryHeaderLimitService<S, Svc, Req>
where
    S: ConcurrencyLimitSpec,
    Svc: Service<Req> + Clone,
    Svc::Error: LayerError,
    Req: RequestHeaders,
{
    type Response = Svc::Response;
    type Error = Svc::Error;
    type Future = RetryHeaderLimitFuture<Svc, Req>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    #[inline]
    fn call(&mut self, req: Req) -> Self::Future {
        let key = const { &Key::of::<S>() };
        let call = LimitCall::new(key, crate::registry::lookup(key));
        let gate = AnnouncedGate::new(call, req.headers());
        enter(gate, &mut self.inner, req)
    }
}

spec_layer! {
    /// A rate limiter spec as a tower layer: each request takes a permit in
    /// `call`; with no permit free it answers at once with
    /// [`Error::RateLimitExceeded`], or waits inside the response future for
    /// one reserved within `max_wait`. See [`crate::layer`].
    RateLimitLayer => RateLimitService
    where
        S: RateLimiterSpec,
        Svc: Clone,
}

spec_layer! {
    /// A chaos spec as a tower layer: each request draws in `call` what the
    /// spec injects; a drawn latency is waited inside the response future
    /// before the inner service is called, and a drawn error answers with
    /// [`Error::Injected`] without calling it. Counted when drawn (an error
    /// drawn with a latency when delivered), so a response future dropped
    /// unpolled still counts its draw. A disabled spec lets every request
    /// through with one branch. See [`chaos`](mod@crate::chaos).
    ChaosLayer => ChaosService
    where
        S: ChaosSpec,
        Svc: Clone,
}

/// The response future of a [`ChaosService`].
pub type ChaosFuture<Svc, Req> = GateFuture<ChaosGate, Svc, Req>;

/// The response future of a [`ConcurrencyLimitService`].
pub type ConcurrencyLimitFuture<Svc, Req> = GateFuture<LimitGate, Svc, Req>;

/// The response future of a [`RateLimitService`].
pub type RateLimitFuture<Svc, Req> = GateFuture<RateCall, Svc, Req>;

/// `Service` for a gate layer's service: readiness is the inner
/// service's; `call` makes the spec's gate (`$gate`, from the spec's key
/// and the instance in use) and lets the request in through [`enter`].
macro_rules! gate_service {
    ($service:ident, $spec:ident, $future:ident, |$key:ident| $gate:expr) => {
        impl<S, Svc, Req> Service<Req> for $service<S, Svc, Req>
        where
            S: $spec,
            Svc: Service<Req> + Clone,
            Svc::Error: LayerError,
        {
            type Response = Svc::Response;
            type Error = Svc::Error;
            type Future = $future<Svc, Req>;

            #[inline]
            fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
                self.inner.poll_ready(cx)
            }

            #[inline]
            fn call(&mut self, req: Req) -> Self::Future {
                let $key = const { &Key::of::<S>() };
                enter($gate, &mut self.inner, req)
            }
        }
    };
}

gate_service!(ChaosService, ChaosSpec, ChaosFuture, |key| ChaosGate(
    ChaosCall::new(key, crate::registry::lookup(key))
));
gate_service!(
    ConcurrencyLimitService,
    ConcurrencyLimitSpec,
    ConcurrencyLimitFuture,
    |key| LimitGate(LimitCall::new(key, crate::registry::lookup(key)))
);
gate_service!(RateLimitService, RateLimiterSpec, RateLimitFuture, |key| {
    RateCall::new(key, crate::registry::lookup(key))
});

/// A request let in by `gate`: called now if let in at once; else the
/// ready service and the request wait in the future (a clone of the
/// service stays, to be made ready again), or the future answers the
/// rejection.
#[inline]
fn enter<C, Svc, Req>(call: C, svc: &mut Svc, req: Req) -> GateFuture<C, Svc, Req>
where
    C: Gate,
    Svc: Service<Req> + Clone,
{
    let entry = call.enter();
    let mut future = GateFuture {
        call,
        held: None,
        waiting: None,
        flight: Flight::Done,
    };
    future.flight = match entry {
        Entry::Ready(Ok(parts)) => {
            // Held by the future before the inner call runs: if that
            // panics, the future's drop frees it.
            future.held = Some(parts);
            Flight::Running {
                future: svc.call(req),
            }
        }
        Entry::Ready(Err(e)) => Flight::Refused { error: Some(e) },
        Entry::Wait(wait) => {
            let clone = svc.clone();
            future.waiting = Some(waiter(wait, std::mem::replace(svc, clone), req));
            Flight::Done
        }
    };
    future
}

/// A request that waits for a place or a permit, with the ready service
/// that will take it: boxed, so that only a request that waits pays for
/// it, and the response future of one that does not stays small. Shared
/// by the gate layers and a stack's gate parts.
pub(super) struct Waiter<P, Svc, Req> {
    pub(super) wait: Waiting<P>,
    pub(super) svc: Svc,
    pub(super) req: Req,
    // The retry attempt the request was admitted in, if one marked it:
    // what runs inside starts in it once the wait ends (the attempt
    // header, `current_attempt`, a limit's count of retries).
    pub(super) attempt: Option<crate::retry::Attempt>,
}

/// A request that waits at a gate, with the attempt it was admitted in:
/// out of line, as only a request that waits makes one.
#[cold]
#[inline(never)]
pub(super) fn waiter<P, Svc, Req>(
    wait: Waiting<P>,
    svc: Svc,
    req: Req,
) -> Box<Waiter<P, Svc, Req>> {
    Box::new(Waiter {
        wait,
        svc,
        req,
        attempt: crate::retry::marked(),
    })
}

pin_project! {
    /// The response future of a [`ConcurrencyLimitService`], a
    /// [`RateLimitService`] or a [`ChaosService`]: a place or a permit is
    /// held until it ends or is dropped (a chaos draw holds nothing).
    pub struct GateFuture<C, Svc, Req>
    where
        C: Gate,
        Svc: Service<Req>,
    {
        call: C,
        held: Option<C::Parts>,
        waiting: Option<Box<Waiter<C::Parts, Svc, Req>>>,
        #[pin]
        flight: Flight<Svc::Future>,
    }

    impl<C, Svc, Req> PinnedDrop for GateFuture<C, Svc, Req>
    where
        C: Gate,
        Svc: Service<Req>,
    {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            // The inner future first, as an async fn's body goes before its
            // place; then the wait: a place it took is freed with it.
            this.flight.end();
            *this.waiting = None;
            if let Some(parts) = this.held.take() {
                this.call.finish(parts, None);
            }
        }
    }
}

impl<C, Svc, Req, T, E> Future for GateFuture<C, Svc, Req>
where
    C: Gate,
    Svc: Service<Req, Response = T, Error = E>,
    E: From<Error>,
{
    type Output = Result<T, E>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if let Some(waiter) = this.waiting.as_mut() {
            let entered = ready!(waiter.wait.as_mut().poll(cx));
            let Some(Waiter {
                mut svc,
                req,
                attempt,
                ..
            }) = this.waiting.take().map(|w| *w)
            else {
                return Poll::Pending;
            };
            match entered {
                Ok(parts) => *this.held = Some(parts),
                Err(e) => return Poll::Ready(Err(E::from(e))),
            }
            // Called in the attempt it was admitted in, as it would have
            // been without the wait.
            let future = crate::retry::call_in_if(attempt, || svc.call(req));
            this.flight.set(Flight::Running { future });
        }
        let out = match ready!(this.flight.poll_flight(cx)) {
            Ok(out) => out,
            Err(refused) => return Poll::Ready(Err(E::from(refused))),
        };
        if let Some(parts) = this.held.take() {
            let outcome = match &out {
                Ok(_) => Ok(()),
                Err(_) => Err(Fail::Body(())),
            };
            this.call.finish(parts, Some(outcome));
        }
        Poll::Ready(out)
    }
}
