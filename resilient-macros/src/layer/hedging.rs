//! `#[hedged(Spec)]`: what is inside, as attempts side by side, the first
//! accepted outcome taken.

use proc_macro2::TokenStream;
use quote::quote_spanned;

use crate::model::{spec_span, Layer};

/// Attempts of `inner`, each an async block of the fn's own future that
/// borrows the fn's arguments (and clones the owned ones, in `inner`, as
/// under a retry). The block is written once, in the loop that starts one
/// attempt per turn, so every attempt has its type: the first is kept in
/// place, the others boxed. Every requirement is checked by `hedge_ops`, at
/// the spec and the return type. Inside a `#[timeout]` (`timed`), the wait
/// for the attempts is bounded as a whole; the attempts' own awaits are not
/// (see `expand::nest`).
pub(crate) fn call(
    layer: &Layer,
    ret: &TokenStream,
    timed: bool,
    inner: TokenStream,
) -> TokenStream {
    let Some(spec) = layer.spec() else {
        return inner;
    };
    let span = spec_span(spec);
    let p = quote_spanned!(span=> ::resilient_core::__private);
    let next = super::awaited(
        timed,
        span,
        quote_spanned!(span=> __resilient_hedge.next(
            __resilient_first.as_mut(),
            &mut __resilient_hedges,
            __resilient_delay.as_mut(),
        )),
    );
    quote_spanned! {span=>
        {
            // The settings are read once, here: the call runs under them.
            let mut __resilient_hedge = #p::hedge(#p::hedge_ops::<#spec, #ret, _, _>());
            let __resilient_out = match __resilient_hedge.refused() {
                ::core::option::Option::Some(__resilient_e) => {
                    ::core::result::Result::Err(__resilient_e)
                }
                ::core::option::Option::None => {
                    let mut __resilient_first = ::core::pin::pin!(::core::option::Option::None);
                    let mut __resilient_hedges = #p::Hedges::new();
                    let mut __resilient_delay = ::core::pin::pin!(#p::hedge_unarmed());
                    loop {
                        let __resilient_attempt = async { #inner };
                        __resilient_hedge.start_attempt(
                            __resilient_first.as_mut(),
                            &mut __resilient_hedges,
                            __resilient_attempt,
                        );
                        match #next {
                            #p::HedgeStep::Done(__resilient_o) => break __resilient_o,
                            #p::HedgeStep::Hedge => {}
                        }
                    }
                }
            };
            __resilient_out
        }
    }
}
