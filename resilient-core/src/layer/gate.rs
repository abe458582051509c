//! The concurrency limit's and the rate limiter's layers: a place or a
//! permit per request, taken in `call` and held until the response future
//! ends or is dropped.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use pin_project_lite::pin_project;
use tower_service::Service;

use super::spec_layer;
use crate::concurrency::{ConcurrencyLimitSpec, LimitCall};
use crate::error::Error;
use crate::gate::{Entry, Gate, LimitGate, Waiting};
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
}

spec_layer! {
    /// A rate limiter spec as a tower layer: each request takes a permit in
    /// `call`; with no permit free it answers at once with
    /// [`Error::RateLimitExceeded`], or waits inside the response future for
    /// one reserved within `max_wait`. See [`crate::layer`].
    RateLimitLayer => RateLimitService
}

/// The response future of a [`ConcurrencyLimitService`].
pub type ConcurrencyLimitFuture<Svc, Req> = GateFuture<LimitGate, Svc, Req>;

/// The response future of a [`RateLimitService`].
pub type RateLimitFuture<Svc, Req> = GateFuture<RateCall, Svc, Req>;

impl<S, Svc, Req> Service<Req> for ConcurrencyLimitService<S, Svc>
where
    S: ConcurrencyLimitSpec,
    Svc: Service<Req> + Clone,
    Svc::Error: From<Error>,
{
    type Response = Svc::Response;
    type Error = Svc::Error;
    type Future = ConcurrencyLimitFuture<Svc, Req>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    #[inline]
    fn call(&mut self, req: Req) -> Self::Future {
        let key = const { &Key::of::<S>() };
        enter(
            LimitGate(LimitCall::new(key, crate::registry::lookup(key))),
            &mut self.inner,
            req,
        )
    }
}

impl<S, Svc, Req> Service<Req> for RateLimitService<S, Svc>
where
    S: RateLimiterSpec,
    Svc: Service<Req> + Clone,
    Svc::Error: From<Error>,
{
    type Response = Svc::Response;
    type Error = Svc::Error;
    type Future = RateLimitFuture<Svc, Req>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    #[inline]
    fn call(&mut self, req: Req) -> Self::Future {
        let key = const { &Key::of::<S>() };
        enter(
            RateCall::new(key, crate::registry::lookup(key)),
            &mut self.inner,
            req,
        )
    }
}

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
        pending: None,
        rejected: None,
        inner: None,
    };
    match entry {
        Entry::Ready(Ok(parts)) => {
            // Held by the future before the inner call runs: if that
            // panics, the future's drop frees it.
            future.held = Some(parts);
            future.inner = Some(svc.call(req));
        }
        Entry::Ready(Err(e)) => future.rejected = Some(e),
        Entry::Wait(waiting) => {
            let clone = svc.clone();
            future.pending = Some((std::mem::replace(svc, clone), req));
            future.waiting = Some(waiting);
        }
    }
    future
}

pin_project! {
    /// The response future of a [`ConcurrencyLimitService`] or a
    /// [`RateLimitService`]: the place or permit is held until it ends or
    /// is dropped.
    pub struct GateFuture<C, Svc, Req>
    where
        C: Gate,
        Svc: Service<Req>,
    {
        call: C,
        held: Option<C::Parts>,
        // The wait for a place or a permit (boxed: only a request that
        // waits pays for it), with the ready service and the request.
        waiting: Option<Waiting<C::Parts>>,
        pending: Option<(Svc, Req)>,
        rejected: Option<Error>,
        #[pin]
        inner: Option<Svc::Future>,
    }

    impl<C, Svc, Req> PinnedDrop for GateFuture<C, Svc, Req>
    where
        C: Gate,
        Svc: Service<Req>,
    {
        fn drop(this: Pin<&mut Self>) {
            let mut this = this.project();
            // The inner future first, as an async fn's body goes before its
            // place; then the wait: a place it took is freed with it.
            this.inner.set(None);
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
        if let Some(waiting) = this.waiting.as_mut() {
            let entered = ready!(waiting.as_mut().poll(cx));
            *this.waiting = None;
            match entered {
                Ok(parts) => *this.held = Some(parts),
                Err(e) => {
                    *this.pending = None;
                    return Poll::Ready(Err(E::from(e)));
                }
            }
            if let Some((mut svc, req)) = this.pending.take() {
                this.inner.set(Some(svc.call(req)));
            }
        }
        let Some(inner) = this.inner.as_mut().as_pin_mut() else {
            return match this.rejected.take() {
                Some(e) => Poll::Ready(Err(E::from(e))),
                None => Poll::Pending,
            };
        };
        let out = ready!(inner.poll(cx));
        this.inner.set(None);
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
