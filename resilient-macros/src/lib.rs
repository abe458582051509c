//! Attribute macros and spec derives for `resilient-core`.
//!
//! Use them through `resilient_core`, which re-exports them; the code they
//! generate names only `::resilient_core::__private`. This crate holds syntax,
//! diagnostics and code generation only, read from the bottom up: the model
//! of an annotated fn in `model`, parsing into it in `args` (and
//! `spec_derive` for the derives; `key = value` arguments through darling,
//! as `diag::meta` says), generation from it in `expand` with one
//! file per mechanism under `layer`, and the entry that runs them in order
//! in `chain`.

mod args;
mod chain;
mod diag;
mod expand;
mod layer;
mod model;
mod spec_derive;

use proc_macro::TokenStream;

/// Retries an `async fn` under a retry spec. See `resilient_core::retryable`.
#[proc_macro_attribute]
pub fn retryable(attr: TokenStream, item: TokenStream) -> TokenStream {
    chain::expand(model::Kind::Retry, attr.into(), item.into()).into()
}

/// Runs an `async fn` through a circuit breaker. See
/// `resilient_core::circuit_breakable`.
#[proc_macro_attribute]
pub fn circuit_breakable(attr: TokenStream, item: TokenStream) -> TokenStream {
    chain::expand(model::Kind::CircuitBreaker, attr.into(), item.into()).into()
}

/// Declares a circuit breaker spec. See `resilient_core::CircuitBreakerSpec`.
#[proc_macro_derive(CircuitBreakerSpec, attributes(spec))]
pub fn derive_circuit_breaker_spec(input: TokenStream) -> TokenStream {
    spec_derive::expand(spec_derive::SpecKind::CircuitBreaker, input.into()).into()
}

/// Answers a failed call with another method's result. See
/// `resilient_core::fallback`.
#[proc_macro_attribute]
pub fn fallback(attr: TokenStream, item: TokenStream) -> TokenStream {
    chain::expand(model::Kind::Fallback, attr.into(), item.into()).into()
}

/// Gives up on an `async fn` that takes too long. See `resilient_core::timeout`.
#[proc_macro_attribute]
pub fn timeout(attr: TokenStream, item: TokenStream) -> TokenStream {
    chain::expand(model::Kind::Timeout, attr.into(), item.into()).into()
}

/// Declares a timeout spec. See `resilient_core::TimeoutSpec`.
#[proc_macro_derive(TimeoutSpec, attributes(spec))]
pub fn derive_timeout_spec(input: TokenStream) -> TokenStream {
    spec_derive::expand(spec_derive::SpecKind::Timeout, input.into()).into()
}

/// Limits how many calls run at once. See `resilient_core::concurrency_limit`.
#[proc_macro_attribute]
pub fn concurrency_limit(attr: TokenStream, item: TokenStream) -> TokenStream {
    chain::expand(model::Kind::ConcurrencyLimit, attr.into(), item.into()).into()
}

/// Declares a concurrency limit spec. See `resilient_core::ConcurrencyLimitSpec`.
#[proc_macro_derive(ConcurrencyLimitSpec, attributes(spec))]
pub fn derive_concurrency_limit_spec(input: TokenStream) -> TokenStream {
    spec_derive::expand(spec_derive::SpecKind::ConcurrencyLimit, input.into()).into()
}

/// Limits how many calls start per period. See `resilient_core::rate_limited`.
#[proc_macro_attribute]
pub fn rate_limited(attr: TokenStream, item: TokenStream) -> TokenStream {
    chain::expand(model::Kind::RateLimiter, attr.into(), item.into()).into()
}

/// Declares a rate limiter spec. See `resilient_core::RateLimiterSpec`.
#[proc_macro_derive(RateLimiterSpec, attributes(spec))]
pub fn derive_rate_limiter_spec(input: TokenStream) -> TokenStream {
    spec_derive::expand(spec_derive::SpecKind::RateLimiter, input.into()).into()
}

/// Injects latency and errors, when enabled. See `resilient_core::chaos`.
#[proc_macro_attribute]
pub fn chaos(attr: TokenStream, item: TokenStream) -> TokenStream {
    chain::expand(model::Kind::Chaos, attr.into(), item.into()).into()
}

/// Declares a chaos spec. See `resilient_core::ChaosSpec`.
#[proc_macro_derive(ChaosSpec, attributes(spec))]
pub fn derive_chaos_spec(input: TokenStream) -> TokenStream {
    spec_derive::expand(spec_derive::SpecKind::Chaos, input.into()).into()
}

/// Starts more attempts beside a slow one; the first accepted outcome wins.
/// See `resilient_core::hedging`.
#[proc_macro_attribute]
pub fn hedged(attr: TokenStream, item: TokenStream) -> TokenStream {
    chain::expand(model::Kind::Hedging, attr.into(), item.into()).into()
}

/// Declares a hedging spec. See `resilient_core::HedgingSpec`.
#[proc_macro_derive(HedgingSpec, attributes(spec))]
pub fn derive_hedging_spec(input: TokenStream) -> TokenStream {
    spec_derive::expand(spec_derive::SpecKind::Hedging, input.into()).into()
}

/// Declares a retry spec. See `resilient_core::RetrySpec`.
#[proc_macro_derive(RetrySpec, attributes(spec))]
pub fn derive_retry_spec(input: TokenStream) -> TokenStream {
    spec_derive::expand(spec_derive::SpecKind::Retry, input.into()).into()
}
