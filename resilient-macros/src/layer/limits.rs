//! `#[timeout(Spec)]`, `#[concurrency_limit(Spec)]` and `#[rate_limited(Spec)]`:
//! layers that run what is inside them once and need no classification.

use proc_macro2::{Ident, Span, TokenStream};
use quote::quote_spanned;

use crate::chain::Layer;
use crate::expand::spec_span;

/// `timeout(check::<Spec>(), async { inner }).await`: `check` states the
/// spec's bound where the user named it; `timeout` has none that can fail.
pub(crate) fn timeout(layer: &Layer, inner: TokenStream) -> TokenStream {
    let Some(spec) = layer.spec() else {
        return inner;
    };
    quote_spanned! {spec_span(spec)=>
        ::resilient_core::__private::timeout(
            ::resilient_core::__private::timeout_spec::<#spec>(),
            async { #inner },
        )
        .await
    }
}

/// A limit (`concurrency_limit` or `rate_limited`) entered before `inner`
/// and left with its outcome: a place or permit at once, or after the wait
/// the limit's settings allow.
pub(crate) fn limit(layer: &Layer, runner: &str, check: &str, inner: TokenStream) -> TokenStream {
    let Some(spec) = layer.spec() else {
        return inner;
    };
    let runner = Ident::new(runner, Span::call_site());
    let check = Ident::new(check, Span::call_site());
    let span = spec_span(spec);
    let inside = super::inside_guard(span, inner);
    quote_spanned! {span=>
        {
            let __resilient_limit = ::resilient_core::__private::#runner(
                ::resilient_core::__private::#check::<#spec>(),
            );
            let mut __resilient_entered = match __resilient_limit.try_enter() {
                ::resilient_core::__private::Enter::Ready(__resilient_r) => __resilient_r,
                ::resilient_core::__private::Enter::Wait(__resilient_w) => {
                    __resilient_limit.wait(__resilient_w).await
                }
            };
            let __resilient_out = #inside;
            __resilient_out
        }
    }
}
