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
//! | `on = rejection` | a circuit breaker's, rate limiter's (its backend's too) or concurrency limit's rejection |
//! | `on = timeout` | a timeout |
//! | `when = path::to::predicate` | the body's errors for which `fn(&E) -> bool` says `true` |
//!
//! Any other failure passes through unchanged, as it was: a resilience error
//! stays one for the layers outside. `Error::NotConfigured` (no registry, or
//! none with the spec) is never handled, so a missing setup shows. A retry
//! with `exhausted = last_failure`, or whose budget is empty, gives up with the
//! body's own error, which `on = resilience` does not handle.
//!
//! An `on` that no attribute below the fallback can answer is a compile
//! error at `on = ..`, since that fallback could never be taken:
//! `on = resilience` with no resilience attribute below it (or only
//! `#[hedged]`, which raises no error of its own), `on = rejection` with no
//! `#[circuit_breakable]`, `#[rate_limited]` or `#[concurrency_limit]` below
//! it, `on = timeout` with no `#[timeout]` below it. An attribute above the
//! fallback wraps it: none of its errors reach it.

use std::future::{Future, Pending};
use std::marker::PhantomData;

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
    /// Rejections: open breaker, rate limit (or its backend unavailable),
    /// concurrency limit.
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

// How a fallback is matched against what `method` passes, one question at a
// time, so that a mismatch is reported as what it is: the fallback's
// parameters are read off its type (`FallbackParams`); their number is
// matched against the arguments named (`FallbackArity`), which also says
// whether the last one takes the error; then each parameter against the
// argument passed there (`FallbackParam`, numbered as the user counts them)
// and the error parameter against the error (`FallbackErrorParam`). Each
// check returns a value of the fallback's own type, whether it holds or
// not, so a mismatch is reported once and the call below it still fits.

/// The parameters of a fallback fn, as a tuple (`M` is that tuple).
#[diagnostic::on_unimplemented(
    message = "`method` names `{Self}`, which is not a fn",
    label = "names a value of type `{Self}`",
    note = "a fallback is a fn in scope, or a method of the same type, that takes the arguments named in `method = \"..\"`"
)]
pub trait FallbackParams<M> {
    /// The fallback's parameter types.
    type List;
}

/// Arguments named by `method` (`Self`, a method's receiver first), then
/// perhaps the error `E`, against a fallback's parameters `P`.
#[diagnostic::on_unimplemented(
    message = "the fallback takes `{P}`, and `method` passes `{Self}`",
    label = "passes `{Self}` (the arguments named here, a method's receiver first), and may pass the error `{E}` as one more, last",
    note = "a fallback takes the arguments `method` names, in that order, and at most one more parameter, last: the error, by value as `{E}`; change the fallback's parameters or the names in `method = \"..\"`"
)]
pub trait FallbackArity<P, E> {
    /// A [`FallbackFit`] of the parameters that take the named arguments,
    /// of what the last one takes the error as (`E` if none does), and of
    /// `WithError` or `WithoutError`. One type, so that when the count does
    /// not fit, nothing that follows from it is reported again.
    type Fit;
}

/// An argument of type `Self`, passed where the fallback's parameter `I`
/// (counted from 1, the receiver not counted) takes `X`.
#[diagnostic::on_unimplemented(
    message = "the fallback's parameter {I} takes `{X}`, and `method` passes `{Self}` there",
    label = "passes `{Self}` as parameter {I}",
    note = "`method` passes the named arguments in its order, as clones of the annotated fn's; give parameter {I} the type `{Self}`, or name another argument there"
)]
pub trait FallbackParam<X, const I: usize> {
    /// The argument, as the parameter's type (which it is).
    fn into_param(self) -> X;
}

impl<T, const I: usize> FallbackParam<T, I> for T {
    #[inline(always)]
    fn into_param(self) -> T {
        self
    }
}

