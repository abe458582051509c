//! What a call returns when retry gives up.

use std::collections::VecDeque;

use crate::error::{BoxError, Error, FailedValue, GaveUp};

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
/// `thiserror` type and `anyhow::Error` do.
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

/// An exhaustion mode for calls returning `Result<T, E>`: [`ReturnError`] or
/// [`ReturnLastFailure`]. Not meant to be implemented outside this crate.
#[diagnostic::on_unimplemented(
    message = "a retry spec that gives up with `resilient_core::Error::RetryExhausted` cannot keep `{E}` as the source",
    label = "`{E}` does not convert into `Box<dyn std::error::Error + Send + Sync>`",
    note = "implement `std::error::Error` for `{E}` (for example with `thiserror`), or declare the spec with `#[spec(\"..\", exhausted = last_failure)]` to give up with the last failure unchanged"
)]
pub trait Exhaustion<T, E> {
    /// What the mode keeps of the failures before the last.
    type Trail: Default + Send;

    /// Keeps (or drops) a failure that will be retried.
    fn keep(trail: &mut Self::Trail, spec: &'static str, failure: Result<T, E>);

    /// The outcome of a call that gave up after `calls` calls.
    fn give_up(
        trail: Self::Trail,
        spec: &'static str,
        calls: u32,
        reason: GaveUp,
        last: Result<T, E>,
    ) -> Result<T, E>;
}

fn boxed<T, E: Into<BoxError>>(spec: &'static str, failure: Result<T, E>) -> BoxError {
    match failure {
        Ok(_) => Box::new(FailedValue { spec }),
        Err(e) => e.into(),
    }
}

impl<T, E> Exhaustion<T, E> for ReturnError
where
    E: From<Error> + Into<BoxError>,
{
    type Trail = VecDeque<BoxError>;

    fn keep(trail: &mut Self::Trail, spec: &'static str, failure: Result<T, E>) {
        if trail.len() == RETRY_TRAIL_MAX {
            trail.pop_front();
        }
        trail.push_back(boxed(spec, failure));
    }

    fn give_up(
        trail: Self::Trail,
        spec: &'static str,
        calls: u32,
        reason: GaveUp,
        last: Result<T, E>,
    ) -> Result<T, E> {
        Err(E::from(Error::RetryExhausted {
            spec,
            calls,
            reason,
            last: boxed(spec, last),
            earlier: trail.into(),
        }))
    }
}

impl<T, E> Exhaustion<T, E> for ReturnLastFailure {
    type Trail = ();

    fn keep(_: &mut (), _: &'static str, _: Result<T, E>) {}

    fn give_up(_: (), _: &'static str, _: u32, _: GaveUp, last: Result<T, E>) -> Result<T, E> {
        last
    }
}
