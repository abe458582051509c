//! A fn that returns a stream: each layer is a stream around the one inside
//! it, made when the stream is first polled (see `resilient_core::stream`).

use proc_macro2::{Span, TokenStream};
use quote::quote_spanned;

use crate::model::{spec_span, Context, Kind, Layer, LayerArgs};

/// The stream of `layer` around `inner`, an expression that makes the
/// stream inside it (the layer calls it once, or once per attempt for a
/// retry, whose closure first runs `rebind`). `item` is the stream's item
/// type. Layers a stream cannot carry were refused by the checks.
pub(crate) fn call(
    layer: &Layer,
    cx: &Context,
    item: &TokenStream,
    rebind: &[TokenStream],
    inner: TokenStream,
) -> TokenStream {
    if let LayerArgs::Fallback(f) = &layer.args {
        return super::fallback::stream(f, cx, item, inner);
    }
    let Some(spec) = layer.spec() else {
        return inner;
    };
    let span = spec_span(spec);
    let p = quote_spanned!(span=> ::resilient_core::__private);
    match layer.kind {
        Kind::Retry => quote_spanned! {span=>
            #p::stream_retry(
                || #p::retry(#p::retry_ops::<#spec, #item, _, _, _>()),
                move || { #(#rebind)* #inner },
            )
        },
        Kind::CircuitBreaker => {
            let ops = quote_spanned!(span=> #p::breaker_ops::<#spec, #item, _, _>());
            let start = match layer.key() {
                None => quote_spanned!(span=> || #p::circuit_breaker(#ops)),
                Some(key) => lookup_now(super::keyed(
                    span,
                    key,
                    |k| quote_spanned!(span=> #p::circuit_breaker_keyed(#ops, #k)),
                )),
            };
            quote_spanned!(span=> #p::stream_breaker(#start, move || #inner))
        }
        Kind::ConcurrencyLimit => {
            let start = limit_start(layer, "concurrency_limit", "concurrency_spec", span);
            quote_spanned!(span=> #p::stream_limit(#start, move || #inner))
        }
        Kind::RateLimiter => {
            let start = limit_start(layer, "rate_limited", "rate_spec", span);
            quote_spanned!(span=> #p::stream_rate(#start, move || #inner))
        }
        Kind::Timeout => quote_spanned! {span=>
            #p::stream_timeout(|| #p::timeout(#p::timeout_spec::<#spec>()), move || #inner)
        },
        Kind::Fallback | Kind::Chaos | Kind::Hedging => inner,
    }
}

/// A limit's call (`runner`, keyed when the layer has a key).
fn limit_start(layer: &Layer, runner: &str, check: &str, span: Span) -> TokenStream {
    let Some(spec) = layer.spec() else {
        return TokenStream::new();
    };
    let check = proc_macro2::Ident::new(check, Span::call_site());
    let spec_ref = quote_spanned!(span=> ::resilient_core::__private::#check::<#spec>());
    match layer.key() {
        None => {
            let runner = proc_macro2::Ident::new(runner, Span::call_site());
            quote_spanned!(span=> || ::resilient_core::__private::#runner(#spec_ref))
        }
        Some(key) => {
            let runner = proc_macro2::Ident::new(&format!("{runner}_keyed"), Span::call_site());
            lookup_now(super::keyed(
                span,
                key,
                |k| quote_spanned!(span=> ::resilient_core::__private::#runner(#spec_ref, #k)),
            ))
        }
    }
}

/// A keyed layer's start: the key is read from the arguments, and its
/// instance looked up, when the fn is called (the arguments are the body's
/// afterwards); the stream starts its call at the first poll.
fn lookup_now(start: TokenStream) -> TokenStream {
    quote::quote! {
        {
            let __resilient_call = #start;
            move || __resilient_call
        }
    }
}
