//! `#[retryable(Spec)]`: the body, called again after each failure.

use proc_macro2::TokenStream;
use quote::quote_spanned;
use syn::spanned::Spanned;

use crate::chain::Layer;

pub(crate) fn call(layer: &Layer, ret: &TokenStream, inner: TokenStream) -> TokenStream {
    let spec = &layer.spec;
    // The whole call is spanned at the spec, so that an unmet bound is reported
    // once, at the spec (or the return type) it is about.
    quote_spanned! {spec.span()=>
        ::resilient_core::__private::retry::<#spec, #ret, _, _>(#inner)
    }
}
