//! The retry's layer: the request sent again, by a clone of the service.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use pin_project_lite::pin_project;
use tokio::time::Sleep;
use tower_service::Service;

use super::{spec_layer, LayerError};
use crate::error::Error;
use crate::outcome::Fail;
use crate::retry::{Exhaustion, Judge, RetryCall, RetrySpec, Step};
use crate::spec::{Classify, Verdict};
use crate::telemetry::Outcome;

spec_layer! {
    /// A retry spec as a tower layer: a response the spec calls a failure
    /// is asked for again after the spec's wait, within `attempts`, under
    /// its budget and overall timeout; a retry that gives up ends as the
    /// spec's `exhausted` mode says. The request must be `Clone` (it is
    /// kept for the retries, and cloned for each attempt) and so must the
    /// service (each request takes a clone, made ready before each retry),
    /// as with tower's own retry. See [`crate::layer`].
    RetryLayer => RetryService
    where
        S: RetrySpec,
        Svc: Clone,
        Req: Clone,
        Svc::Error: Exhaustion<S::Exhausted>,
        S::Classifier: Classify<Svc::Response, Svc::Error>,
}

/// How a layer's retry judges an attempt: by the spec's classification,
/// seeing a resilience error of a layer inside through the service's error.
#[doc(hidden)]
pub struct LayerJudge<K>(PhantomData<fn() -> K>);

impl<K> LayerJudge<K> {
    pub(crate) const fn new() -> Self {
        Self(PhantomData)
    }
}

impl<K> Clone for LayerJudge<K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K> Copy for LayerJudge<K> {}

impl<K: Classify<T, E>, T, E: LayerError> Judge<T, E> for LayerJudge<K> {
    #[inline(always)]
    fn verdict(&self, outcome: &Result<T, E>) -> Verdict {
        K::classify(outcome)
    }

    fn status(&self, value: &T) -> Option<u16> {
        K::status(value)
    }

    fn cause(&self, outcome: &Result<T, E>) -> crate::spec::Cause {
        K::cause(outcome)
    }

    #[inline(always)]
    fn inside<'e>(&self, error: &'e E) -> Option<&'e Error> {
        error.resilience()
    }
}

/// The retry call of a layer of spec `S` around `Svc`.
type Call<S, Svc, Req> = RetryCall<
    'static,
    <Svc as Service<Req>>::Response,
    <Svc as Service<Req>>::Error,
    Trail<S, <Svc as Service<Req>>::Error>,
    LayerJudge<<S as RetrySpec>::Classifier>,
>;

/// What a retry of spec `S` keeps of earlier failures of `E`.
type Trail<S, E> = <E as Exhaustion<<S as RetrySpec>::Exhausted>>::Trail;

impl<S, Svc, Req> Service<Req> for RetryService<S, Svc, Req>
where
    S: RetrySpec,
    Svc: Service<Req> + Clone,
    Req: Clone,
    Svc::Error: LayerError + Exhaustion<S::Exhausted>,
    S::Classifier: Classify<Svc::Response, Svc::Error>,
{
    type Response = Svc::Response;
    type Error = Svc::Error;
    type Future = RetryFuture<S, Svc, Req>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    #[inline]
    fn call(&mut self, req: Req) -> Self::Future {
        let ops = crate::retry::ops::<S, Svc::Response, Svc::Error>()
            .judged_by(LayerJudge::<S::Classifier>::new());
        let call = RetryCall::start(ops, crate::registry::lookup(ops_key::<S>()));
        let refused = call.refused().is_some();
        let mut future = RetryFuture {
            call,
            // A clone for the retries, made ready before each of them.
            svc: self.inner.clone(),
            req,
            phase: Phase::Refused,
            token: None,
            sleep: None,
            inner: None,
        };
        if !refused {
            future.inner = Some(self.inner.call(future.req.clone()));
            future.phase = Phase::Calling;
        }
        future
    }
}

/// The key of retry spec `S`.
#[inline(always)]
fn ops_key<S: RetrySpec>() -> &'static crate::registry::Key<crate::retry::Retry> {
    const { &crate::registry::Key::of::<S>() }
}

