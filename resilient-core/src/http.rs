//! Classification of HTTP responses: `#[spec("..", classify = http)]`.
//!
//! An HTTP client returns `Ok(response)` for a 503: the request reached the
//! server, and the failure is in the status. A spec declared with
//! `classify = http` is classified by [`Http`]:
//!
//! | outcome | verdict |
//! |---|---|
//! | `Err(_)` (the request did not complete) | failure |
//! | a 5xx, 408 (Request Timeout) or 429 (Too Many Requests) response | failure; with a valid `Retry-After` header, [`Verdict::RetryAfter`] its wait |
//! | any other status | success |
//!
//! `Retry-After` is read in both of its forms, seconds (`Retry-After: 2`) and
//! an HTTP-date (`Retry-After: Fri, 07 Nov 2025 08:49:37 GMT`, a wait until
//! then; a date in the past is no wait). Retry waits the hint instead of its
//! computed delay, capped by `backoff.delay_max` and `max_hinted_delay` (see
//! [`retry`](crate::retry#delay-hints)).
//!
//! Its failures' [`Cause`]: a 429, and a 503 with a `Retry-After` header, are
//! [`Cause::Throttled`]; every other failure is [`Cause::Transient`] (a retry
//! spec's `cause.<cause>` tables give each its own delay and budget cost).
//!
//! When retry gives up with [`Error::RetryExhausted`](crate::Error), the
//! last failed response is kept in its
//! [`FailedValue`](crate::FailedValue), so that the status, headers and body
//! the server sent last are not lost.
//!
//! The response types come from cargo features of `resilient-core`:
//!
//! | feature | response type |
//! |---|---|
//! | `http` | [`http::Response<B>`](https://docs.rs/http/1/http/response/struct.Response.html) (hyper, axum, and clients built on them) |
//! | `reqwest` | [`reqwest::Response`](https://docs.rs/reqwest/0.13/reqwest/struct.Response.html) of reqwest 0.13 |
//! | `reqwest-0-12` | [`reqwest::Response`](https://docs.rs/reqwest/0.12/reqwest/struct.Response.html) of reqwest 0.12 |
//!
//! Both reqwest features imply `http`, and they can be enabled together (an
//! application whose dependencies use both reqwest versions).
//!
//! Another client's response type can implement [`HttpResponse`].
//!
//! ```
//! # #[cfg(feature = "http")] mod demo {
//! use resilient_core::{retryable, RetrySpec};
//!
//! #[derive(RetrySpec)]
//! #[spec("resilient.retry.pet", classify = http)]
//! pub struct PetRetry;
//!
//! #[derive(Debug, thiserror::Error)]
//! pub enum PetError {
//!     #[error("pet store unreachable")]
//!     Unreachable,
//!     #[error(transparent)]
//!     Resilience(#[from] resilient_core::Error),
//! }
//!
//! /// A 503 answer is retried; the last one is kept if retry gives up.
//! #[retryable(PetRetry)]
//! pub async fn find(id: u64) -> Result<http::Response<String>, PetError> {
//!     # let _ = PetError::Unreachable;
//!     Ok(http::Response::new(format!("pet {id}")))
//! }
//! # }
//! ```

use std::any::Any;
use std::time::{Duration, SystemTime};

use crate::error::{Error, Kept};
use crate::spec::{Cause, Classifier, Classify, Verdict};

/// The classifier of specs declared with `classify = http`; see the
/// [module docs](self).
#[derive(Debug, Clone, Copy)]
pub struct Http;

impl Classifier for Http {}

impl<R: HttpResponse, E> Classify<R, E> for Http {
    fn classify(outcome: &Result<R, E>) -> Verdict {
        let response = match outcome {
            Ok(response) => response,
            Err(_) => return Verdict::Failure,
        };
        if !is_failure(response.status()) {
            return Verdict::Success;
        }
        response
            .header("retry-after")
            .and_then(|value| parse_retry_after(value, SystemTime::now()))
            .map_or(Verdict::Failure, Verdict::RetryAfter)
    }

    fn keep_failed_value(value: R) -> Option<Box<dyn Any + Send + Sync>> {
        // By value: a response need not be `Sync` (axum's body is not).
        Some(Box::new(Kept(value)))
    }

    fn status(value: &R) -> Option<u16> {
        Some(value.status())
    }

