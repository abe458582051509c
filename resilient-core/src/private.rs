//! Items the macros' generated code names. Not a public API: anything here may
//! change in any release.

use std::future::Future;

pub use inventory;

pub use crate::error::Error;
pub use crate::retry::{Exhaustion, RetrySpec, ReturnError, ReturnLastFailure};
pub use crate::spec::{Classify, Spec, SpecEntry, SpecKind, Verdict};

/// Runs `f` under retry spec `S`; what `#[retryable(S)]` expands to.
pub async fn retry<S, T, E, F, Fut>(f: F) -> Result<T, E>
where
    S: RetrySpec + Classify<T, E>,
    S::Exhausted: Exhaustion<T, E>,
    E: From<Error>,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    match S::get() {
        Ok(handle) => handle.call(f).await,
        Err(e) => Err(E::from(e)),
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
pub trait ResilientError: From<Error> {}

impl<E: From<Error>> ResilientError for E {}

/// Checks, at the return type's tokens, that it is a `Result` whose error can
/// carry a resilience failure.
pub const fn assert_return<R>()
where
    R: ResultType,
    R::Err: ResilientError,
{
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
