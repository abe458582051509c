//! A [`StackLayer`] as reqwest-middleware middleware.
//!
//! reqwest-middleware runs each middleware as a boxed future of its own
//! (`Middleware::handle`, through `async_trait`), and lends the request's
//! extensions to the middleware inside for the length of its call. A
//! stack here is one such middleware: its parts are nested `async` blocks,
//! one state machine as an attribute chain's (each retry lends the
//! extensions again), boxed once by reqwest-middleware. It admits, counts
//! and refuses as the tower stack does, with the same helpers.

// The impls spell out the trait's `impl Future + Send + 'a`, the bound each
// part's future is checked against where it is written.
#![allow(clippy::manual_async_fn)]

use std::future::Future;

use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next};

use super::middleware::NotRetryable;
use super::retry::LayerJudge;
use super::stack::{
    breaker_call, breaker_exit, gate_exit, BreakerLevel, ChaosLevel, End, KeyOf, LimitLevel,
    MakeGate, RateLevel, RetryLevel, StackLayer, StackOut, Then, TimeoutLevel,
};
use crate::circuit_breaker::CircuitBreakerSpec;
use crate::gate::{Entry, Gate};
use crate::outcome::Fail;
use crate::registry::Key;
use crate::retry::{Exhaustion, InAttempt, RetryCall, RetrySpec, Step};
use crate::spec::{Classify, Verdict};
use crate::telemetry::Outcome;
use crate::timeout::{TimeoutCall, TimeoutSpec};

/// reqwest-middleware's error.
type MwError = reqwest_middleware::Error;

/// A stack's outcome between its parts, as middleware.
type MwOut = StackOut<Response, MwError>;

/// A stack's specs from one on, as middleware runs them. Not a public API.
#[doc(hidden)]
pub trait MwChain: Send + Sync + 'static {
    /// Runs `req` through these parts and the middleware after them.
    fn run<'a>(
        &'a self,
        req: Request,
        extensions: &'a mut Extensions,
        next: Next<'a>,
    ) -> impl Future<Output = MwOut> + Send + 'a;
}

#[async_trait::async_trait]
impl<L: MwChain> Middleware for StackLayer<L, Request> {
    async fn handle(
        &self,
        req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        self.levels()
            .run(req, extensions, next)
            .await
            .map_err(|f| f.into_error(From::from))
    }
}

impl MwChain for End {
    #[inline(always)]
    fn run<'a>(
        &'a self,
        req: Request,
        extensions: &'a mut Extensions,
        next: Next<'a>,
    ) -> impl Future<Output = MwOut> + Send + 'a {
        async move { next.run(req, extensions).await.map_err(Fail::Body) }
    }
}

/// Gives back a part's hold when the request is dropped before its
/// outcome, counted cancelled.
struct Hold<'g, C: Gate> {
    call: &'g C,
    parts: Option<C::Parts>,
}

impl<C: Gate> Drop for Hold<'_, C> {
    fn drop(&mut self) {
        if let Some(parts) = self.parts.take() {
            self.call.finish(parts, None);
        }
    }
}

/// Whether `out` is a retry's refusal of a request it could not copy.
fn refused_unsent(out: &MwOut) -> bool {
    matches!(out, Err(Fail::Body(MwError::Middleware(e))) if e.is::<NotRetryable>())
}

impl<S, K, N> MwChain for Then<BreakerLevel<S, K>, N>
where
    S: CircuitBreakerSpec,
    K: KeyOf<Request> + Send + Sync + 'static,
    N: MwChain,
    S::Classifier: Classify<Response, MwError>,
{
    fn run<'a>(
        &'a self,
        req: Request,
        extensions: &'a mut Extensions,
        next: Next<'a>,
    ) -> impl Future<Output = MwOut> + Send + 'a {
        async move {
            let call = breaker_call::<S, Request>(&self.0.key, &req);
            let parts = match call.enter() {
                Ok(entered) => entered.into_parts(),
                Err(e) => return Err(Fail::Resilience(e)),
            };
            // Dropped with the request if it is cancelled: counted so.
            let permit = call
                .breaker()
                .map(|b| crate::circuit_breaker::Permit::from_parts(b, parts));
            let out = self.1.run(req, extensions, next).await;
            let Some(permit) = permit else {
                return out;
            };
            if refused_unsent(&out) {
                // A retry inside refused a request it could not send
                // again: the dependency was never asked.
                permit.judged(Verdict::Ignore, parts);
                return out;
            }
            let parts = permit.into_parts();
            breaker_exit::<S, _, _>(Some(&call), Some(parts), out)
        }
    }
}