/// As [`FallbackParam`], for a fallback named by a path from `Self`
/// (`Self::cached(id)`) in a method: such a path is called as written,
/// without the receiver, which is the usual reason for a mismatch.
#[diagnostic::on_unimplemented(
    message = "the fallback's parameter {I} takes `{X}`, and `method` passes `{Self}` there",
    label = "passes `{Self}` as parameter {I}",
    note = "a fallback named by a path, `Self::name(..)`, is called as written, without the receiver; to call a method on the annotated method's receiver, name it alone: `method = \"name(..)\"`"
)]
pub trait FallbackPathParam<X, const I: usize> {
    /// The argument, as the parameter's type (which it is).
    fn into_param(self) -> X;
}

impl<T, const I: usize> FallbackPathParam<T, I> for T {
    #[inline(always)]
    fn into_param(self) -> T {
        self
    }
}

/// The annotated method's receiver `Self`, passed to a fallback method
/// whose receiver is `X`.
#[diagnostic::on_unimplemented(
    message = "the fallback method takes its receiver as `{X}`, and the annotated method passes `{Self}`",
    label = "passes the receiver as `{Self}`",
    note = "a fallback method is called on the annotated method's receiver: take it as the annotated method does"
)]
pub trait FallbackReceiver<X> {
    /// The receiver, as the fallback's (which it is).
    fn into_receiver(self) -> X;
}

impl<T> FallbackReceiver<T> for T {
    #[inline(always)]
    fn into_receiver(self) -> T {
        self
    }
}

/// The error `Self` the fallback gets, where its last parameter takes `X`;
/// `N` are the fallback's other parameters and `A` the arguments named,
/// for the message.
#[diagnostic::on_unimplemented(
    message = "the fallback's last parameter takes `{X}`, and what `method` passes there is the error, `{Self}`",
    label = "the fallback takes `{N}`, then `{X}`; `method` passes `{A}`, then the error `{Self}`",
    note = "if that parameter is for the error, take it as `{Self}`, by value; if it is for an argument, name that argument in `method = \"..\"`"
)]
pub trait FallbackErrorParam<X, N, A> {
    /// The error, as the parameter's type (which it is).
    fn into_error_param(self) -> X;
}

impl<T, N, A> FallbackErrorParam<T, N, A> for T {
    #[inline(always)]
    fn into_error_param(self) -> T {
        self
    }
}

/// What a fallback's parameters say: the types of the named ones (`N`), of
/// the error (`X`), and whether it takes the error (`M`).
#[doc(hidden)]
#[derive(Debug)]
pub struct FallbackFit<N, X, M>(PhantomData<Types<N, X, M>>);

/// The types a [`FallbackFit`] carries, owning none of them.
type Types<N, X, M> = fn() -> (N, X, M);

/// Made by the arity check, whatever it found.
#[doc(hidden)]
pub trait NewFit {
    /// The fit.
    fn new_fit() -> Self;
}

impl<N, X, M> NewFit for FallbackFit<N, X, M> {
    #[inline(always)]
    fn new_fit() -> Self {
        FallbackFit(PhantomData)
    }
}

impl<N, X, M> FallbackFit<N, X, M> {
    /// The type of the arguments named, kept for [`error`](Self::error)
    /// once they are moved into the call.
    #[inline(always)]
    pub fn passed<A>(&self, _args: &A) -> PhantomData<A> {
        PhantomData
    }

    /// One marker per named parameter, to match each argument against.
    #[inline(always)]
    pub fn named(&self) -> <PhantomData<N> as FallbackSplit>::Parts
    where
        PhantomData<N>: FallbackSplit,
    {
        PhantomData::<N>.split()
    }

    /// The error, as the fallback's error parameter, `A` being the
    /// arguments named (for the message of a mismatch).
    #[inline(always)]
    pub fn error<A, E>(&self, _args: PhantomData<A>, error: E) -> X
    where
        E: FallbackErrorParam<X, N, A>,
    {
        error.into_error_param()
    }

    /// Calls the fallback with arguments and error of its own types.
    #[inline(always)]
    pub fn call<F: FallbackFn<N, X, M>>(&self, target: F, args: N, error: X) -> F::Output {
        target.call_fallback(args, error)
    }
}

