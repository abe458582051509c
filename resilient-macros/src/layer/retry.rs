//! `#[retryable(Spec)]`: the body, called again after each failure.

use proc_macro2::TokenStream;
use quote::quote_spanned;

use crate::chain::Layer;
use crate::expand::spec_span;

pub(crate) fn call(layer: &Layer, ret: &TokenStream, inner: TokenStream) -> TokenStream {
    let Some(spec) = layer.spec() else {
        return inner;
    };
    // Every requirement is checked by `retry_ops`, at the spec and the return
    // type; the call itself has none that can fail, so each mistake is
    // reported once.
    quote_spanned! {spec_span(spec)=>
        ::resilient_core::__private::retry(
            ::resilient_core::__private::retry_ops::<#spec, #ret, _, _, _>(),
            #inner,
        )
    }
}
