//! The circuit breaker's layer: a permit per request, taken in `call`.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use pin_project_lite::pin_project;
use tower_service::Service;

use super::{spec_layer, Flight, LayerError};
use crate::circuit_breaker::{
    on_resilience_error, unclassified, BreakerCall, CircuitBreakerSpec, Permit, PermitParts,
};
use crate::spec::{Classify, Verdict};

spec_layer! {
    /// A circuit breaker spec as a tower layer: each request takes a permit
    /// in `call` (an open breaker answers at once with
    /// [`Error::CallNotPermitted`](crate::Error::CallNotPermitted)), and its
    /// response counts as the spec classifies it. See [`crate::layer`].
    CircuitBreakerLayer => CircuitBreakerService
    where
        S: CircuitBreakerSpec,
        S::Classifier: Classify<Svc::Response, Svc::Error>,
}

impl<S, Svc, Req> Service<Req> for CircuitBreakerService<S, Svc, Req>
where
    S: CircuitBreakerSpec,
    Svc: Service<Req>,
    Svc::Error: LayerError,
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
            flight: Flight::Done,
            _spec: PhantomData,
        };
        let entered = future.call.enter().map(|entered| entered.into_parts());
        future.flight = match entered {
            Ok(parts) => {
                // The permit is the future's before the inner call runs: if
                // that panics, the future's drop gives the permit back.
                future.permit = Some(parts);
                Flight::Running {
                    future: self.inner.call(req),
                }
            }
            Err(e) => Flight::Refused { error: Some(e) },
        };
        future
    }
}

pin_project! {
    /// The response future of a [`CircuitBreakerService`].
    pub struct CircuitBreakerFuture<S, F> {
        call: BreakerCall<'static, ()>,
        // The permit, while the response is not counted.
        permit: Option<PermitParts>,
        #[pin]
        flight: Flight<F>,
        _spec: PhantomData<fn() -> S>,
    }

    impl<S, F> PinnedDrop for CircuitBreakerFuture<S, F> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            // The inner future first, as an async fn's body goes before its
            // guards; then the permit, counted as cancelled.
            this.flight.end();
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
    E: LayerError,
    S::Classifier: Classify<T, E>,
{
    type Output = Result<T, E>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let out = match ready!(this.flight.poll_flight(cx)) {
            Ok(out) => out,
            Err(refused) => return Poll::Ready(Err(E::from(refused))),
        };
        if let (Some(parts), Some(breaker)) = (this.permit.take(), this.call.breaker()) {
            Permit::from_parts(breaker, parts).judged(verdict::<S, T, E>(&out), parts);
        }
        Poll::Ready(out)
    }
}

/// How the breaker of `S` counts a response: a resilience error of a layer
/// inside as in an attribute chain, anything else as the spec classifies.
#[inline]
pub(super) fn verdict<S, T, E: LayerError>(out: &Result<T, E>) -> Verdict
where
    S: CircuitBreakerSpec,
    S::Classifier: Classify<T, E>,
{
    if let Some(error) = out.as_ref().err().and_then(LayerError::resilience) {
        return on_resilience_error(error);
    }
    <S::Classifier as Classify<T, E>>::classify(out)
}
