//! `#[circuit_breakable(Spec)]`: what is inside, if the breaker permits it.

use proc_macro2::TokenStream;
use quote::quote_spanned;

use crate::chain::Layer;
use crate::expand::spec_span;

pub(crate) fn call(layer: &Layer, ret: &TokenStream, inner: TokenStream) -> TokenStream {
    let Some(spec) = layer.spec() else {
        return inner;
    };
    // As for retry: every requirement is checked by `breaker_ops`. The permit
    // is a guard: a call dropped while inside counts nothing.
    quote_spanned! {spec_span(spec)=>
        {
            let __resilient_breaker = ::resilient_core::__private::circuit_breaker(
                ::resilient_core::__private::breaker_ops::<#spec, #ret, _, _>(),
            );
            let mut __resilient_entered = __resilient_breaker.enter();
            // Matched by reference, as a limit's guard.
            let __resilient_out = match __resilient_entered {
                ::core::result::Result::Ok(ref mut __resilient_permit) => {
                    let __resilient_inner = #inner;
                    __resilient_permit.exit(__resilient_inner)
                }
                ::core::result::Result::Err(__resilient_e) => ::core::result::Result::Err(
                    ::resilient_core::__private::Fail::Resilience(__resilient_e),
                ),
            };
            __resilient_out
        }
    }
}
