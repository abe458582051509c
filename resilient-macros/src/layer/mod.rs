//! One file per mechanism: the call each layer expands to.

mod chaos;
mod circuit_breaker;
mod fallback;
mod hedging;
mod limits;
mod retry;
pub(crate) mod stream;

use proc_macro2::{Ident, Span, TokenStream};
use quote::quote_spanned;
use syn::Lifetime;

pub(crate) use fallback::clone_fn as fallback_clone_fn;
pub(crate) use fallback::saved as fallback_saved;

use crate::model::{Context, Kind, Layer, LayerArgs};

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

/// A keyed layer's start: `start` given the key, the text of the value of
/// the user's `key` expression. The value is bound in a `let` of its own,
/// so that a temporary the expression makes lives through the start. The
/// key's requirement (`PartitionKey`) is the only bound on it, checked at
/// the expression, once: the start takes the key's text. The call is at
/// the spec, as the unkeyed start is, so that a wrong spec is reported
/// there once too (the start's type is part of the call's).
pub(crate) fn keyed(
    span: Span,
    key: &syn::Expr,
    start: impl FnOnce(&TokenStream) -> TokenStream,
) -> TokenStream {
    let at = syn::spanned::Spanned::span(key);
    let text = quote_spanned!(span=> __resilient_text);
    let start = start(&text);
    let value = quote_spanned!(at=> __resilient_key);
    let checked = quote_spanned!(span=> ::resilient_core::__private::key(#value, |#text| #start));
    quote_spanned! {span=>
        {
            let __resilient_key = &(#key);
            #checked
        }
    }
}

/// The names a timeout's timer goes by, shared between the timeout's layer
/// and the awaits of the layers inside it: at the attribute's call site, so
/// that they resolve whatever spans the specs carry (a spec passed through a
/// `macro_rules!` argument has its caller's hygiene).
pub(crate) fn timer_names() -> (Ident, Ident, Lifetime) {
    let at = Span::call_site();
    (
        Ident::new("__resilient_timer", at),
        Ident::new("__resilient_sleep", at),
        Lifetime::new("'__resilient_timeout", at),
    )
}

/// `fut.await`, where `timed` says whether the await is inside the fn's
/// `#[timeout]`: there it is bounded by the timeout's timer, and a timeout
/// leaves the timeout's labelled block with the error, dropping what is
/// inside (as the body's own await points are where a timeout can end it).
pub(crate) fn awaited(timed: bool, span: Span, fut: TokenStream) -> TokenStream {
    if !timed {
        return quote_spanned!(span=> #fut.await);
    }
    let (timer, sleep, label) = timer_names();
    let p = quote_spanned!(span=> ::resilient_core::__private);
    quote_spanned! {span=>
        {
            let __resilient_fut = ::core::pin::pin!(#fut);
            match #p::bounded(&#timer, #sleep.as_mut(), __resilient_fut).await {
                ::core::result::Result::Ok(__resilient_v) => __resilient_v,
                ::core::result::Result::Err(__resilient_e) => {
                    // Named first: syn reads `'label ::path` as the start of
                    // a labelled block.
                    let __resilient_out =
                        ::core::result::Result::Err(#p::Fail::Resilience(__resilient_e));
                    break #label __resilient_out;
                }
            }
        }
    }
}

/// The wait `wait.wait(args)` of a layer: awaited in an `async fn` (see
/// [`awaited`]), or `wait.wait_blocking(args)` in a blocking fn, which
/// blocks the thread (nothing bounds it there: a blocking fn has no
/// `#[timeout]`).
pub(crate) fn wait(
    cx: &Context,
    timed: bool,
    span: Span,
    on: TokenStream,
    args: TokenStream,
) -> TokenStream {
    if cx.blocking {
        quote_spanned!(span=> #on.wait_blocking(#args))
    } else {
        awaited(timed, span, quote_spanned!(span=> #on.wait(#args)))
    }
}

/// The outcome of `layer` around `inner`, the outcome of what is inside it
/// (an expression of type `Result<T, Fail<E>>` that may await); `timed` says
/// whether the layer is inside the fn's `#[timeout]`.
pub(crate) fn call(layer: &Layer, cx: &Context, timed: bool, inner: TokenStream) -> TokenStream {
    let ret = &cx.ret;
    if let LayerArgs::Fallback(args) = &layer.args {
        return fallback::call(args, cx, timed, inner);
    }
    match layer.kind {
        Kind::Retry => retry::call(layer, cx, timed, inner),
        Kind::CircuitBreaker => circuit_breaker::call(layer, ret, inner),
        Kind::Timeout => limits::timeout(layer, inner),
        Kind::ConcurrencyLimit => limits::limit(
            layer,
            cx,
            "concurrency_limit",
            "concurrency_spec",
            timed,
            inner,
        ),
        Kind::RateLimiter => limits::limit(layer, cx, "rate_limited", "rate_spec", timed, inner),
        Kind::Chaos => chaos::call(layer, ret, timed, inner),
        Kind::Hedging => hedging::call(layer, ret, timed, inner),
        Kind::Fallback => inner,
    }
}