    /// 429, and 503 with a `Retry-After`: the server asked the caller to
    /// slow down. Every other failure is transient.
    fn cause(outcome: &Result<R, E>) -> Cause {
        match outcome {
            Ok(response) => match response.status() {
                429 => Cause::Throttled,
                503 if response.header("retry-after").is_some() => Cause::Throttled,
                _ => Cause::Transient,
            },
            Err(_) => Cause::Transient,
        }
    }
}

/// The statuses [`Http`] counts as failures: every 5xx, 408 and 429.
fn is_failure(status: u16) -> bool {
    matches!(status, 500..=599 | 408 | 429)
}

/// A response that [`Http`] can classify: its status and its headers.
///
/// Implemented for `http::Response<B>` with the `http` feature, for
/// `reqwest::Response` of reqwest 0.13 with the `reqwest` feature and for
/// `reqwest::Response` of reqwest 0.12 with the `reqwest-0-12` feature (the
/// orphan rule keeps an application from implementing it for reqwest's type
/// itself). `Send + 'static` so that the last failed response can be kept
/// in [`Error::RetryExhausted`] (reached by value through
/// [`FailedValue::into_value`](crate::FailedValue::into_value), and by
/// reference too when it is `Sync`).
#[diagnostic::on_unimplemented(
    message = "`classify = http` cannot classify `{Self}`",
    label = "not an HTTP response that `resilient_core::http::Http` knows",
    note = "a spec declared with `classify = http` classifies fns returning `Result<http::Response<B>, E>` (enable the `http` feature of `resilient-core`) or `Result<reqwest::Response, E>` (reqwest 0.13: enable its `reqwest` feature; reqwest 0.12: enable its `reqwest-0-12` feature)",
    note = "for another response type, implement `resilient_core::http::HttpResponse` for it, or classify it yourself with `classify = custom`"
)]
pub trait HttpResponse: Send + 'static {
    /// The status code (`503`).
    fn status(&self) -> u16;

    /// The value of the first header named `name` (lower case), if any.
    fn header(&self, name: &str) -> Option<&[u8]>;
}

/// The wait a `Retry-After` header value asks for, as of `now`: seconds
/// (`"2"`) or an HTTP-date (`"Fri, 07 Nov 2025 08:49:37 GMT"`, and the two
/// obsolete date forms HTTP recipients must accept). `None` when the value is
/// neither.
///
/// A date at or before `now` is no wait; a number of seconds too large for a
/// [`Duration`] saturates (retry caps it anyway).
///
/// ```
/// use std::time::{Duration, SystemTime, UNIX_EPOCH};
/// use resilient_core::http::parse_retry_after;
///
/// let now = UNIX_EPOCH + Duration::from_secs(784_111_775); // 06 Nov 1994 08:49:35 GMT
/// assert_eq!(parse_retry_after(b"120", now), Some(Duration::from_secs(120)));
/// assert_eq!(
///     parse_retry_after(b"Sun, 06 Nov 1994 08:49:37 GMT", now),
///     Some(Duration::from_secs(2)),
/// );
/// assert_eq!(parse_retry_after(b"soon", now), None);
/// # let _ = SystemTime::now();
/// ```
pub fn parse_retry_after(value: &[u8], now: SystemTime) -> Option<Duration> {
    let value = std::str::from_utf8(value).ok()?.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Digits only: `parse` can fail on overflow alone.
        return Some(value.parse().map_or(Duration::MAX, Duration::from_secs));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(feature = "http")]
impl<B: Send + 'static> HttpResponse for ::http::Response<B> {
    fn status(&self) -> u16 {
        self.status().as_u16()
    }

    fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers().get(name).map(::http::HeaderValue::as_bytes)
    }
}

// Both reqwest versions build on `http` 1.x: their header values are
// `http::HeaderValue`.
#[cfg(feature = "reqwest")]
impl HttpResponse for ::reqwest::Response {
    fn status(&self) -> u16 {
        self.status().as_u16()
    }

    fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers().get(name).map(::http::HeaderValue::as_bytes)
    }
}

#[cfg(feature = "reqwest-0-12")]
impl HttpResponse for ::reqwest012::Response {
    fn status(&self) -> u16 {
        self.status().as_u16()
    }

    fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers().get(name).map(::http::HeaderValue::as_bytes)
    }
}

