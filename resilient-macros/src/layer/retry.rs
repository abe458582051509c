//! `#[retryable(Spec)]`: the body, called again after each failure.

use proc_macro2::TokenStream;
use quote::quote_spanned;
use syn::spanned::Spanned;

use crate::chain::Layer;

pub(crate) fn call(layer: &Layer, inner: TokenStream) -> TokenStream {
    let spec = &layer.spec;
    // Spanned at the spec so that "`X` is not a retry spec" points at `X`.
    quote_spanned! {spec.span()=>
        ::resilient_core::__private::retry::<#spec, _, _, _, _>(#inner)
    }
}
