//! `#[timeout(Spec)]`, `#[concurrency_limit(Spec)]` and `#[rate_limited(Spec)]`:
//! layers that call what is inside them once and need no classification.

use proc_macro2::{Ident, Span, TokenStream};
use quote::quote_spanned;

use crate::chain::Layer;
use crate::expand::spec_span;

/// `runner(check::<Spec>(), inner)`: `check` states the spec's bound where the
/// user named it; `runner` has none that can fail.
pub(crate) fn call(layer: &Layer, runner: &str, check: &str, inner: TokenStream) -> TokenStream {
    let Some(spec) = layer.spec() else {
        return inner;
    };
    let runner = Ident::new(runner, Span::call_site());
    let check = Ident::new(check, Span::call_site());
    quote_spanned! {spec_span(spec)=>
        ::resilient_core::__private::#runner(
            ::resilient_core::__private::#check::<#spec>(),
            #inner,
        )
    }
}