/// The status a server answers a request that a resilience mechanism
/// refused, and the wait it tells the client, if known (for `Retry-After`):
///
/// | error | status | `Retry-After` |
/// |---|---|---|
/// | [`RateLimitExceeded`](Error::RateLimitExceeded) | 429 Too Many Requests | until a permit is free |
/// | [`CallNotPermitted`](Error::CallNotPermitted) (a breaker open, or half-open and full) | 503 Service Unavailable | the rest of the open wait, when open |
/// | [`ConcurrencyLimitReached`](Error::ConcurrencyLimitReached) | 503 Service Unavailable | (not known) |
/// | [`BackendUnavailable`](Error::BackendUnavailable) (a shared limit whose backend is down, `on_backend_failure = "deny"`) | 503 Service Unavailable | (not known: no limit was reached, and nothing says when the backend answers) |
/// | [`Throttled`](Error::Throttled) (adaptive throttling refused the first call: the dependency is failing) | 503 Service Unavailable | (not known: refusals stop as the dependency accepts again) |
/// | [`Timeout`](Error::Timeout) | 504 Gateway Timeout | |
/// | [`RetryExhausted`](Error::RetryExhausted), [`Injected`](Error::Injected) (the dependency failed) | 502 Bad Gateway | |
/// | [`NotConfigured`](Error::NotConfigured) | 500 Internal Server Error | |
///
/// ```
/// use resilient_core::http::rejection_status;
/// use resilient_core::Error;
/// use std::time::Duration;
///
/// let limited = Error::RateLimitExceeded { spec: "SearchRate", retry_after: Duration::from_millis(1500) };
/// assert_eq!(rejection_status(&limited), (429, Some(Duration::from_millis(1500))));
/// ```
pub fn rejection_status(error: &Error) -> (u16, Option<Duration>) {
    match error {
        Error::RateLimitExceeded { retry_after, .. } => (429, Some(*retry_after)),
        Error::CallNotPermitted { retry_after, .. } => (503, *retry_after),
        // The server's dependency is failing and this server refuses for
        // it, as an open breaker does: 503. Not 429, which tells a client
        // that it sent too many requests; a refusal here is no fault of its
        // rate, and one that slows down changes nothing.
        Error::ConcurrencyLimitReached { .. }
        | Error::BackendUnavailable { .. }
        | Error::Throttled { .. } => (503, None),
        Error::Timeout { .. } => (504, None),
        Error::RetryExhausted(_) | Error::Injected { .. } => (502, None),
        Error::NotConfigured { .. } => (500, None),
    }
}

/// The response a server answers a request that a resilience mechanism
/// refused: the status and `Retry-After` (in whole seconds, rounded up) of
/// [`rejection_status`], and an empty body. What the tower layers'
/// [`RespondLayer`](crate::layer::RespondLayer) and, with the `axum`
/// feature, `Error`'s `IntoResponse` answer (the latter with a body for
/// [`NotConfigured`](Error::NotConfigured) that says what is missing).
///
/// ```
/// use resilient_core::http::rejection_response;
/// use resilient_core::Error;
/// use std::time::Duration;
///
/// let open = Error::CallNotPermitted {
///     spec: "PetBreaker",
///     state: resilient_core::circuit_breaker::State::Open,
///     retry_after: Some(Duration::from_millis(2300)),
/// };
/// let response: http::Response<String> = rejection_response(&open);
/// assert_eq!(response.status(), 503);
/// assert_eq!(response.headers()["retry-after"], "3");
/// ```
#[cfg(feature = "http")]
pub fn rejection_response<B: Default>(error: &Error) -> ::http::Response<B> {
    let (status, retry_after) = rejection_status(error);
    let mut response = ::http::Response::new(B::default());
    *response.status_mut() =
        ::http::StatusCode::from_u16(status).unwrap_or(::http::StatusCode::INTERNAL_SERVER_ERROR);
    if let Some(wait) = retry_after {
        let seconds = wait
            .as_secs()
            .saturating_add(u64::from(wait.subsec_nanos() > 0));
        response.headers_mut().insert(
            ::http::header::RETRY_AFTER,
            ::http::HeaderValue::from(seconds),
        );
    }
    response
}

