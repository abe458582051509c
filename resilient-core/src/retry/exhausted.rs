//! What a call returns when retry gives up.

use std::any::Any;
use std::collections::VecDeque;

use crate::error::{BoxError, Error, Exhausted, FailedValue, GaveUp};
use crate::outcome::Fail;

/// How many failures before the last one [`Error::RetryExhausted`] keeps.
/// A spec with a million attempts must not hold a million errors.
pub const RETRY_TRAIL_MAX: usize = 16;

/// Exhaustion mode of the default spec: give up with
/// [`Error::RetryExhausted`], which keeps the last failure as its source and
/// up to [`RETRY_TRAIL_MAX`] earlier ones.
///
/// The caller can always tell "retried and gave up" (this variant) from "failed
/// once and was not retryable" (the body's own error, unchanged). Needs the
/// body's error type to convert into a boxed `std::error::Error`, as every
/// `std::error::Error + Send + Sync + 'static` type does.
#[derive(Debug, Clone, Copy)]
pub enum ReturnError {}

/// Exhaustion mode of a spec declared with `exhausted = last_failure`: give up
/// with the last outcome exactly as the body returned it (Spring's behaviour).
///
/// Nothing is boxed. To tell exhaustion apart from a non-retryable failure,
/// classify the error yourself: a failure the spec retries comes back only
/// after retry gave up.
#[derive(Debug, Clone, Copy)]
pub enum ReturnLastFailure {}

/// An error type that retry can give up with under exhaustion mode `Mode`
/// ([`ReturnError`] or [`ReturnLastFailure`]). Implemented for every error
/// type that qualifies; not meant to be implemented by hand.
// Only `ReturnError` can be missing (`ReturnLastFailure` takes any error),
// so the message is that of `IntoBoxError`, for when rustc reports this bound.
#[diagnostic::on_unimplemented(
    message = "a retry spec that gives up with `resilient_core::Error::RetryExhausted` cannot keep `{Self}` as its source",
    label = "`{Self}` does not convert into `Box<dyn std::error::Error + Send + Sync>`",
    note = "implement `std::error::Error` for `{Self}` (for example with `thiserror`), or declare the spec with `#[spec(\"..\", exhausted = last_failure)]` to give up with the last failure unchanged"
)]
pub trait Exhaustion<Mode>: Sized {
    /// What the mode keeps of the failures before the last.
    type Trail: Default + Send;

    /// Keeps (or drops) a failure that will be retried.
    fn keep<T>(trail: &mut Self::Trail, spec: &'static str, failure: Result<T, Fail<Self>>);

    /// The outcome of a call that gave up after `calls` calls; `kept` says
    /// what the classification keeps of a failed value.
    fn give_up<T>(
        trail: Self::Trail,
        spec: &'static str,
        calls: u64,
        reason: GaveUp,
        last: Result<T, Fail<Self>>,
        kept: Kept<T>,
    ) -> Result<T, Fail<Self>>;

    /// The failure `keep` kept last, if the mode keeps failures: what a log
    /// line shows of a failure about to be retried.
    fn last_kept(trail: &Self::Trail) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        let _ = trail;
        None
    }
}

/// [`Exhaustion::last_kept`] of one mode.
pub(crate) type LastKept<Tr> = fn(&Tr) -> Option<&(dyn std::error::Error + Send + Sync + 'static)>;

/// What a classification keeps of a returned value it called a failure.
pub(crate) type KeepValue<T> = fn(T) -> Option<Box<dyn Any + Send + Sync>>;

/// What the classification keeps of the last failed value, and its status.
#[doc(hidden)]
#[derive(Debug)]
pub struct Kept<T> {
    keep: KeepValue<T>,
    status: Option<u16>,
}

impl<T> Kept<T> {
    pub(crate) fn new(keep: KeepValue<T>, status: Option<u16>) -> Self {
        Self { keep, status }
    }
}

fn boxed<T, E: Into<BoxError>>(
    spec: &'static str,
    failure: Result<T, Fail<E>>,
    kept: Option<Kept<T>>,
) -> BoxError {
    match failure {
        Ok(v) => {
            let (value, status) = match kept {
                Some(kept) => ((kept.keep)(v), kept.status),
                None => (None, None),
            };
            Box::new(FailedValue::new(spec, value, status))
        }
        Err(Fail::Body(e)) => e.into(),
        Err(Fail::Resilience(e)) => Box::new(e),
    }
}

/// An error that [`Error::RetryExhausted`] can keep as its source.
#[diagnostic::on_unimplemented(
    message = "a retry spec that gives up with `resilient_core::Error::RetryExhausted` cannot keep `{Self}` as its source",
    label = "`{Self}` does not convert into `Box<dyn std::error::Error + Send + Sync>`",
    note = "implement `std::error::Error` for `{Self}` (for example with `thiserror`), or declare the spec with `#[spec(\"..\", exhausted = last_failure)]` to give up with the last failure unchanged"
)]
pub trait IntoBoxError: Into<BoxError> {}

impl<E: Into<BoxError>> IntoBoxError for E {}

impl<E: IntoBoxError> Exhaustion<ReturnError> for E {
    type Trail = VecDeque<BoxError>;

    fn keep<T>(trail: &mut Self::Trail, spec: &'static str, failure: Result<T, Fail<E>>) {
        if trail.len() == RETRY_TRAIL_MAX {
            trail.pop_front();
        }
        // Earlier values are dropped: a kept response may hold a connection.
        trail.push_back(boxed(spec, failure, None));
    }

    fn give_up<T>(
        trail: Self::Trail,
        spec: &'static str,
        calls: u64,
        reason: GaveUp,
        last: Result<T, Fail<E>>,
        kept: Kept<T>,
    ) -> Result<T, Fail<E>> {
        Err(Fail::Resilience(Error::RetryExhausted(Box::new(
            Exhausted {
                spec,
                calls,
                reason,
                last: boxed(spec, last, Some(kept)),
                earlier: trail.into(),
            },
        ))))
    }

    fn last_kept(trail: &Self::Trail) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        trail.back().map(|e| &**e)
    }
}

impl<E> Exhaustion<ReturnLastFailure> for E {
    type Trail = ();

    fn keep<T>(_: &mut (), _: &'static str, _: Result<T, Fail<E>>) {}

    fn give_up<T>(
        _: (),
        _: &'static str,
        _: u64,
        _: GaveUp,
        last: Result<T, Fail<E>>,
        _: Kept<T>,
    ) -> Result<T, Fail<E>> {
        last
    }
}
