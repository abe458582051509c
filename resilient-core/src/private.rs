//! Items the macros' generated code names. Not a public API: anything here may
//! change in any release.

use std::any::TypeId;
use std::future::Future;

pub use inventory;

pub use crate::circuit_breaker::{BreakerOps, CircuitBreakerSpec};
pub use crate::concurrency::ConcurrencyLimitSpec;
pub use crate::error::Error;
pub use crate::fallback::{FallbackFn, FallbackOn, FallbackOutput};
pub use crate::http::Http;
pub use crate::outcome::Fail;
pub use crate::rate_limiter::RateLimiterSpec;
pub use crate::retry::{Exhaustion, OpsOf, RetryOps, RetrySpec, ReturnError, ReturnLastFailure};
pub use crate::spec::{AllErrors, Classifier, Classify, Spec, SpecEntry, SpecKind, Verdict};
pub use crate::timeout::TimeoutSpec;

/// The retry operations of spec `S` for a fn returning `R`: where
/// `#[retryable(S)]` states every requirement, each once, on a type the user
/// wrote. Later requirements go through projections of earlier ones, so when
/// one fails the rest involve an error type and are not reported.
pub fn retry_ops<S, R>() -> OpsOf<S, R::Ok, R::Err>
where
    S: RetrySpec,
    R: ResultType,
    R::Err: Exhaustion<S::Exhausted>,
    S::Classifier: Classify<R::Ok, R::Err>,
{
    crate::retry::ops::<S, R::Ok, R::Err>()
}

/// Runs `f` under the retry operations `ops`; no bound here can fail for a
/// body whose type matches the fn, so nothing is reported twice.
pub async fn retry<T, E, Tr, F, Fut>(ops: RetryOps<T, E, Tr>, f: F) -> Result<T, Fail<E>>
where
    Tr: Default,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Fail<E>>>,
{
    match crate::registry::lookup_retry(ops.name, ops.path, ops.type_id) {
        Ok(instance) => crate::retry::run(&ops, &instance, f).await,
        Err(e) => Err(Fail::Resilience(e)),
    }
}

/// The breaker operations of spec `S` for a fn returning `R`; see
/// [`retry_ops`].
pub fn breaker_ops<S, R>() -> BreakerOps<R::Ok, R::Err>
where
    S: CircuitBreakerSpec,
    R: ResultType,
    S::Classifier: Classify<R::Ok, R::Err>,
{
    crate::circuit_breaker::ops::<S, R::Ok, R::Err>()
}

/// Runs `f` through the breaker of `ops`.
pub async fn circuit_breaker<T, E, F, Fut>(ops: BreakerOps<T, E>, f: F) -> Result<T, Fail<E>>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<T, Fail<E>>>,
{
    match crate::registry::lookup_breaker(ops.name, ops.path, ops.type_id) {
        Ok(breaker) => crate::circuit_breaker::run(&ops, &breaker, f).await,
        Err(e) => Err(Fail::Resilience(e)),
    }
}

/// Where a spec without classification lives: its name, path and type.
#[derive(Debug, Clone, Copy)]
pub struct SpecRef {
    name: &'static str,
    path: &'static str,
    type_id: TypeId,
}

fn spec_ref<S: Spec>() -> SpecRef {
    SpecRef {
        name: S::NAME,
        path: S::PATH,
        type_id: TypeId::of::<S>(),
    }
}

/// The timeout spec `S`, checked where the user named it.
pub fn timeout_spec<S: TimeoutSpec>() -> SpecRef {
    spec_ref::<S>()
}

/// The concurrency limit spec `S`, checked where the user named it.
pub fn concurrency_spec<S: ConcurrencyLimitSpec>() -> SpecRef {
    spec_ref::<S>()
}

/// The rate limiter spec `S`, checked where the user named it.
pub fn rate_spec<S: RateLimiterSpec>() -> SpecRef {
    spec_ref::<S>()
}

