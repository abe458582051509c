//! Fallback: when the call fails, answer with another method's result.
//!
//! ```
//! use resilient_core::{fallback, retryable, RetrySpec};
//!
//! #[derive(RetrySpec)]
//! #[spec("resilient.retry.pet")]
//! pub struct PetRetry;
//!
//! #[derive(Debug, thiserror::Error)]
//! pub enum PetError {
//!     #[error("pet store unavailable")]
//!     Unavailable,
//!     #[error(transparent)]
//!     Resilience(#[from] resilient_core::Error),
//! }
//!
//! pub struct Client;
//!
//! impl Client {
//!     #[fallback(method = "cached(id)")]
//!     #[retryable(PetRetry)]
//!     pub async fn find(&self, id: u64) -> Result<String, PetError> {
//!         Err(PetError::Unavailable)
//!     }
//!
//!     // Same receiver, the arguments named in `method`, the same output;
//!     // sync or async.
//!     fn cached(&self, id: u64) -> Result<String, PetError> {
//!         Ok(format!("pet {id} (cached)"))
//!     }
//! }
//! ```
//!
//! # The reference
//!
//! `method = "name(a, b)"` names the fallback and the arguments it gets, by
//! the annotated fn's parameter names: any of them, in any order, repeated if
//! need be. In a method, `name` is a method of the same type, called on the
//! same receiver (`&self` → `&self`, `self: Arc<Self>` → `self: Arc<Self>`);
//! in a free fn it is a fn in scope (a path is allowed). The arguments are
//! clones of the ones the call got, so they must be `Clone` (references are
//! copied).
//!
//! The fallback may take one more, last, parameter: the error that
//! triggered it, as the annotated fn's error type (a resilience error, such
//! as an open breaker's rejection, arrives converted through
//! `From<resilient_core::Error>`). It returns the annotated fn's output type,
//! `Result<T, E>`, directly or as a future: both sync and async fallbacks are
//! allowed. The compiler checks all of this.
//!
//! # Which failures it handles
//!
//! | option | the fallback runs for |
//! |---|---|
//! | (none), or `on = any` | every failure |
//! | `on = resilience` | failures raised by a resilience attribute inside it (rejections, timeouts, `RetryExhausted`) |
//! | `on = rejection` | a circuit breaker's, rate limiter's or concurrency limit's rejection |
//! | `on = timeout` | a timeout |
//! | `when = path::to::predicate` | the body's errors for which `fn(&E) -> bool` says `true` |
//!
//! Any other failure passes through unchanged, as it was: a resilience error
//! stays one for the layers outside. `Error::NotConfigured` (no registry, or
//! none with the spec) is never handled, so a missing setup shows. A retry
//! with `exhausted = last_failure`, or whose budget is empty, gives up with the
//! body's own error, which `on = resilience` does not handle.

use std::future::{Future, Pending};

use crate::error::Error;
use crate::outcome::{Fail, ResultType};

/// Which failures a fallback handles; built by `#[fallback]`.
#[doc(hidden)]
#[derive(Debug)]
pub enum FallbackOn<E> {
    /// Every failure.
    Any,
    /// Failures raised by a resilience attribute inside the fallback.
    Resilience,
    /// Rejections: open breaker, rate limit, concurrency limit.
    Rejection,
    /// Timeouts.
    Timeout,
    /// Errors the predicate accepts.
    When(fn(&E) -> bool),
}

/// A fallback that takes exactly the named arguments.
#[doc(hidden)]
#[derive(Debug)]
pub enum WithoutError {}

/// A fallback that also takes the error as its last parameter.
#[doc(hidden)]
#[derive(Debug)]
pub enum WithError {}

/// A fn that can be called as a fallback with `Args`, and optionally the
/// error `E`; `M` tells the two apart. Implemented for every such fn.
#[diagnostic::on_unimplemented(
    message = "the fallback does not take what `method` passes: `{Args}`, optionally followed by the error `{E}`",
    label = "passes `{Args}` (the arguments named here, a method's receiver first), then optionally the error `{E}`",
    note = "give it exactly these parameters, in this order, with at most one more, last: the error, by value as `{E}` (not `&{E}`); or change the arguments named in `method = \"..\"`"
)]
pub trait FallbackFn<Args, E, M> {
    /// What the fallback returns.
    type Output;
    /// Calls the fallback.
    fn call_fallback(self, args: Args, error: E) -> Self::Output;
}

