//! Items the macros' generated code names. Not a public API: anything here may
//! change in any release.

use std::future::Future;

pub use inventory;

pub use crate::error::Error;
pub use crate::retry::{Exhaustion, RetrySpec, ReturnError, ReturnLastFailure};
pub use crate::spec::{Classify, Spec, SpecEntry, SpecKind, Verdict};

/// Runs `f` under retry spec `S`; what `#[retryable(S)]` expands to. `R` is
/// the annotated fn's return type.
///
/// Each requirement is stated once, on a type the user wrote, and the later
/// ones go through projections of the earlier ones: when one fails, the others
/// involve an error type and are not reported, so one mistake gives one error.
pub async fn retry<S, R, F, Fut>(f: F) -> Result<R::Ok, R::Err>
where
    S: RetrySpec,
    R: ResultType,
    R::Err: ResilientError + Exhaustion<S::Exhausted>,
    S::Classifier: Classify<R::Ok, R::Err>,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<R::Ok, R::Err>>,
{
    match S::get() {
        Ok(handle) => {
            crate::retry::run::<S, _, _, _, _>(handle.inner(), f, ResilientError::from_resilient)
                .await
        }
        Err(e) => Err(R::Err::from_resilient(e)),
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
}

impl<T, E> ResultType for Result<T, E> {
    type Ok = T;
    type Err = E;
}

/// An error type that can carry a resilience failure.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot carry a resilience failure",
    label = "`{Self}` does not implement `From<resilient_core::Error>`",
    note = "add a variant for it, for example `#[error(transparent)] Resilience(#[from] resilient_core::Error)` with thiserror"
)]
pub trait ResilientError {
    /// `From::from`, without making `From<Error>` a supertrait (which would
    /// report a missing impl twice).
    fn from_resilient(e: Error) -> Self;
}

impl<E: From<Error>> ResilientError for E {
    fn from_resilient(e: Error) -> Self {
        E::from(e)
    }
}

/// An argument that retry passes again to each attempt.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be passed to the body again on retry",
    label = "this argument is not `Clone`",
    note = "`#[retryable]` runs the body once per attempt with a fresh clone of each owned argument: implement `Clone` for `{Self}`, or take it by shared reference (`&{Self}`)"
)]
pub trait RetryArg: Clone {}

impl<T: Clone> RetryArg for T {}

/// A fresh clone of an argument, for one attempt.
pub fn clone_arg<T: RetryArg>(arg: &T) -> T {
    arg.clone()
}