/// A handler's error answers as [`rejection_response`]: a handler that
/// returns `Result<_, E>` where `E`'s `IntoResponse` hands a resilience
/// error to this one answers 429, 503 or 504 with `Retry-After` when known.
///
/// [`Error::NotConfigured`] is the application's own mistake, not the
/// client's or a dependency's: its 500 says in a `text/plain` body what
/// is missing (the error's message: the spec's type and config path, and
/// whether to call `resilient_config::init` or to build the registry with
/// the spec), so that the first request after a deploy that forgot it
/// tells what to fix. Both names come from the code, never from the
/// configuration, so the body holds no setting's value. The other answers
/// keep an empty body.
///
/// A rejection by a spec's reqwest-middleware middleware reaches a handler
/// inside a `reqwest_middleware::Error`; `Error::try_from` takes it out
/// (feature `reqwest-middleware`, see `resilient_core::layer::middleware`),
/// so that `E` keeps it as its resilience error and answers it here,
/// rather than as a failed upstream.
#[cfg(feature = "axum")]
impl axum_core::response::IntoResponse for Error {
    fn into_response(self) -> axum_core::response::Response {
        let mut response = rejection_response(&self);
        if let Error::NotConfigured { .. } = self {
            response.headers_mut().insert(
                ::http::header::CONTENT_TYPE,
                ::http::HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            *response.body_mut() = axum_core::body::Body::from(self.to_string());
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    /// 06 Nov 1994 08:49:37 GMT, the date of RFC 9110's examples.
    fn rfc_date() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(784_111_777)
    }

    fn at(secs_before: u64) -> SystemTime {
        rfc_date() - Duration::from_secs(secs_before)
    }

    #[test]
    fn seconds_are_a_wait_of_that_many_seconds() {
        assert_eq!(parse_retry_after(b"0", at(0)), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after(b" 7 ", at(0)),
            Some(Duration::from_secs(7))
        );
    }

    #[test]
    fn seconds_too_large_for_a_duration_saturate() {
        let huge = b"99999999999999999999999999";
        assert_eq!(parse_retry_after(huge, at(0)), Some(Duration::MAX));
    }

    #[test]
    fn each_http_date_form_is_a_wait_until_then() {
        let forms: [&[u8]; 3] = [
            b"Sun, 06 Nov 1994 08:49:37 GMT",
            b"Sunday, 06-Nov-94 08:49:37 GMT",
            b"Sun Nov  6 08:49:37 1994",
        ];
        for form in forms {
            assert_eq!(
                parse_retry_after(form, at(5)),
                Some(Duration::from_secs(5)),
                "{}",
                String::from_utf8_lossy(form)
            );
        }
    }

    /// A response of `status`, with a `Retry-After` of one second or none.
    struct Fake(u16, bool);

    impl HttpResponse for Fake {
        fn status(&self) -> u16 {
            self.0
        }
        fn header(&self, name: &str) -> Option<&[u8]> {
            (self.1 && name == "retry-after").then_some(b"1".as_slice())
        }
    }

    fn cause(status: u16, retry_after: bool) -> Cause {
        <Http as Classify<Fake, ()>>::cause(&Ok(Fake(status, retry_after)))
    }

    #[test]
    fn a_429_and_a_503_that_asks_for_a_wait_are_throttled() {
        assert_eq!(cause(429, false), Cause::Throttled);
        assert_eq!(cause(429, true), Cause::Throttled);
        assert_eq!(cause(503, true), Cause::Throttled);
        assert_eq!(cause(503, false), Cause::Transient);
        assert_eq!(cause(500, true), Cause::Transient);
        assert_eq!(cause(408, false), Cause::Transient);
        assert_eq!(
            <Http as Classify<Fake, ()>>::cause(&Err(())),
            Cause::Transient
        );
    }

    #[test]
    fn a_date_in_the_past_is_no_wait() {
        let later = rfc_date() + Duration::from_secs(60);
        let value = b"Sun, 06 Nov 1994 08:49:37 GMT";
        assert_eq!(parse_retry_after(value, later), Some(Duration::ZERO));
    }

    #[test]
    fn anything_else_is_no_hint() {
        for value in [&b""[..], b"-1", b"1.5", b"soon", b"\xff"] {
            assert_eq!(parse_retry_after(value, at(0)), None);
        }
    }

    #[test]
    fn failure_statuses_are_5xx_408_and_429() {
        let failures: Vec<u16> = (100..=599).filter(|s| is_failure(*s)).collect();
        let mut expected = vec![408, 429];
        expected.extend(500..=599);
        assert_eq!(failures, expected);
    }
}
