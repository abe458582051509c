//! Classification of gRPC outcomes: `#[spec("..", classify = grpc)]`
//! (feature `grpc`), and the gRPC answers of a server's layers.
//!
//! A gRPC call fails with a [`tonic::Status`] whose code says whether trying
//! again can help. A spec declared with `classify = grpc` is classified by
//! [`Grpc`], which follows gRPC's own retry policy (gRFC A6): only the
//! codes a retry policy lists as retryable are retried, and a server's
//! `grpc-retry-pushback-ms` overrides the computed delay.
//!
//! | code | circuit breaker | retry |
//! |---|---|---|
//! | `OK` (an `Ok` value) | success | done |
//! | `UNAVAILABLE` | failure | retried after the computed delay; with `grpc-retry-pushback-ms`, after that many milliseconds ([`Verdict::RetryAfter`]) |
//! | `RESOURCE_EXHAUSTED` | failure | retried only after a valid `grpc-retry-pushback-ms`; without one, not retried ([`Verdict::Fatal`]) |
//! | `DEADLINE_EXCEEDED` | failure | not retried ([`Verdict::Fatal`]) |
//! | `UNKNOWN`, `INTERNAL`, `DATA_LOSS` | failure | not retried ([`Verdict::Fatal`]) |
//! | `INVALID_ARGUMENT`, `NOT_FOUND`, `ALREADY_EXISTS`, `PERMISSION_DENIED`, `UNAUTHENTICATED`, `FAILED_PRECONDITION`, `OUT_OF_RANGE`, `UNIMPLEMENTED` | ignored | not retried ([`Verdict::Ignore`]) |
//! | `CANCELLED`, `ABORTED` | ignored | not retried ([`Verdict::Ignore`]) |
//!
//! A `grpc-retry-pushback-ms` that is negative or not an integer means
//! "do not retry" (gRFC A6): the failure is then [`Verdict::Fatal`] whatever
//! its code. A valid one is waited instead of the computed delay, capped by
//! `backoff.delay_max` and `max_hinted_delay` (see
//! [`retry`](crate::retry#delay-hints)).
//!
//! Why these verdicts:
//!
//! - `UNAVAILABLE` is the one code gRPC calls safe to retry: the server did
//!   not process the call (it was down, draining, or refused it).
//! - `RESOURCE_EXHAUSTED` can be a quota that resets tomorrow or a limit
//!   full for a few milliseconds: only the server knows, so only its
//!   pushback makes it a retry. It is still a failure for a breaker.
//! - `DEADLINE_EXCEEDED`: the call's deadline covers every attempt, so an
//!   attempt after it has passed cannot be in time, and the server may have
//!   done the work (gRPC's default policy retries no code it is not told
//!   to). A slow dependency is still a failure for a breaker. A spec that
//!   wants to retry it classifies with `classify = custom` and
//!   [`classify_status`] for the other codes.
//! - `UNKNOWN`, `INTERNAL`, `DATA_LOSS`: the server broke, after doing who
//!   knows what: a failure of the dependency, not safe to repeat.
//! - The caller's errors (`INVALID_ARGUMENT` and the others in that row)
//!   say nothing of the server's health and would fail again: passed
//!   through at once, counted neither way. So are `CANCELLED` (the caller
//!   cancelled) and `ABORTED` (a conflict the application resolves at a
//!   higher level, such as a transaction to run again).
//!
//! The result types [`Grpc`] classifies:
//!
//! | result | where |
//! |---|---|
//! | `Result<T, tonic::Status>` (`T` is anything, such as `tonic::Response<Pet>`: every `Ok` is a success) | an annotated fn calling a tonic client |
//! | `Result<http::Response<B>, BoxError>`: the code from the `grpc-status` header | a layer on a tonic channel (`map_err(BoxError::from)` below it) or on a tonic server ([`RespondLayer::grpc`](crate::layer::RespondLayer::grpc)) |
//!
//! On a layer the response's headers are all there is when the layer
//! decides: a call that fails at once (a *trailers-only* response, what a
//! server that refuses or fails a unary call sends, and what
//! [`rejection_response`] answers) carries `grpc-status` there and is
//! classified by it; a response whose status comes in the trailers after
//! its messages counts as a success there. An `Err` on a layer (the
//! connection failed) is a failure. For the verdict of every call, put the
//! specs on the fn that calls the typed client instead: it sees the final
//! [`tonic::Status`].
//!
//! ```
//! # mod demo {
//! use resilient_core::{circuit_breakable, retryable, CircuitBreakerSpec, RetrySpec};
//!
//! #[derive(RetrySpec)]
//! #[spec("resilient.retry.greeter", classify = grpc)]
//! pub struct GreeterRetry;
//!
//! #[derive(CircuitBreakerSpec)]
//! #[spec("resilient.circuitbreaker.greeter", classify = grpc)]
//! pub struct GreeterBreaker;
//!
//! /// `UNAVAILABLE` is retried, `INVALID_ARGUMENT` returned at once; a
//! /// rejection by the breaker or retry's giving up reaches the caller as
//! /// a `Status` too (see `From<resilient_core::Error> for Status`).
//! #[circuit_breakable(GreeterBreaker)]
//! #[retryable(GreeterRetry)]
//! pub async fn greet(name: String) -> Result<tonic::Response<String>, tonic::Status> {
//!     Ok(tonic::Response::new(format!("hello {name}")))
//! }
//! # }
//! ```
//!
//! A fn whose error is not a `tonic::Status` is refused where the spec is
//! used, with a message that says so:
//!
//! ```compile_fail
//! # use resilient_core::{retryable, RetrySpec};
//! #[derive(RetrySpec)]
//! #[spec("resilient.retry.greeter", classify = grpc)]
//! pub struct GreeterRetry;
//!
//! #[derive(Debug, thiserror::Error)]
//! #[error("io")]
//! pub struct IoError(#[from] resilient_core::Error);
//!
//! #[retryable(GreeterRetry)] // error: `classify = grpc` cannot classify `Result<String, IoError>`
//! pub async fn greet() -> Result<String, IoError> { Ok(String::new()) }
//! ```

