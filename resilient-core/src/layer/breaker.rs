//! The circuit breaker's layer: a permit per request, taken in `call`.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use pin_project_lite::pin_project;
use tower_service::Service;

use super::{inside, spec_layer};
use crate::circuit_breaker::{
    on_resilience_error, unclassified, BreakerCall, CircuitBreakerSpec, Permit, PermitParts,
};
use crate::error::Error;
use crate::spec::{Classify, Verdict};

spec_layer! {
    /// A circuit breaker spec as a tower layer: each request takes a permit
    /// in `call` (an open breaker answers at once with
    /// [`Error::CallNotPermitted`]), and its response counts as the spec
    /// classifies it. See [`crate::layer`].
    CircuitBreakerLayer => CircuitBreakerService
}

impl<S, Svc, Req> Service<Req> for CircuitBreakerService<S, Svc>
where
    S: CircuitBreakerSpec,
    Svc: Service<Req>,
    Svc::Error: From<Error> + 'static,
    S::Classifier: Classify<Svc::Response, Svc::Error>,
{
    type Response = Svc::Response;
    type Error = Svc::Error;
    type Future = CircuitBreakerFuture<S, Svc::Future>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    #[inline]
    fn call(&mut self, req: Req) -> Self::Future {
        let mut future = CircuitBreakerFuture {
            call: unclassified::<S>(),
            permit: None,
            rejected: None,
            inner: None,
            _spec: PhantomData,
        };
        let entered = future.call.enter().map(|entered| entered.into_parts());
        match entered {
            Ok(parts) => future.permit = Some(parts),
            Err(e) => {
                future.rejected = Some(e);
                return future;
            }
        }
        // The permit is the future's before the inner call runs: if that
        // panics, the future's drop gives the permit back.
        future.inner = Some(self.inner.call(req));
        future
    }
}

pin_project! {
    /// The response future of a [`CircuitBreakerService`].
    pub struct CircuitBreakerFuture<S, F> {
        call: BreakerCall<'static, ()>,
        // The permit, while the response is not counted.
        permit: Option<PermitParts>,
        rejected: Option<Error>,
        #[pin]
        inner: Option<F>,
        _spec: PhantomData<fn() -> S>,
    }

    impl<S, F> PinnedDrop for CircuitBreakerFuture<S, F> {
        fn drop(this: Pin<&mut Self>) {
            let mut this = this.project();
            // The inner future first, as an async fn's body goes before its
            // guards; then the permit, counted as cancelled.
            this.inner.set(None);
            if let (Some(parts), Some(breaker)) = (this.permit.take(), this.call.breaker()) {
                drop(Permit::from_parts(breaker, parts));
            }
        }
    }
}

impl<S, F, T, E> Future for CircuitBreakerFuture<S, F>
where
    S: CircuitBreakerSpec,
    F: Future<Output = Result<T, E>>,
    E: From<Error> + 'static,
    S::Classifier: Classify<T, E>,
{
    type Output = Result<T, E>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let Some(inner) = this.inner.as_mut().as_pin_mut() else {
            // Rejected; or polled again after its output, like a fused
            // future.
            return match this.rejected.take() {
                Some(e) => Poll::Ready(Err(E::from(e))),
                None => Poll::Pending,
            };
        };
        let out = ready!(inner.poll(cx));
        this.inner.set(None);
        if let (Some(parts), Some(breaker)) = (this.permit.take(), this.call.breaker()) {
            Permit::from_parts(breaker, parts).judged(verdict::<S, T, E>(&out), parts);
        }
        Poll::Ready(out)
    }
}

/// How the breaker of `S` counts a response: a resilience error of a layer
/// inside as in an attribute chain, anything else as the spec classifies.
#[inline]
fn verdict<S, T, E: 'static>(out: &Result<T, E>) -> Verdict
where
    S: CircuitBreakerSpec,
    S::Classifier: Classify<T, E>,
{
    if let Some(error) = out.as_ref().err().and_then(inside) {
        return on_resilience_error(error);
    }
    <S::Classifier as Classify<T, E>>::classify(out)
}
