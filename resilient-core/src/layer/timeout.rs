//! The timeout's layer: the response future, bounded.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use pin_project_lite::pin_project;
use tokio::task::Unconstrained;
use tokio::time::Sleep;
use tower_service::Service;

use super::{spec_layer, Flight, LayerError};
use crate::error::Error;
use crate::registry::Key;
use crate::timeout::{TimeoutCall, TimeoutSpec, TimerParts};

spec_layer! {
    /// A timeout spec as a tower layer: a response future that takes longer
    /// than the spec's `duration` ends with [`Error::Timeout`], its inner
    /// future dropped. The timer starts at the future's first wait, so a
    /// response ready at once reads no clock. See [`crate::layer`].
    TimeoutLayer => TimeoutService
    where
        S: TimeoutSpec,
}

impl<S, Svc, Req> Service<Req> for TimeoutService<S, Svc, Req>
where
    S: TimeoutSpec,
    Svc: Service<Req>,
    Svc::Error: LayerError,
{
    type Response = Svc::Response;
    type Error = Svc::Error;
    type Future = TimeoutFuture<Svc::Future>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    #[inline]
    fn call(&mut self, req: Req) -> Self::Future {
        let key = const { &Key::of::<S>() };
        let call = TimeoutCall::new(key, crate::registry::lookup(key));
        match call.start_parts() {
            Ok(timer) => {
                let mut future = TimeoutFuture {
                    call,
                    timer,
                    sleep: None,
                    flight: Flight::Done,
                };
                // Held by the future before the inner call runs: if that
                // panics, the future's drop counts the call cancelled.
                future.flight = Flight::Running {
                    future: self.inner.call(req),
                };
                future
            }
            Err(e) => TimeoutFuture {
                call,
                timer: None,
                sleep: None,
                flight: Flight::Refused { error: Some(e) },
            },
        }
    }
}

pin_project! {
    /// The response future of a [`TimeoutService`].
    pub struct TimeoutFuture<F> {
        call: TimeoutCall<'static>,
        // The timer, while the response is not counted (`None` if the spec
        // is disabled).
        timer: Option<TimerParts>,
        // Armed at the first wait; polled outside tokio's cooperative
        // budget, so that a response that spends the budget still times out.
        #[pin]
        sleep: Option<Unconstrained<Sleep>>,
        #[pin]
        flight: Flight<F>,
    }

    impl<F> PinnedDrop for TimeoutFuture<F> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            this.flight.end();
            if let Some(timer) = this.timer.take() {
                this.call.ended_parts(timer, None);
            }
        }
    }
}

impl<F, T, E> Future for TimeoutFuture<F>
where
    F: Future<Output = Result<T, E>>,
    E: From<Error>,
{
    type Output = Result<T, E>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if let Poll::Ready(done) = this.flight.as_mut().poll_flight(cx) {
            this.sleep.set(None);
            let out = match done {
                Ok(out) => out,
                Err(refused) => return Poll::Ready(Err(E::from(refused))),
            };
            if let Some(timer) = this.timer.take() {
                this.call.ended_parts(timer, Some(out.is_err()));
            }
            return Poll::Ready(out);
        }
        let Some(timer) = *this.timer else {
            return Poll::Pending;
        };
        if this.sleep.is_none() {
            let sleep = tokio::time::sleep(timer.duration);
            this.sleep.set(Some(tokio::task::unconstrained(sleep)));
        }
        if let Some(sleep) = this.sleep.as_mut().as_pin_mut() {
            ready!(sleep.poll(cx));
        }
        this.flight.end();
        this.sleep.set(None);
        *this.timer = None;
        let error = this.call.timed_out_parts(timer, timer.duration);
        Poll::Ready(Err(E::from(error)))
    }
}
