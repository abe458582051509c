//! A [`StackLayer`] as reqwest-middleware middleware.
//!
//! reqwest-middleware runs each middleware as a boxed future of its own
//! (`Middleware::handle`, through `async_trait`), and lends the request's
//! extensions to the middleware inside for the length of its call. A
//! stack here is one such middleware, and its future is the tower stack's
//! own state machine ([`Running`]): the same parts in the same order, the
//! same admission, counting and refusals, with the next middleware as the
//! inner call. reqwest-middleware boxes it once, as it boxes every
//! middleware's future.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::ptr::NonNull;
use std::task::{Context, Poll};

use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next};
use tower_service::Service;

use super::middleware::NotRetryable;
use super::stack::{Chain, InPlace, InnerCall, Resend, Running, StackLayer, StackOut};
use crate::outcome::Fail;
use crate::retry::InMarked;

/// reqwest-middleware's error.
type MwError = reqwest_middleware::Error;

/// The middleware after a stack, as the stack's parts call it: once per
/// attempt, each call lent the request's extensions. Not a public API.
#[doc(hidden)]
pub struct NextCall<'a> {
    next: Next<'a>,
    /// The extensions reqwest-middleware lent the stack for `'a`.
    extensions: NonNull<Extensions>,
    _lent: PhantomData<&'a mut Extensions>,
}

// SAFETY: a `NextCall` and its copies stand for the `&'a mut Extensions`
// it was made from, which is `Send` (`Extensions` is): they move between
// threads as that reference would, and only one of them makes a call at a
// time (see `call`). Not `Sync`: nothing shares one.
#[allow(unsafe_code)]
unsafe impl Send for NextCall<'_> {}

impl<'a> NextCall<'a> {
    fn new(next: Next<'a>, extensions: &'a mut Extensions) -> Self {
        NextCall {
            next,
            extensions: NonNull::from(extensions),
            _lent: PhantomData,
        }
    }
}

impl Clone for NextCall<'_> {
    // A copy made for a request that waits for a place calls in its
    // stead; one of them calls at a time (below).
    fn clone(&self) -> Self {
        NextCall {
            next: self.next.clone(),
            extensions: self.extensions,
            _lent: PhantomData,
        }
    }
}

impl<'a> Service<Request> for NextCall<'a> {
    type Response = Response;
    type Error = MwError;
    type Future =
        InMarked<Pin<Box<dyn Future<Output = reqwest_middleware::Result<Response>> + Send + 'a>>>;

    #[inline(always)]
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), MwError>> {
        Poll::Ready(Ok(()))
    }

    #[inline(always)]
    #[allow(unsafe_code)]
    fn call(&mut self, mut req: Request) -> Self::Future {
        // A retry's call is marked with its attempt (`End::start` runs in
        // it): the request carries its attempt header, and the middleware
        // inside sees the attempt as the retried body of an attribute does
        // (`retry::current_attempt`).
        let attempt = crate::retry::marked();
        if let Some(attempt) = &attempt {
            attempt.set_header(req.headers_mut());
        }
        // SAFETY: the extensions were lent for `'a` and only this stack's
        // calls reach them. A stack calls the inner call at its end only
        // (`End::start`), one attempt at a time, and drops the previous
        // attempt's future before the next call: so the `&mut` made here
        // is the only one alive while its future lives.
        let extensions = unsafe { &mut *self.extensions.as_ptr() };
        InMarked::new(attempt, self.next.clone().run(req, extensions))
    }
}

impl InnerCall<Request> for NextCall<'_> {
    // A first attempt is marked too: the middleware inside sees the retry
    // it runs in (a nested retry's check, `share_outer_budget`) and not
    // an outer retry's attempt.
    const MARKS_FIRST: bool = true;

    #[inline(always)]
    fn refused_unsent(out: &StackOut<Response, MwError>) -> bool {
        matches!(out, Err(Fail::Body(MwError::Middleware(e))) if e.is::<NotRetryable>())
    }
}

impl Resend<Request> for NextCall<'_> {
    #[inline(always)]
    fn resend(req: &Request, spec: &'static str) -> Result<Request, Fail<MwError>> {
        req.try_clone()
            .ok_or_else(|| Fail::Body(MwError::middleware(NotRetryable { spec })))
    }
}

// Written out as `async_trait` would expand `async fn handle`, without its
// `async` block: that block would keep a second copy of the request and of
// `next` beside the stack's own, and the box reqwest-middleware makes for
// each middleware's future would be larger.
impl<L> Middleware for StackLayer<L, Request>
where
    L: for<'a> Chain<NextCall<'a>, Request> + Send + Sync + 'static,
    for<'a> <L as Chain<NextCall<'a>, Request>>::State: Send,
{
    fn handle<'life0, 'life1, 'life2, 'async_trait>(
        &'life0 self,
        req: Request,
        extensions: &'life1 mut Extensions,
        next: Next<'life2>,
    ) -> Pin<Box<dyn Future<Output = reqwest_middleware::Result<Response>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        'life2: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(Running::<_, _, _, InPlace<_, _>>::new(
            self.levels().clone(),
            NextCall::new(next, extensions),
            req,
        ))
    }
}
