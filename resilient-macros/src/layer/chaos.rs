//! `#[chaos(Spec)]`: a layer that may delay what is inside it, end the call
//! with an injected error instead of running it, or, with
//! `outcome = path`, return that fn's output in its place.

use proc_macro2::TokenStream;
use quote::quote_spanned;
use syn::spanned::Spanned;

use crate::model::{spec_span, Layer, LayerArgs};

/// The chaos spec's draws for the call, then `inner` unless it drew an
/// error. An injected latency is an await like any other: inside a
/// `#[timeout]` (`timed`), it is bounded by the timer. `inner` is written
/// once, so the chain's code is not doubled. `chaos_spec` states the spec's
/// bound where the user named it; the rest has none that can fail.
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
    let outcome = match &layer.args {
        LayerArgs::Chaos { outcome, .. } => outcome.as_ref(),
        _ => None,
    };
    let replaces = outcome.is_some();
    // The replaced outcome enters the chain as the body's would, so the
    // classifiers outside judge it; `#outcome()` is checked against the
    // fn's output where the user named it.
    let replaced = outcome.map(|f| {
        let at = f.span();
        quote_spanned! {at=>
            ::core::result::Result::Ok(::resilient_core::__private::ChaosGo::Replace) => {
                let __resilient_replaced: #ret = #f();
                ::resilient_core::__private::body::<#ret, _, _>(__resilient_replaced)
            }
        }
    });
    let wait = super::awaited(
        timed,
        span,
        quote_spanned!(span=> __resilient_chaos.wait(__resilient_d)),
    );
    quote_spanned! {span=>
        {
            let __resilient_chaos = ::resilient_core::__private::chaos(
                ::resilient_core::__private::chaos_spec::<#spec>(),
            );
            let __resilient_entered = match __resilient_chaos.try_enter(#replaces) {
                ::resilient_core::__private::ChaosStep::Ready(__resilient_r) => __resilient_r,
                ::resilient_core::__private::ChaosStep::Wait(__resilient_d) => {
                    #wait
                }
            };
            let __resilient_out = match __resilient_entered {
                #replaced
                ::core::result::Result::Ok(_) => #inner,
                ::core::result::Result::Err(__resilient_e) => ::core::result::Result::Err(
                    ::resilient_core::__private::Fail::Resilience(__resilient_e),
                ),
            };
            __resilient_out
        }
    }
}