use std::sync::Arc;
use std::time::Duration;

use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Code, Status};

use crate::error::{BoxError, Error};
use crate::spec::{Classifier, Classify, Verdict};

/// The metadata key of a server's delay hint (gRFC A6): the milliseconds
/// to wait before the next attempt, or a negative number for none.
pub const PUSHBACK: &str = "grpc-retry-pushback-ms";

/// The classifier of specs declared with `classify = grpc`; see the
/// [module docs](self).
#[derive(Debug, Clone, Copy)]
pub struct Grpc;

impl Classifier for Grpc {}

impl<T, E: GrpcResult<T>> Classify<T, E> for Grpc {
    #[inline]
    fn classify(outcome: &Result<T, E>) -> Verdict {
        E::verdict(outcome)
    }

    fn status(value: &T) -> Option<u16> {
        E::code(value).map(|code| code as u16)
    }
}

/// A result that [`Grpc`] can classify, by its error type: `Result<T,
/// tonic::Status>`, and `Result<http::Response<B>, BoxError>` on a layer.
#[diagnostic::on_unimplemented(
    message = "`classify = grpc` cannot classify `Result<{T}, {Self}>`",
    label = "the error of a fn classified by `classify = grpc` must be `tonic::Status`",
    note = "`classify = grpc` reads the gRPC code of a `tonic::Status`: return `Result<T, tonic::Status>` (a resilience error reaches the caller as a `Status` through `From<resilient_core::Error>`), or on a tower layer `Result<http::Response<B>, resilient_core::BoxError>`",
    note = "for another error type, classify it yourself with `classify = custom` (`resilient_core::grpc::classify_status` gives the verdict of a `Status`)"
)]
pub trait GrpcResult<T>: Sized {
    /// How `outcome` counts.
    fn verdict(outcome: &Result<T, Self>) -> Verdict;