/// A tuple's marker split into one marker per element.
#[doc(hidden)]
pub trait FallbackSplit {
    /// `(PhantomData<X0>, ..)`.
    type Parts;
    /// Splits it.
    fn split(self) -> Self::Parts;
}

/// A fn that can be called as a fallback with `Args`, and optionally the
/// error `E`; `M` tells the two apart. Implemented for every such fn; the
/// checks above match the arguments first.
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

macro_rules! fallback_params {
    ($($p:ident),*) => {
        impl<F, R, $($p),*> FallbackParams<($($p,)*)> for F
        where
            F: FnOnce($($p),*) -> R,
        {
            type List = ($($p,)*);
        }
    };
}

fallback_params!();
fallback_params!(P1);
fallback_params!(P1, P2);
fallback_params!(P1, P2, P3);
fallback_params!(P1, P2, P3, P4);
fallback_params!(P1, P2, P3, P4, P5);
fallback_params!(P1, P2, P3, P4, P5, P6);
fallback_params!(P1, P2, P3, P4, P5, P6, P7);
fallback_params!(P1, P2, P3, P4, P5, P6, P7, P8);
fallback_params!(P1, P2, P3, P4, P5, P6, P7, P8, P9);

macro_rules! fallback_arity {
    ($(($p:ident, $a:ident)),*) => {
        #[diagnostic::do_not_recommend]
        impl<E, $($p,)* $($a),*> FallbackArity<($($p,)*), E> for ($($a,)*) {
            type Fit = FallbackFit<($($p,)*), E, WithoutError>;
        }

        #[diagnostic::do_not_recommend]
        impl<E, PE, $($p,)* $($a),*> FallbackArity<($($p,)* PE,), E> for ($($a,)*) {
            type Fit = FallbackFit<($($p,)*), PE, WithError>;
        }

        impl<$($p),*> FallbackSplit for PhantomData<($($p,)*)> {
            type Parts = ($(PhantomData<$p>,)*);
            #[inline(always)]
            #[allow(clippy::unused_unit)]
            fn split(self) -> Self::Parts {
                ($(PhantomData::<$p>,)*)
            }
        }
    };
}

fallback_arity!();
fallback_arity!((P1, A1));
fallback_arity!((P1, A1), (P2, A2));
fallback_arity!((P1, A1), (P2, A2), (P3, A3));
fallback_arity!((P1, A1), (P2, A2), (P3, A3), (P4, A4));
fallback_arity!((P1, A1), (P2, A2), (P3, A3), (P4, A4), (P5, A5));
fallback_arity!((P1, A1), (P2, A2), (P3, A3), (P4, A4), (P5, A5), (P6, A6));
fallback_arity!(
    (P1, A1),
    (P2, A2),
    (P3, A3),
    (P4, A4),
    (P5, A5),
    (P6, A6),
    (P7, A7)
);
fallback_arity!(
    (P1, A1),
    (P2, A2),
    (P3, A3),
    (P4, A4),
    (P5, A5),
    (P6, A6),
    (P7, A7),
    (P8, A8)
);

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

/// What the fallback of a blocking fn may return: the annotated fn's
/// `Result<T, E>` (a blocking fn has nothing to await a future with).
#[diagnostic::on_unimplemented(
    message = "the fallback of a blocking fn returns `{Self}`, not the annotated fn's output",
    label = "the fallback of a blocking fn must return the annotated fn's output type `Result<{T}, {E}>`",
    note = "a blocking fn's fallback is a plain fn (not an `async fn`) with the annotated fn's return type"
)]
pub trait BlockingFallbackOutput<T, E> {
    /// The output as the fallback's answer.
    fn into_result(self) -> Result<T, E>;
}

impl<T, E> BlockingFallbackOutput<T, E> for Result<T, E> {
    #[inline]
    fn into_result(self) -> Result<T, E> {
        self
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
                | Error::BackendUnavailable { .. }
                | Error::Throttled { .. }
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
