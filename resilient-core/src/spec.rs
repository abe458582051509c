//! The words every part of the crate shares about specs: which mechanism a
//! spec configures ([`SpecKind`]), and how a call's outcome counts for it
//! ([`Verdict`], [`Classify`]).
//!
//! What a spec is to the registry (the [`Spec`](crate::Spec) trait its
//! derive implements, and the link-time list of specs) lives with the
//! registry; each mechanism names its own kind.

use std::any::Any;
use std::fmt;
use std::time::Duration;

/// The mechanism a spec configures: a name for errors, logs, metrics and
/// the snapshot. Each mechanism declares its own (`SpecKind::RETRY`,
/// `SpecKind::CIRCUIT_BREAKER`, ...), so that nothing else in the crate
/// lists them.
///
/// ```
/// use resilient_core::{RetrySpec, Spec, SpecKind};
///
/// #[derive(RetrySpec)]
/// #[spec("resilient.retry.pet")]
/// pub struct PetRetry;
///
/// assert_eq!(PetRetry::KIND, SpecKind::RETRY);
/// assert_eq!(PetRetry::KIND.label(), "retry");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SpecKind {
    label: &'static str,
    name: &'static str,
}

impl SpecKind {
    /// A kind with its `snake_case` label (metrics, the snapshot) and its
    /// name in words (messages). Each mechanism declares its own.
    pub(crate) const fn new(label: &'static str, name: &'static str) -> Self {
        Self { label, name }
    }

    /// The kind's `snake_case` label: the metrics' `kind` label, and the
    /// snapshot's `kind` (`"circuit_breaker"`).
    pub const fn label(self) -> &'static str {
        self.label
    }
}

impl fmt::Display for SpecKind {
    /// The kind in words (`circuit breaker`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

impl fmt::Debug for SpecKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label)
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for SpecKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.label)
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
    /// The call failed, and no further attempt may follow it (gRPC's
    /// non-retryable failures, such as `DEADLINE_EXCEEDED`, or a server's
    /// `grpc-retry-pushback-ms` that says stop): retry returns it at once,
    /// unchanged (as it does a failure when `attempts = 0`), and counts it as
    /// a failure; a circuit breaker counts it as a
    /// [`Failure`](Verdict::Failure); hedging ends the call with it at once
    /// (gRPC's fatal status codes), counting it as a failed attempt.
    Fatal,
    /// The outcome is none of the spec's business: retry returns it at once,
    /// unchanged, and uses no budget token.
    Ignore,
}

/// Why an attempt failed, as retry sees it: a retry spec can give each cause
/// its own base delay and its own budget cost (its `cause.<name>` tables).
///
/// A classification names the cause of an outcome it calls a failure with
/// [`Classify::cause`]; every failure is [`Transient`](Cause::Transient)
/// unless it says otherwise. The built-in classifications name these:
///
/// | failure | cause |
/// |---|---|
/// | a response of status 429, or 503 with `Retry-After` (`classify = http`) | [`Throttled`](Cause::Throttled) |
/// | [`Error::RateLimitExceeded`](crate::Error::RateLimitExceeded) of a rate limiter inside the retry | [`Throttled`](Cause::Throttled) |
/// | [`Error::Timeout`](crate::Error::Timeout) of a timeout inside the retry | [`Timeout`](Cause::Timeout) |
/// | any other failure | [`Transient`](Cause::Transient) |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Cause {
    /// A failure that may pass by itself (a dropped connection, a 500): the
    /// default.
    #[default]
    Transient,
    /// The dependency refused the call because of load, and asked the caller
    /// to slow down (HTTP 429, a throttling error of a cloud API).
    Throttled,
    /// The attempt ran out of time.
    Timeout,
}

impl Cause {
    /// Every cause, in the order of their `index`.
    pub(crate) const ALL: [Cause; 3] = [Cause::Transient, Cause::Throttled, Cause::Timeout];

    /// The cause's name: its table's key in a retry spec (`cause.throttled`)
    /// and its value in log lines.
    pub const fn label(self) -> &'static str {
        match self {
            Cause::Transient => "transient",
            Cause::Throttled => "throttled",
            Cause::Timeout => "timeout",
        }
    }

    /// The cause's place in [`ALL`](Self::ALL).
    pub(crate) const fn index(self) -> usize {
        match self {
            Cause::Transient => 0,
            Cause::Throttled => 1,
            Cause::Timeout => 2,
        }
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
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
/// | `classify = grpc` (feature `grpc`) | `grpc::Grpc`: `tonic::Status` by gRPC's retry policy, `grpc-retry-pushback-ms` the delay hint (see the guide's `grpc` chapter) |
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

    /// The status code of a returned value that [`classify`](Classify::classify)
    /// called a failure, if it has one: retry's log lines show it (field
    /// `status`), so that a retried 503 reads as one. `None` by default; the
    /// HTTP classifier returns the response's status.
    fn status(value: &T) -> Option<u16> {
        let _ = value;
        None
    }

    /// Why an outcome that [`classify`](Classify::classify) called a failure
    /// failed: [`Cause::Transient`] by default. A retry spec waits and pays
    /// for a retry as its `cause.<name>` table for this cause says (see
    /// [`Cause`]); asked only of failures, and only by a spec that has such
    /// a table.
    fn cause(outcome: &Result<T, E>) -> Cause {
        let _ = outcome;
        Cause::Transient
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