    /// The gRPC code of a value [`verdict`](GrpcResult::verdict) called a
    /// failure, for retry's log lines.
    fn code(value: &T) -> Option<Code> {
        let _ = value;
        None
    }
}

impl<T> GrpcResult<T> for Status {
    #[inline]
    fn verdict(outcome: &Result<T, Status>) -> Verdict {
        match outcome {
            Ok(_) => Verdict::Success,
            Err(status) => classify_status(status),
        }
    }
}

impl<B> GrpcResult<http::Response<B>> for BoxError {
    #[inline]
    fn verdict(outcome: &Result<http::Response<B>, BoxError>) -> Verdict {
        match outcome {
            Ok(response) => match response.headers().get("grpc-status") {
                // The status is in the trailers, after the messages.
                None => Verdict::Success,
                Some(code) => verdict(
                    Code::from_bytes(code.as_bytes()),
                    response.headers().get(PUSHBACK).map(|v| v.as_bytes()),
                ),
            },
            Err(error) => match error.downcast_ref::<Status>() {
                Some(status) => classify_status(status),
                // The connection failed, or the channel could not send.
                None => Verdict::Failure,
            },
        }
    }

    fn code(value: &http::Response<B>) -> Option<Code> {
        let code = value.headers().get("grpc-status")?;
        Some(Code::from_bytes(code.as_bytes()))
    }
}

/// The verdict of a `Status` by the [module's table](self): its code, and
/// its `grpc-retry-pushback-ms` metadata.
///
/// ```
/// use std::time::Duration;
/// use resilient_core::grpc::classify_status;
/// use resilient_core::Verdict;
///
/// let mut busy = tonic::Status::unavailable("draining");
/// assert_eq!(classify_status(&busy), Verdict::Failure);
/// busy.metadata_mut().insert("grpc-retry-pushback-ms", "250".parse().unwrap());
/// assert_eq!(classify_status(&busy), Verdict::RetryAfter(Duration::from_millis(250)));
/// busy.metadata_mut().insert("grpc-retry-pushback-ms", "-1".parse().unwrap());
/// assert_eq!(classify_status(&busy), Verdict::Fatal);
/// assert_eq!(classify_status(&tonic::Status::not_found("pet 7")), Verdict::Ignore);
/// ```
pub fn classify_status(status: &Status) -> Verdict {
    verdict(
        status.code(),
        status.metadata().get(PUSHBACK).map(|v| v.as_bytes()),
    )
}

/// The verdict of `code` with the pushback value the server sent, if any.
fn verdict(code: Code, pushback: Option<&[u8]>) -> Verdict {
    match code {
        Code::Ok => Verdict::Success,
        Code::Unavailable => match pushback {
            None => Verdict::Failure,
            Some(value) => parse_pushback(value).map_or(Verdict::Fatal, Verdict::RetryAfter),
        },
        Code::ResourceExhausted => pushback
            .and_then(parse_pushback)
            .map_or(Verdict::Fatal, Verdict::RetryAfter),
        Code::DeadlineExceeded | Code::Unknown | Code::Internal | Code::DataLoss => Verdict::Fatal,
        Code::Cancelled
        | Code::InvalidArgument
        | Code::NotFound
        | Code::AlreadyExists
        | Code::PermissionDenied
        | Code::FailedPrecondition
        | Code::Aborted
        | Code::OutOfRange
        | Code::Unimplemented
        | Code::Unauthenticated => Verdict::Ignore,
    }
}