impl<S, N> MwChain for Then<TimeoutLevel<S>, N>
where
    S: TimeoutSpec,
    N: MwChain,
{
    fn run<'a>(
        &'a self,
        req: Request,
        extensions: &'a mut Extensions,
        next: Next<'a>,
    ) -> impl Future<Output = MwOut> + Send + 'a {
        async move {
            let key = const { &Key::of::<S>() };
            let call = TimeoutCall::new(key, crate::registry::lookup(key));
            crate::timeout::run(call, move || self.1.run(req, extensions, next)).await
        }
    }
}

macro_rules! gate_middleware {
    ($level:ident<S $(, $k:ident)?>) => {
        impl<S, $($k,)? N> MwChain for Then<$level<S $(, $k)?>, N>
        where
            $level<S $(, $k)?>: MakeGate<Request> + Send + Sync + 'static,
            <$level<S $(, $k)?> as MakeGate<Request>>::Gate: Send + Sync,
            N: MwChain,
        {
            fn run<'a>(
                &'a self,
                req: Request,
                extensions: &'a mut Extensions,
                next: Next<'a>,
            ) -> impl Future<Output = MwOut> + Send + 'a {
                async move {
                    let call = self.0.gate(&req);
                    let parts = match call.enter() {
                        Entry::Ready(Ok(parts)) => parts,
                        Entry::Ready(Err(e)) => return Err(Fail::Resilience(e)),
                        Entry::Wait(wait) => match wait.await {
                            Ok(parts) => parts,
                            Err(e) => return Err(Fail::Resilience(e)),
                        },
                    };
                    let mut hold = Hold { call: &call, parts: Some(parts) };
                    let out = self.1.run(req, extensions, next).await;
                    gate_exit(Some(&call), hold.parts.take(), out)
                }
            }
        }
    };
}

gate_middleware!(LimitLevel<S, K>);
gate_middleware!(RateLevel<S, K>);
gate_middleware!(ChaosLevel<S>);

impl<S, N> MwChain for Then<RetryLevel<S>, N>
where
    S: RetrySpec,
    N: MwChain,
    S::Classifier: Classify<Response, MwError>,
    MwError: Exhaustion<S::Exhausted>,
    <MwError as Exhaustion<S::Exhausted>>::Trail: Send,
{
    fn run<'a>(
        &'a self,
        req: Request,
        extensions: &'a mut Extensions,
        next: Next<'a>,
    ) -> impl Future<Output = MwOut> + Send + 'a {
        async move {
            let ops = crate::retry::ops::<S, Response, MwError>()
                .judged_by(LayerJudge::<S::Classifier>::new());
            let key = const { &Key::of::<S>() };
            let mut call = RetryCall::start(ops, crate::registry::lookup(key));
            if let Some(refused) = call.refused() {
                return Err(refused);
            }
            if !call.may_retry() {
                // Sent once, as it is: nothing would send it again.
                let out = self.1.run(req, extensions, next).await;
                return match call.step(out) {
                    Step::Done(out) => out,
                    Step::Wait(_) => Err(Fail::Body(MwError::middleware(NotRetryable {
                        spec: S::NAME,
                    }))),
                };
            }
            loop {
                let Some(mut attempt) = req.try_clone() else {
                    call.ended_now(Outcome::Rejected);
                    return Err(Fail::Body(MwError::middleware(NotRetryable {
                        spec: S::NAME,
                    })));
                };
                attempt_header(&call, &mut attempt);
                let run = self.1.run(attempt, &mut *extensions, next.clone());
                let out = InAttempt::new(call.attempt(), run).await;
                let wait = match call.step(out) {
                    Step::Done(out) => return out,
                    Step::Wait(wait) => wait,
                };
                wait.wait().await;
            }
        }
    }
}

/// Sets the retry's attempt header on `request`, when `call`'s next call is
/// a retry and its spec has an `attempt_header` (replacing one the request
/// already carries: each retry says its own number).
pub(super) fn attempt_header<T, E, Tr, J>(
    call: &RetryCall<'_, T, E, Tr, J>,
    request: &mut Request,
) {
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
