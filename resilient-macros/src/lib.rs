//! Attribute macros and spec derives for `resilient-core`.
//!
//! Use them through `resilient_core`, which re-exports them; the code they
//! generate names only `::resilient_core::__private`. This crate holds syntax,
//! diagnostics and code generation only: parsing lives in `args` and
//! `spec_derive`, the chain model in `chain`, generation in `expand` and one
//! file per mechanism under `layer`.

mod args;
mod chain;
mod diag;
mod expand;
mod layer;
mod spec_derive;

use proc_macro::TokenStream;

/// Retries an `async fn` under a retry spec. See `resilient_core::retryable`.
#[proc_macro_attribute]
pub fn retryable(attr: TokenStream, item: TokenStream) -> TokenStream {
    chain::expand(chain::Kind::Retry, attr.into(), item.into()).into()
}

/// Runs an `async fn` through a circuit breaker. See
/// `resilient_core::circuit_breakable`.
#[proc_macro_attribute]
pub fn circuit_breakable(attr: TokenStream, item: TokenStream) -> TokenStream {
    chain::expand(chain::Kind::CircuitBreaker, attr.into(), item.into()).into()
}

/// Declares a circuit breaker spec. See `resilient_core::CircuitBreakerSpec`.
#[proc_macro_derive(CircuitBreakerSpec, attributes(spec))]
pub fn derive_circuit_breaker_spec(input: TokenStream) -> TokenStream {
    spec_derive::expand(spec_derive::SpecKind::CircuitBreaker, input.into()).into()
}

/// Declares a retry spec. See `resilient_core::RetrySpec`.
#[proc_macro_derive(RetrySpec, attributes(spec))]
pub fn derive_retry_spec(input: TokenStream) -> TokenStream {
    spec_derive::expand(spec_derive::SpecKind::Retry, input.into()).into()
}