/// The wait a `grpc-retry-pushback-ms` value asks for: a non-negative
/// integer of milliseconds (saturating, for one too large for a
/// [`Duration`]). `None` for a negative or unparsable value, which gRPC
/// reads as "do not retry".
///
/// ```
/// use std::time::Duration;
/// use resilient_core::grpc::parse_pushback;
///
/// assert_eq!(parse_pushback(b"50"), Some(Duration::from_millis(50)));
/// assert_eq!(parse_pushback(b"-1"), None);
/// assert_eq!(parse_pushback(b"soon"), None);
/// ```
pub fn parse_pushback(value: &[u8]) -> Option<Duration> {
    let value = value.trim_ascii();
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    // Digits only: the sum can only overflow, and saturates.
    let millis = value.iter().fold(0u64, |n, digit| {
        n.saturating_mul(10).saturating_add(u64::from(digit - b'0'))
    });
    Some(Duration::from_millis(millis))
}

/// The gRPC code a server answers a request that a resilience mechanism
/// refused, and the wait it tells the client in `grpc-retry-pushback-ms`,
/// if known (the HTTP statuses of
/// [`http::rejection_status`](crate::http::rejection_status), as gRPC maps
/// HTTP statuses to codes):
///
/// | error | code | pushback |
/// |---|---|---|
/// | [`RateLimitExceeded`](Error::RateLimitExceeded) | `RESOURCE_EXHAUSTED` | until a permit is free |
/// | [`CallNotPermitted`](Error::CallNotPermitted) (a breaker open, or half-open and full) | `UNAVAILABLE` | the rest of the open wait, when open |
/// | [`ConcurrencyLimitReached`](Error::ConcurrencyLimitReached), [`BackendUnavailable`](Error::BackendUnavailable), [`Throttled`](Error::Throttled) | `UNAVAILABLE` | (not known: the client's backoff) |
/// | [`Timeout`](Error::Timeout) | `DEADLINE_EXCEEDED` | |
/// | [`RetryExhausted`](Error::RetryExhausted), [`Injected`](Error::Injected) (the dependency failed) | `UNAVAILABLE` | |
/// | [`NotConfigured`](Error::NotConfigured) | `INTERNAL` | |
///
/// A full concurrency limit answers `UNAVAILABLE`, not
/// `RESOURCE_EXHAUSTED`: with no wait to tell, a `RESOURCE_EXHAUSTED` would
/// not be retried by a client that follows gRPC's policy (see the module's
/// table), while a place may be free in milliseconds.
pub fn rejection_status(error: &Error) -> (Code, Option<Duration>) {
    match error {
        Error::RateLimitExceeded { retry_after, .. } => {
            (Code::ResourceExhausted, Some(*retry_after))
        }
        Error::CallNotPermitted { retry_after, .. } => (Code::Unavailable, *retry_after),
        Error::ConcurrencyLimitReached { .. }
        | Error::BackendUnavailable { .. }
        | Error::Throttled { .. } => (Code::Unavailable, None),
        Error::Timeout { .. } => (Code::DeadlineExceeded, None),
        Error::RetryExhausted(_) | Error::Injected { .. } => (Code::Unavailable, None),
        Error::NotConfigured { .. } => (Code::Internal, None),
    }
}

/// The metadata of a rejection: its pushback in whole milliseconds,
/// rounded up, when the wait is known.
fn rejection_metadata(wait: Option<Duration>) -> MetadataMap {
    let mut metadata = MetadataMap::new();
    if let Some(wait) = wait {
        let millis = wait
            .as_millis()
            .saturating_add(u128::from(wait.subsec_nanos() % 1_000_000 > 0));
        let millis = u64::try_from(millis).unwrap_or(u64::MAX);
        metadata.insert(PUSHBACK, MetadataValue::from(millis));
    }
    metadata
}

/// A resilience error as the `Status` of the call it ended, so that an
/// annotated fn returning `Result<T, tonic::Status>` reports it as tonic's
/// own calls do: the code and pushback of [`rejection_status`], the
/// error's message, and the error itself as the status's
/// [`source`](std::error::Error::source) (find it with
/// `status.source().and_then(|e| e.downcast_ref::<resilient_core::Error>())`,
/// to tell a rejection or retry's giving up from the server's answer).
impl From<Error> for Status {
    fn from(error: Error) -> Status {
        let (code, wait) = rejection_status(&error);
        let mut status = Status::with_metadata(code, error.to_string(), rejection_metadata(wait));
        status.set_source(Arc::new(error));
        status
    }
}