/// Where a retry's response future is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// An attempt runs.
    Calling,
    /// The wait before the next attempt.
    Waiting,
    /// The service is made ready for the next attempt.
    Readying,
    /// The spec has no settings: the call is refused.
    Refused,
    /// The outcome was given.
    Done,
}

pin_project! {
    /// The response future of a [`RetryService`].
    pub struct RetryFuture<S, Svc, Req>
    where
        S: RetrySpec,
        Svc: Service<Req>,
        Svc::Error: Exhaustion<S::Exhausted>,
    {
        call: Call<S, Svc, Req>,
        svc: Svc,
        req: Req,
        phase: Phase,
        // The budget token of the retry being waited for, given back if
        // the future is dropped first.
        token: Option<crate::retry::budget::Token>,
        // Boxed: only a request that is retried waits, and the response
        // future of one that is not stays small.
        sleep: Option<Pin<Box<Sleep>>>,
        #[pin]
        inner: Option<Svc::Future>,
    }

    impl<S, Svc, Req> PinnedDrop for RetryFuture<S, Svc, Req>
    where
        S: RetrySpec,
        Svc: Service<Req>,
        Svc::Error: Exhaustion<S::Exhausted>,
    {
        fn drop(this: Pin<&mut Self>) {
            let mut this = this.project();
            this.inner.set(None);
            if let Some(token) = this.token.take() {
                this.call.give_back(token);
            }
        }
    }
}

impl<S, Svc, Req> Future for RetryFuture<S, Svc, Req>
where
    S: RetrySpec,
    Svc: Service<Req>,
    Req: Clone,
    Svc::Error: LayerError + Exhaustion<S::Exhausted>,
    S::Classifier: Classify<Svc::Response, Svc::Error>,
{
    type Output = Result<Svc::Response, Svc::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            let attempt = match *this.phase {
                Phase::Calling => {
                    let Some(inner) = this.inner.as_mut().as_pin_mut() else {
                        *this.phase = Phase::Done;
                        continue;
                    };
                    // Polled unmarked, as in the stack layer: only the
                    // retry's call of the inner service is marked.
                    let out = ready!(inner.poll(cx));
                    this.inner.set(None);
                    out
                }
                Phase::Waiting => {
                    if let Some(sleep) = this.sleep.as_mut() {
                        ready!(sleep.as_mut().poll(cx));
                    }
                    *this.sleep = None;
                    *this.phase = Phase::Readying;
                    continue;
                }
                Phase::Readying => match ready!(this.svc.poll_ready(cx)) {
                    Ok(()) => {
                        // The retry starts: its token is spent.
                        *this.token = None;
                        // Marked with its attempt: a layer inside (such
                        // as `AttemptHeaderLayer`) sees it.
                        let (svc, req) = (&mut *this.svc, &*this.req);
                        let retry =
                            crate::retry::call_in(this.call.attempt(), || svc.call(req.clone()));
                        this.inner.set(Some(retry));
                        *this.phase = Phase::Calling;
                        continue;
                    }
                    // A service whose readiness failed is done (tower's
                    // contract): the call ends with its error, not retried,
                    // and the token of the retry that did not start goes
                    // back.
                    Err(e) => {
                        *this.phase = Phase::Done;
                        if let Some(token) = this.token.take() {
                            this.call.give_back(token);
                        }
                        this.call.ended_now(Outcome::Failure);
                        return Poll::Ready(Err(e));
                    }
                },
                Phase::Refused => {
                    *this.phase = Phase::Done;
                    return match this.call.refused() {
                        Some(fail) => Poll::Ready(Err(fail.into_error(From::from))),
                        None => Poll::Pending,
                    };
                }
                Phase::Done => return Poll::Pending,
            };
            match this.call.step(attempt.map_err(Fail::Body)) {
                Step::Done(out) => {
                    *this.phase = Phase::Done;
                    return Poll::Ready(out.map_err(|fail| fail.into_error(From::from)));
                }
                Step::Wait(wait) => {
                    let (delay, token) = wait.into_parts();
                    *this.token = token;
                    *this.sleep = Some(Box::pin(tokio::time::sleep(delay)));
                    *this.phase = Phase::Waiting;
                }
            }
        }
    }
}
