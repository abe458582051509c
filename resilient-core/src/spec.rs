//! Spec types: what a `#[derive(..Spec)]` produces, and how calls are classified.
//!
//! A spec is a unit struct bound to an absolute config path. The derives
//! implement [`Spec`] and the mechanism's trait, and record the spec in a
//! link-time list ([`SpecEntry`]) so that the configuration of every spec in the
//! binary can be validated at startup without a hand-kept list.

use std::any::TypeId;
use std::fmt;

/// The mechanism a spec configures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SpecKind {
    /// `#[derive(RetrySpec)]`, used by `#[retryable]`.
    Retry,
    /// `#[derive(CircuitBreakerSpec)]`, used by `#[circuit_breakable]`.
    CircuitBreaker,
    /// `#[derive(TimeoutSpec)]`, used by `#[timeout]`.
    Timeout,
    /// `#[derive(ConcurrencyLimitSpec)]`, used by `#[concurrency_limit]`.
    ConcurrencyLimit,
    /// `#[derive(RateLimiterSpec)]`, used by `#[rate_limited]`.
    RateLimiter,
}

impl fmt::Display for SpecKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SpecKind::Retry => "retry",
            SpecKind::CircuitBreaker => "circuit breaker",
            SpecKind::Timeout => "timeout",
            SpecKind::ConcurrencyLimit => "concurrency limit",
            SpecKind::RateLimiter => "rate limiter",
        })
    }
}

/// A type bound to a config path by a spec derive.
///
/// Implemented by the derives; not meant to be implemented by hand.
pub trait Spec: 'static {
    /// The type's name, used in errors and telemetry (`PetRetry`).
    const NAME: &'static str;
    /// The absolute config path of the spec's section (`resilient.retry.pet`).
    const PATH: &'static str;
    /// The mechanism the spec configures.
    const KIND: SpecKind;
}

/// One spec linked into the binary, as recorded by its derive.
#[derive(Debug)]
pub struct SpecEntry {
    /// The spec type's name.
    pub name: &'static str,
    /// The spec's absolute config path.
    pub path: &'static str,
    /// The mechanism the spec configures.
    pub kind: SpecKind,
    /// The spec type's [`TypeId`], behind a fn because `TypeId::of` is not
    /// callable in a static.
    pub type_id: fn() -> TypeId,
}

inventory::collect!(SpecEntry);

impl SpecEntry {
    /// The entry for spec type `S`.
    pub fn of<S: Spec>() -> Self {
        Self {
            name: S::NAME,
            path: S::PATH,
            kind: S::KIND,
            type_id: TypeId::of::<S>,
        }
    }

    /// Every spec linked into this binary, in no particular order.
    pub fn all() -> impl Iterator<Item = &'static SpecEntry> {
        inventory::iter::<SpecEntry>.into_iter()
    }
}

/// How a call's outcome counts for a spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The call succeeded.
    Success,
    /// The call failed: retry tries again.
    Failure,
    /// The outcome is none of the spec's business: retry returns it at once,
    /// unchanged, and uses no budget token.
    Ignore,
}

/// Which outcomes of calls returning `Result<T, E>` a spec treats as failures.
///
/// By default a spec derive implements this for every `T` and `E`, with every
/// `Err` a failure and every `Ok` a success. A spec declared with
/// `#[spec("..", classify = custom)]` gets no implementation; you write one for
/// each result type the spec is used with, and the compiler checks that there
/// is one wherever the spec is used:
///
/// ```
/// use resilient_core::{Classify, RetrySpec, Verdict};
///
/// pub struct Response { pub status: u16 }
/// #[derive(Debug)]
/// pub enum HttpError { Timeout, InvalidUrl }
///
/// #[derive(RetrySpec)]
/// #[spec("resilient.retry.http", classify = custom)]
/// pub struct HttpRetry;
///
/// impl Classify<Response, HttpError> for HttpRetry {
///     fn classify(outcome: &Result<Response, HttpError>) -> Verdict {
///         match outcome {
///             // A 5xx arrives as a value, not as an error: still a failure.
///             Ok(response) if response.status >= 500 => Verdict::Failure,
///             Ok(_) => Verdict::Success,
///             Err(HttpError::Timeout) => Verdict::Failure,
///             // Retrying cannot fix a bad URL: pass it through unchanged.
///             Err(HttpError::InvalidUrl) => Verdict::Ignore,
///         }
///     }
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` does not classify `Result<{T}, {E}>`",
    label = "no `Classify<{T}, {E}>` for this spec",
    note = "`{Self}` is declared with `classify = custom`: implement `resilient_core::Classify<{T}, {E}>` for `{Self}`, or drop `classify = custom` to treat every `Err` as a failure"
)]
pub trait Classify<T, E> {
    /// How `outcome` counts.
    fn classify(outcome: &Result<T, E>) -> Verdict;
}
