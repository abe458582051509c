//! Compile-pass and compile-fail tests of resilient's macros; see `tests/ui.rs`.
//!
//! The cases share the spec and error types below.

/// A retry spec shared by the cases.
#[derive(resilient_core::RetrySpec)]
#[spec("ui.retry")]
pub struct UiRetry;

/// An error type that can carry a resilience failure.
#[derive(Debug, thiserror::Error)]
pub enum UiError {
    /// The body failed.
    #[error("failed")]
    Failed,
    /// A resilience mechanism ended the call.
    #[error(transparent)]
    Resilience(#[from] resilient_core::Error),
}