/// Runs `f` under the timeout spec `spec`.
pub async fn timeout<T, E, F, Fut>(spec: SpecRef, f: F) -> Result<T, Fail<E>>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<T, Fail<E>>>,
{
    match crate::registry::lookup_timeout(spec.name, spec.path, spec.type_id) {
        Ok(t) => crate::timeout::run(spec.name, &t, f).await,
        Err(e) => Err(Fail::Resilience(e)),
    }
}

/// Runs `f` holding a place of the concurrency limit spec `spec`.
pub async fn concurrency_limit<T, E, F, Fut>(spec: SpecRef, f: F) -> Result<T, Fail<E>>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<T, Fail<E>>>,
{
    match crate::registry::lookup_concurrency(spec.name, spec.path, spec.type_id) {
        Ok(l) => crate::concurrency::run(spec.name, &l, f).await,
        Err(e) => Err(Fail::Resilience(e)),
    }
}

/// Runs `f` with a permit of the rate limiter spec `spec`.
pub async fn rate_limited<T, E, F, Fut>(spec: SpecRef, f: F) -> Result<T, Fail<E>>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<T, Fail<E>>>,
{
    match crate::registry::lookup_rate(spec.name, spec.path, spec.type_id) {
        Ok(r) => crate::rate_limiter::run(spec.name, &r, f).await,
        Err(e) => Err(Fail::Resilience(e)),
    }
}

/// Runs `f`; on a failure `on` accepts, answers with `g(error)`; what
/// `#[fallback]` expands to.
pub async fn fallback<T, E, F, Fut, G, X, M>(
    fn_name: &'static str,
    on: FallbackOn<E>,
    wrap: fn(Error) -> E,
    f: F,
    g: G,
) -> Result<T, Fail<E>>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<T, Fail<E>>>,
    G: FnOnce(E) -> X,
    X: FallbackOutput<T, E, M>,
{
    crate::fallback::run(fn_name, on, wrap, f, |e| g(e).into_fallback_future()).await
}

/// Calls the fallback `target` with `args`, and the error if it takes it.
#[inline]
pub fn fallback_call<Target, Args, E, M>(target: Target, args: Args, error: E) -> Target::Output
where
    Target: FallbackFn<Args, E, M>,
{
    target.call_fallback(args, error)
}

/// The body's outcome (of the fn's return type `R`), entering the chain.
#[inline]
pub fn body<R: ResultType>(outcome: R) -> Result<R::Ok, Fail<R::Err>> {
    outcome.into_result().map_err(Fail::Body)
}

/// How a resilience error becomes the error of a fn returning `R`. Checked
/// apart from the chain, so that a missing `From` impl is reported once, at
/// the return type.
#[inline]
pub fn error_wrap<R>() -> fn(Error) -> R::Err
where
    R: ResultType,
    R::Err: ResilientError,
{
    <R::Err as ResilientError>::from_resilient
}

/// The chain's outcome, leaving it: a resilience error becomes the fn's error
/// through `wrap`.
#[inline]
pub fn finish<T, E>(outcome: Result<T, Fail<E>>, wrap: fn(Error) -> E) -> Result<T, E> {
    outcome.map_err(|fail| fail.into_error(wrap))
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
}

impl<T, E> ResultType for Result<T, E> {
    type Ok = T;
    type Err = E;
    #[inline]
    fn into_result(self) -> Self {
        self
    }
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

/// An argument a fallback gets a clone of.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be passed to the fallback",
    label = "this argument is not `Clone`",
    note = "the fallback gets clones of the arguments named in `method = \"..\"`: implement `Clone` for `{Self}`, take it by shared reference, or leave it out of `method`"
)]
pub trait FallbackArg: Clone {}

impl<T: Clone> FallbackArg for T {}

/// A clone of an argument, for the fallback.
pub fn fallback_arg<T: FallbackArg>(arg: &T) -> T {
    arg.clone()
}

/// A fresh clone of an argument, for one attempt.
pub fn clone_arg<T: RetryArg>(arg: &T) -> T {
    arg.clone()
}
