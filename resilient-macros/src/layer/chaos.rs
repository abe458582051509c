//! `#[chaos(Spec)]`: a layer that may delay what is inside it, or end the
//! call with an injected error instead of running it.

use proc_macro2::TokenStream;
use quote::quote_spanned;

use crate::model::{spec_span, Layer};

/// The chaos spec's draws for the call, then `inner` unless it drew an
/// error. An injected latency is an await like any other: inside a
/// `#[timeout]` (`timed`), it is bounded by the timer. `inner` is written
/// once, so the chain's code is not doubled. `chaos_spec` states the spec's
/// bound where the user named it; the rest has none that can fail.
pub(crate) fn call(layer: &Layer, timed: bool, inner: TokenStream) -> TokenStream {
    let Some(spec) = layer.spec() else {
        return inner;
    };
    let span = spec_span(spec);
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
            let __resilient_entered = match __resilient_chaos.try_enter() {
                ::resilient_core::__private::ChaosStep::Ready(__resilient_r) => __resilient_r,
                ::resilient_core::__private::ChaosStep::Wait(__resilient_d) => {
                    #wait
                }
            };
            let __resilient_out = match __resilient_entered {
                ::core::result::Result::Ok(()) => #inner,
                ::core::result::Result::Err(__resilient_e) => ::core::result::Result::Err(
                    ::resilient_core::__private::Fail::Resilience(__resilient_e),
                ),
            };
            __resilient_out
        }
    }
}