/// A tonic channel's error with a layer's rejection in it made the
/// `Status` that `From<resilient_core::Error>` makes of it, which a tonic
/// client then reports as is (it reports any other error of its channel as
/// `UNKNOWN`). For `map_err` above the layers on a channel:
///
/// ```
/// use resilient_core::layer::Layered;
/// use resilient_core::{BoxError, CircuitBreakerSpec};
///
/// #[derive(CircuitBreakerSpec)]
/// #[spec("resilient.circuitbreaker.greeter", classify = grpc)]
/// pub struct GreeterBreaker;
///
/// # let channel = tower::service_fn(|_: http::Request<tonic::body::Body>| async {
/// #     Ok::<_, std::io::Error>(http::Response::new(tonic::body::Body::empty()))
/// # });
/// // `channel`: a `tonic::transport::Channel`.
/// let layered = tower::ServiceBuilder::new()
///     .map_err(resilient_core::grpc::status_error)
///     .layer(GreeterBreaker::layer())
///     .map_err(BoxError::from)
///     .service(channel);
/// // Then the generated client's `new(layered)`.
/// # fn is_service<S: tower::Service<http::Request<tonic::body::Body>, Error = BoxError>>(_: &S) {}
/// # is_service(&layered);
/// ```
pub fn status_error(error: BoxError) -> BoxError {
    match error.downcast::<Error>() {
        Ok(rejection) => Box::new(Status::from(*rejection)),
        Err(other) => other,
    }
}

/// The response a gRPC server answers a request that a resilience
/// mechanism refused: a trailers-only response (HTTP 200,
/// `content-type: application/grpc`, no message) whose `grpc-status`,
/// `grpc-message` and `grpc-retry-pushback-ms` headers are
/// [`rejection_status`]'s and the error's message. What
/// [`RespondLayer::grpc`](crate::layer::RespondLayer::grpc) answers.
///
/// ```
/// use resilient_core::grpc::rejection_response;
/// use resilient_core::Error;
/// use std::time::Duration;
///
/// let limited = Error::RateLimitExceeded { spec: "SearchRate", retry_after: Duration::from_millis(1500) };
/// let response: http::Response<String> = rejection_response(&limited);
/// assert_eq!(response.status(), 200);
/// assert_eq!(response.headers()["grpc-status"], "8"); // RESOURCE_EXHAUSTED
/// assert_eq!(response.headers()["grpc-retry-pushback-ms"], "1500");
/// ```
pub fn rejection_response<B: Default>(error: &Error) -> http::Response<B> {
    let (code, wait) = rejection_status(error);
    let status = Status::with_metadata(code, error.to_string(), rejection_metadata(wait));
    status_response(&status)
}

