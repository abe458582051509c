//! Spec types: what a `#[derive(..Spec)]` produces, and how calls are classified.
//!
//! A spec is a unit struct bound to an absolute config path. The derives
//! implement [`Spec`] and the mechanism's trait, and record the spec in a
//! link-time list ([`SpecEntry`]) so that the configuration of every spec in the
//! binary can be validated at startup without a hand-kept list.

use std::any::{Any, TypeId};
use std::fmt;
use std::time::Duration;

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
    /// The call failed: retry tries again after its computed delay.
    Failure,
    /// The call failed, and the outcome says how long to wait before trying
    /// again (a delay hint, such as HTTP's `Retry-After`). Retry waits this
    /// long instead of its computed delay, capped by `backoff.delay_max` and
    /// `max_hinted_delay` when they are set; a circuit breaker counts it as a
    /// [`Failure`](Verdict::Failure).
    RetryAfter(Duration),
    /// The outcome is none of the spec's business: retry returns it at once,
    /// unchanged, and uses no budget token.
    Ignore,
}

/// A type that decides which outcomes are failures, for the specs that name
/// it: implemented by every type that implements [`Classify`].
///
/// A spec declared with `classify = custom` is its own classifier, and its
/// derive implements this trait for it. A type shared by several specs
/// (`#[spec("..", classify = PetOutcomes)]`) declares itself with one line,
/// beside its [`Classify`] impls:
///
/// ```
/// use resilient_core::{Classifier, Classify, CircuitBreakerSpec, RetrySpec, Verdict};
///
/// /// What counts as a failed pet lookup, for retry and breaker alike.
/// pub struct PetOutcomes;
/// impl Classifier for PetOutcomes {}
///
/// impl Classify<u16, std::io::Error> for PetOutcomes {
///     fn classify(outcome: &Result<u16, std::io::Error>) -> Verdict {
///         match outcome {
///             Ok(status) if *status >= 500 => Verdict::Failure,
///             Ok(_) => Verdict::Success,
///             Err(_) => Verdict::Failure,
///         }
///     }
/// }
///
/// #[derive(RetrySpec)]
/// #[spec("resilient.retry.pet", classify = PetOutcomes)]
/// pub struct PetRetry;
///
/// #[derive(CircuitBreakerSpec)]
/// #[spec("resilient.circuitbreaker.pet", classify = PetOutcomes)]
/// pub struct PetBreaker;
/// ```
///
/// The declaration is what keeps a [`Classify`] impl from being ignored: a
/// spec without `classify = custom` is classified by another type, so an impl
/// of `Classify` for it would never be used, and is refused.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not declared as a classifier",
    label = "`Classify` needs `{Self}: resilient_core::Classifier`",
    note = "if `{Self}` is a spec, it is classified by its own `Classify` impls only when declared with `#[spec(\"..\", classify = custom)]`: add `classify = custom` to its `#[spec]` (without it every `Err` is a failure and this impl would never be used)",
    note = "if `{Self}` is a classifier shared by specs declared with `classify = {Self}`, declare it with `impl resilient_core::Classifier for {Self} {{}}`"
)]
pub trait Classifier {}

/// Which outcomes of calls returning `Result<T, E>` a spec treats as failures.
///
/// Implemented by a spec's classifier, which its derive chooses:
///
/// | `#[spec(..)]` | classifier |
/// |---|---|
/// | (nothing), `classify = all_errors` | [`AllErrors`]: every `Err` a failure, every `Ok` a success |
/// | `classify = custom` | the spec itself: you implement `Classify` for it |
/// | `classify = PetOutcomes` | the named type, shared by every spec that names it (see [`Classifier`]) |
/// | `classify = http` | [`http::Http`](crate::http::Http): 5xx, 408 and 429 responses are failures, `Retry-After` the delay hint |
///
/// You write one implementation for each result type the spec is used with,
/// and the compiler checks that there is one wherever the spec is used:
///
/// ```
/// use std::time::Duration;
/// use resilient_core::{Classify, RetrySpec, Verdict};
///
/// pub struct Response { pub status: u16, pub retry_after_secs: Option<u64> }
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
///             // The server says when to come back: a delay hint.
///             Ok(Response { status: 429, retry_after_secs: Some(secs) }) => {
///                 Verdict::RetryAfter(Duration::from_secs(*secs))
///             }
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
    label = "no `Classify<{T}, {E}>` for this spec's classifier",
    note = "`{Self}` classifies the outcomes of the specs that name it (a spec declared with `classify = custom` names itself): implement `resilient_core::Classify<{T}, {E}>` for `{Self}`, or drop the spec's `classify` option to treat every `Err` as a failure"
)]
pub trait Classify<T, E>: Classifier {
    /// How `outcome` counts.
    fn classify(outcome: &Result<T, E>) -> Verdict;

    /// What [`Error::RetryExhausted`](crate::Error::RetryExhausted) keeps of
    /// a returned value that [`classify`](Classify::classify) called a
    /// failure, when it is the last outcome before retry gives up: nothing by
    /// default. Return `Some(Box::new(value))` to make it reachable through
    /// [`FailedValue::value`](crate::FailedValue::value) (the HTTP classifier
    /// keeps the last failed response this way).
    fn keep_failed_value(value: T) -> Option<Box<dyn Any + Send + Sync>> {
        drop(value);
        None
    }
}

/// The default classifier: every `Err` is a failure, every `Ok` a success.
///
/// Used by every spec declared without a `classify` option (or with
/// `classify = all_errors`).
#[derive(Debug, Clone, Copy)]
pub struct AllErrors;

impl Classifier for AllErrors {}

impl<T, E> Classify<T, E> for AllErrors {
    #[inline]
    fn classify(outcome: &Result<T, E>) -> Verdict {
        match outcome {
            Ok(_) => Verdict::Success,
            Err(_) => Verdict::Failure,
        }
    }
}
