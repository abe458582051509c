//! What a module that declares and uses specs needs, in one import:
//!
//! ```
//! use resilient_core::prelude::*;
//!
//! #[derive(RetrySpec)]
//! #[spec("resilient.retry.pet")]
//! pub struct PetRetry;
//!
//! #[derive(Debug, thiserror::Error)]
//! pub enum PetError {
//!     #[error("pet store unavailable")]
//!     Unavailable,
//!     #[error(transparent)]
//!     Resilience(#[from] resilient_core::Error),
//! }
//!
//! #[retryable(PetRetry)]
//! pub async fn find(id: u64) -> Result<String, PetError> {
//!     # let _ = PetError::Unavailable;
//!     Ok(format!("pet {id}"))
//! }
//!
//! // A spec's handle, its name and path, without importing its trait.
//! fn attempts() -> Option<u32> {
//!     let retry = PetRetry::get().ok()?;
//!     # let _ = (PetRetry::NAME, PetRetry::PATH);
//!     Some(retry.settings().attempts)
//! }
//! # let _ = attempts;
//! ```
//!
//! It holds three things, and nothing else:
//!
//! - the spec derives, each with the trait of the same name that it
//!   implements (`RetrySpec`: the derive for `#[derive(RetrySpec)]`, the
//!   trait for `PetRetry::get()` and a breaker's `for_key`);
//! - the attribute macros (`#[retryable]`, `#[circuit_breakable]`,
//!   `#[timeout]`, `#[concurrency_limit]`, `#[rate_limited]`,
//!   `#[fallback]`, `#[chaos]`, `#[hedged]`);
//! - traits whose only use is their methods on spec types, imported
//!   anonymously (`as _`), so that they take no name in your module:
//!   [`Spec`](crate::Spec) (`PetRetry::NAME`, `PetRetry::PATH`), and with
//!   the `tower` feature `layer::Layered` (`PetBreaker::layer()`), with
//!   the `reqwest-middleware` feature `layer::middleware::Middlewares`
//!   (`PetBreaker::middleware()`).
//!
//! No types: `Error`, `Registry` or `Verdict` under a glob would take
//! names that other crates' preludes and your own modules use too
//! (`Error` above all), so they are imported, or written out, by name.
//! The attributes `#[timeout]`, `#[chaos]` and `#[fallback]` come without
//! the modules of the same name ([`timeout`](mod@crate::timeout) and the
//! others are reached through `resilient_core::`).

pub use crate::{
    ChaosSpec, CircuitBreakerSpec, ConcurrencyLimitSpec, HedgingSpec, RateLimiterSpec, RetrySpec,
    TimeoutSpec,
};

pub use crate::{circuit_breakable, concurrency_limit, hedged, rate_limited, retryable};
// From the macro crate: at `crate::` these names are modules too.
pub use resilient_macros::{chaos, fallback, timeout};

pub use crate::Spec as _;

#[cfg(feature = "tower")]
pub use crate::layer::Layered as _;

#[cfg(feature = "reqwest-middleware")]
pub use crate::layer::middleware::Middlewares as _;