/// `status` as a trailers-only response.
pub(crate) fn status_response<B: Default>(status: &Status) -> http::Response<B> {
    let mut response = http::Response::new(B::default());
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    if status.add_header(response.headers_mut()).is_err() {
        // A message that cannot be a header value (it is percent-encoded,
        // so this is not expected): the code alone still tells the client.
        response
            .headers_mut()
            .insert("grpc-status", http::HeaderValue::from(status.code() as i32));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Code; 17] = [
        Code::Ok,
        Code::Cancelled,
        Code::Unknown,
        Code::InvalidArgument,
        Code::DeadlineExceeded,
        Code::NotFound,
        Code::AlreadyExists,
        Code::PermissionDenied,
        Code::ResourceExhausted,
        Code::FailedPrecondition,
        Code::Aborted,
        Code::OutOfRange,
        Code::Unimplemented,
        Code::Internal,
        Code::Unavailable,
        Code::DataLoss,
        Code::Unauthenticated,
    ];

    #[test]
    fn only_unavailable_is_retried_without_pushback() {
        let retried: Vec<Code> = ALL
            .into_iter()
            .filter(|c| verdict(*c, None) == Verdict::Failure)
            .collect();
        assert_eq!(retried, [Code::Unavailable]);
    }

    #[test]
    fn the_breaker_counts_server_failures_only() {
        let failures: Vec<Code> = ALL
            .into_iter()
            .filter(|c| matches!(verdict(*c, None), Verdict::Failure | Verdict::Fatal))
            .collect();
        assert_eq!(
            failures,
            [
                Code::Unknown,
                Code::DeadlineExceeded,
                Code::ResourceExhausted,
                Code::Internal,
                Code::Unavailable,
                Code::DataLoss,
            ]
        );
    }

    #[test]
    fn pushback_is_a_wait_for_the_retryable_codes_only() {
        let wait = Some(Duration::from_millis(50));
        let hinted: Vec<Code> = ALL
            .into_iter()
            .filter(|c| verdict(*c, Some(b"50")) == Verdict::RetryAfter(Duration::from_millis(50)))
            .collect();
        assert_eq!(hinted, [Code::ResourceExhausted, Code::Unavailable]);
        assert_eq!(parse_pushback(b"50"), wait);
    }

    #[test]
    fn negative_or_unparsable_pushback_stops_retrying() {
        for value in [&b"-1"[..], b"-50", b"", b"1.5", b"soon", b"\xff", b"+5"] {
            assert_eq!(parse_pushback(value), None);
            assert_eq!(verdict(Code::Unavailable, Some(value)), Verdict::Fatal);
            assert_eq!(
                verdict(Code::ResourceExhausted, Some(value)),
                Verdict::Fatal
            );
        }
    }

    #[test]
    fn pushback_too_large_for_a_duration_saturates() {
        assert_eq!(
            parse_pushback(b"99999999999999999999999999"),
            Some(Duration::from_millis(u64::MAX))
        );
        assert_eq!(parse_pushback(b" 0 "), Some(Duration::ZERO));
    }

    #[test]
    fn a_layer_reads_the_code_of_a_trailers_only_response() {
        let busy: http::Response<()> = http::Response::builder()
            .header("grpc-status", "14")
            .header(PUSHBACK, "20")
            .body(())
            .unwrap_or_default();
        let outcome: Result<_, BoxError> = Ok(busy);
        assert_eq!(
            <BoxError as GrpcResult<_>>::verdict(&outcome),
            Verdict::RetryAfter(Duration::from_millis(20))
        );
        let streaming: Result<http::Response<()>, BoxError> = Ok(http::Response::new(()));
        assert_eq!(
            <BoxError as GrpcResult<_>>::verdict(&streaming),
            Verdict::Success
        );
        let refused: Result<http::Response<()>, BoxError> = Err("connection refused".into());
        assert_eq!(
            <BoxError as GrpcResult<_>>::verdict(&refused),
            Verdict::Failure
        );
    }

    #[test]
    fn a_rejection_tells_its_wait_in_whole_milliseconds_rounded_up() {
        let limited = Error::RateLimitExceeded {
            spec: "Rate",
            retry_after: Duration::from_micros(1_500),
        };
        let status = Status::from(limited);
        assert_eq!(status.code(), Code::ResourceExhausted);
        assert_eq!(
            status.metadata().get(PUSHBACK).map(|v| v.as_bytes()),
            Some(&b"2"[..])
        );
        let answered = std::error::Error::source(&status)
            .and_then(|e| e.downcast_ref::<Error>())
            .is_some();
        assert!(answered, "the error is the status's source");
        // What the client's classifier makes of it: a retry after the wait.
        assert_eq!(
            classify_status(&status),
            Verdict::RetryAfter(Duration::from_millis(2))
        );
    }
}
