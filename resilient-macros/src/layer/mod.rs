//! One file per mechanism: the call each layer expands to.

mod circuit_breaker;
mod limits;
mod retry;

use proc_macro2::TokenStream;

use crate::chain::{Kind, Layer};

/// The future of `layer` around the future factory `inner`.
/// `ret` is the annotated fn's return type (or `_`).
pub(crate) fn call(layer: &Layer, ret: &TokenStream, inner: TokenStream) -> TokenStream {
    match layer.kind {
        Kind::Retry => retry::call(layer, ret, inner),
        Kind::CircuitBreaker => circuit_breaker::call(layer, ret, inner),
        Kind::Timeout => limits::call(layer, "timeout", "timeout_spec", inner),
        Kind::ConcurrencyLimit => {
            limits::call(layer, "concurrency_limit", "concurrency_spec", inner)
        }
        Kind::RateLimiter => limits::call(layer, "rate_limited", "rate_spec", inner),
    }
}
