//! `#[circuit_breakable(Spec)]`: the call, if the breaker permits it.

use proc_macro2::TokenStream;
use quote::quote_spanned;

use crate::chain::Layer;
use crate::expand::spec_span;

pub(crate) fn call(layer: &Layer, ret: &TokenStream, inner: TokenStream) -> TokenStream {
    let Some(spec) = layer.spec() else {
        return inner;
    };
    // As for retry: every requirement is checked by `breaker_ops`.
    quote_spanned! {spec_span(spec)=>
        ::resilient_core::__private::circuit_breaker(
            ::resilient_core::__private::breaker_ops::<#spec, #ret, _, _>(),
            #inner,
        )
    }
}
