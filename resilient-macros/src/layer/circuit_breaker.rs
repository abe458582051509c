//! `#[circuit_breakable(Spec)]`: what is inside, if the breaker permits it.

use proc_macro2::TokenStream;
use quote::quote_spanned;

use crate::model::{spec_span, Layer};

pub(crate) fn call(layer: &Layer, ret: &TokenStream, inner: TokenStream) -> TokenStream {
    let Some(spec) = layer.spec() else {
        return inner;
    };
    // As for retry: every requirement is checked by `breaker_ops`. The permit
    // is a guard: a call dropped while inside counts nothing.
    let span = spec_span(spec);
    let inside = super::inside_guard(span, inner);
    let ops =
        quote_spanned!(span=> ::resilient_core::__private::breaker_ops::<#spec, #ret, _, _>());
    let start = match layer.key() {
        None => quote_spanned!(span=> ::resilient_core::__private::circuit_breaker(#ops)),
        Some(key) => super::keyed(
            span,
            key,
            |k| quote_spanned!(span=> ::resilient_core::__private::circuit_breaker_keyed(#ops, #k)),
        ),
    };
    quote_spanned! {span=>
        {
            let __resilient_breaker = #start;
            let mut __resilient_entered = __resilient_breaker.enter();
            let __resilient_out = #inside;
            __resilient_out
        }
    }
}