macro_rules! fallback_fn {
    ($($arg:ident),*) => {
        #[allow(non_snake_case)]
        impl<F, R, E, $($arg),*> FallbackFn<($($arg,)*), E, WithoutError> for F
        where
            F: FnOnce($($arg),*) -> R,
        {
            type Output = R;
            #[inline]
            fn call_fallback(self, ($($arg,)*): ($($arg,)*), _: E) -> R {
                self($($arg),*)
            }
        }

        #[allow(non_snake_case)]
        impl<F, R, E, $($arg),*> FallbackFn<($($arg,)*), E, WithError> for F
        where
            F: FnOnce($($arg,)* E) -> R,
        {
            type Output = R;
            #[inline]
            fn call_fallback(self, ($($arg,)*): ($($arg,)*), error: E) -> R {
                self($($arg,)* error)
            }
        }
    };
}

fallback_fn!();
fallback_fn!(A1);
fallback_fn!(A1, A2);
fallback_fn!(A1, A2, A3);
fallback_fn!(A1, A2, A3, A4);
fallback_fn!(A1, A2, A3, A4, A5);
fallback_fn!(A1, A2, A3, A4, A5, A6);
fallback_fn!(A1, A2, A3, A4, A5, A6, A7);
fallback_fn!(A1, A2, A3, A4, A5, A6, A7, A8);

/// A synchronous fallback's output.
#[doc(hidden)]
#[derive(Debug)]
pub enum Immediate {}

/// An asynchronous fallback's output.
#[doc(hidden)]
#[derive(Debug)]
pub enum Deferred {}

/// A fallback's answer: at once (a sync fallback), or a future to await.
#[doc(hidden)]
#[derive(Debug)]
pub enum Answer<T, E, F> {
    /// A sync fallback's output.
    Now(Result<T, E>),
    /// An async fallback's future.
    Later(F),
}

/// What a fallback may return: the annotated fn's `Result<T, E>`, or a
/// future of it.
#[diagnostic::on_unimplemented(
    message = "the fallback returns `{Self}`, not the annotated fn's output",
    label = "a fallback must return the annotated fn's output type `Result<{T}, {E}>`, or a future of it",
    note = "change the fallback's return type to the annotated fn's"
)]
pub trait FallbackOutput<T, E, M> {
    /// The future an async fallback returns.
    type Future: Future<Output = Result<T, E>>;
    /// The output as an answer.
    fn into_answer(self) -> Answer<T, E, Self::Future>;
}

// Both impls are for any type, told apart by their bounds only: with a wrong
// output, rustc then finds neither and reports it once, instead of taking
// the one whose header fits and reporting its bound as a second error.
impl<T, E, R> FallbackOutput<T, E, Immediate> for R
where
    R: ResultType<Ok = T, Err = E>,
{
    // Never made: a sync answer is not awaited, so the fn's future holds no
    // `T` or `E` across an await for it.
    type Future = Pending<Result<T, E>>;
    #[inline]
    fn into_answer(self) -> Answer<T, E, Self::Future> {
        Answer::Now(self.into_result())
    }
}

impl<T, E, F> FallbackOutput<T, E, Deferred> for F
where
    F: Future<Output = Result<T, E>>,
{
    type Future = F;
    #[inline]
    fn into_answer(self) -> Answer<T, E, F> {
        Answer::Later(self)
    }
}

fn handles<E>(on: &FallbackOn<E>, fail: &Fail<E>) -> bool {
    match (on, fail) {
        // A missing registry is a mistake to see, not a failure to hide.
        (_, Fail::Resilience(Error::NotConfigured { .. })) => false,
        (FallbackOn::Any, _) => true,
        // A predicate is asked about the body's errors only.
        (FallbackOn::When(accepts), Fail::Body(e)) => accepts(e),
        (FallbackOn::When(_), Fail::Resilience(_)) => false,
        (_, Fail::Body(_)) => false,
        (FallbackOn::Resilience, Fail::Resilience(_)) => true,
        (FallbackOn::Rejection, Fail::Resilience(e)) => matches!(
            e,
            Error::CallNotPermitted { .. }
                | Error::RateLimitExceeded { .. }
                | Error::ConcurrencyLimitReached { .. }
        ),
        (FallbackOn::Timeout, Fail::Resilience(e)) => matches!(e, Error::Timeout { .. }),
    }
}

/// What `#[fallback]` does with the outcome of what is inside it: passes it
/// on (`Ok`), or hands back the error, as the fn's error, for the fallback to
/// answer (`Err`).
#[inline(always)]
pub(crate) fn decide<T, E>(
    fn_name: &'static str,
    on: &FallbackOn<E>,
    wrap: fn(Error) -> E,
    outcome: Result<T, Fail<E>>,
) -> Result<Result<T, Fail<E>>, E> {
    match outcome {
        Ok(v) => Ok(Ok(v)),
        Err(fail) if handles(on, &fail) => Err(taken(fn_name, fail.into_error(wrap))),
        Err(fail) => Ok(Err(fail)),
    }
}

#[inline(never)]
fn taken<E>(fn_name: &'static str, error: E) -> E {
    crate::registry::fallback_taken(fn_name);
    error
}
