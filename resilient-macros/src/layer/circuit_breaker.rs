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
    quote_spanned! {span=>
        {
            let __resilient_breaker = ::resilient_core::__private::circuit_breaker(
                ::resilient_core::__private::breaker_ops::<#spec, #ret, _, _>(),
            );
            let mut __resilient_entered = __resilient_breaker.enter();
            let __resilient_out = #inside;
            __resilient_out
        }
    }
}
