//! Outcomes inside a chain of resilience layers.
//!
//! Between the layers of one annotated fn, a failure is either the body's own
//! error or a resilience mechanism's [`Error`], kept apart so that each layer
//! can treat the two differently (a retry placed outside a circuit breaker
//! must not retry the breaker's rejection) without asking anything of the
//! user's error type. The outermost layer turns a resilience error into the
//! fn's error type.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::error::Error;

/// A failure inside a chain: the body's error, or a resilience error.
#[derive(Debug)]
pub enum Fail<E> {
    /// The body's own error.
    Body(E),
    /// A resilience mechanism ended the call.
    Resilience(Error),
}

impl<E> Fail<E> {
    /// The fn's error: the body's as is, a resilience error through `wrap`.
    pub fn into_error(self, wrap: impl FnOnce(Error) -> E) -> E {
        match self {
            Fail::Body(e) => e,
            Fail::Resilience(e) => wrap(e),
        }
    }
}

/// Classifies one outcome: the body's by the spec's classification, a
/// resilience error by `on_resilience`. Takes the outcome by value so that the
/// spec's classification sees a plain `&Result<T, E>`. `V` is what they
/// answer: a [`Verdict`](crate::Verdict), or a failure's [`Cause`](crate::Cause).
#[inline(always)]
pub(crate) fn classify<T, E, V>(
    outcome: Result<T, Fail<E>>,
    classify: impl Fn(&Result<T, E>) -> V,
    on_resilience: impl FnOnce(&Error) -> V,
) -> (Result<T, Fail<E>>, V) {
    let plain: Result<T, E> = match outcome {
        Ok(v) => Ok(v),
        Err(Fail::Body(e)) => Err(e),
        Err(Fail::Resilience(e)) => {
            let verdict = on_resilience(&e);
            return (Err(Fail::Resilience(e)), verdict);
        }
    };
    let verdict = classify(&plain);
    (plain.map_err(Fail::Body), verdict)
}

/// A call's outcome as the innermost step of a chain: its error is the
/// body's. What the handles' `call` methods run.
pub(crate) fn lifted<F: Future>(call: F) -> Lifted<F> {
    Lifted { call }
}

pin_project_lite::pin_project! {
    /// [`lifted`]'s future: a named type, so that a handle's call does not
    /// nest one more state machine per layer.
    pub(crate) struct Lifted<F> {
        #[pin]
        call: F,
    }
}

pin_project_lite::pin_project! {
    /// A chain's outcome as a handle's `call` returns it: a resilience error
    /// becomes the caller's `E` through its `From<Error>`. Named, so that a
    /// handle's `call` is no state machine of its own around its layer's.
    pub(crate) struct Lowered<F, E> {
        #[pin]
        chain: F,
        error: PhantomData<fn() -> E>,
    }
}

/// [`Lowered`] around `chain`.
pub(crate) fn lowered<F, E>(chain: F) -> Lowered<F, E> {
    Lowered {
        chain,
        error: PhantomData,
    }
}

impl<F, T, E> Future for Lowered<F, E>
where
    F: Future<Output = Result<T, Fail<E>>>,
    E: From<Error>,
{
    type Output = Result<T, E>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project()
            .chain
            .poll(cx)
            .map(|r| r.map_err(|fail| fail.into_error(E::from)))
    }
}

impl<F, T, E> Future for Lifted<F>
where
    F: Future<Output = Result<T, E>>,
{
    type Output = Result<T, Fail<E>>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().call.poll(cx).map(|r| r.map_err(Fail::Body))
    }
}

/// The return type of an annotated fn.
#[diagnostic::on_unimplemented(
    message = "a resilient fn must return `Result<_, _>`, not `{Self}`",
    label = "expected `Result<_, _>`",
    note = "resilience attributes report failures through the fn's error type: return `Result<T, E>` where `E: From<resilient_core::Error>`"
)]
pub trait ResultType {
    /// The success type.
    type Ok;
    /// The error type.
    type Err;
    /// The value as a `Result`.
    fn into_result(self) -> Result<Self::Ok, Self::Err>;
    /// The value from a `Result`.
    fn from_result(result: Result<Self::Ok, Self::Err>) -> Self;
}

impl<T, E> ResultType for Result<T, E> {
    type Ok = T;
    type Err = E;
    #[inline]
    fn into_result(self) -> Self {
        self
    }
    #[inline]
    fn from_result(result: Self) -> Self {
        result
    }
}
