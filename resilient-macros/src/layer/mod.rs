//! One file per mechanism: the call each layer expands to.

mod circuit_breaker;
mod fallback;
mod limits;
mod retry;

use proc_macro2::{Span, TokenStream};
use quote::quote_spanned;

pub(crate) use fallback::saved as fallback_saved;

use crate::chain::{Kind, Layer, LayerArgs};
use crate::expand::Context;

/// The outcome of `inner` run inside the guard `__resilient_entered` (a
/// `Result` of the guard or the resilience error that kept the call out),
/// spanned at `span`. Matched by reference: the guard stays where it is
/// while `inner` runs, and is dropped with the layer's block.
pub(crate) fn inside_guard(span: Span, inner: TokenStream) -> TokenStream {
    quote_spanned! {span=>
        match __resilient_entered {
            ::core::result::Result::Ok(ref mut __resilient_guard) => {
                let __resilient_inner = #inner;
                __resilient_guard.exit(__resilient_inner)
            }
            ::core::result::Result::Err(__resilient_e) => ::core::result::Result::Err(
                ::resilient_core::__private::Fail::Resilience(__resilient_e),
            ),
        }
    }
}

/// The outcome of `layer` around `inner`, the outcome of what is inside it
/// (an expression of type `Result<T, Fail<E>>` that may await).
pub(crate) fn call(layer: &Layer, cx: &Context, inner: TokenStream) -> TokenStream {
    let ret = &cx.ret;
    if let LayerArgs::Fallback(args) = &layer.args {
        return fallback::call(args, cx, inner);
    }
    match layer.kind {
        Kind::Retry => retry::call(layer, ret, inner),
        Kind::CircuitBreaker => circuit_breaker::call(layer, ret, inner),
        Kind::Timeout => limits::timeout(layer, inner),
        Kind::ConcurrencyLimit => {
            limits::limit(layer, "concurrency_limit", "concurrency_spec", inner)
        }
        Kind::RateLimiter => limits::limit(layer, "rate_limited", "rate_spec", inner),
        Kind::Fallback => inner,
    }
}
