//! `#[timeout(Spec)]`, `#[concurrency_limit(Spec)]` and `#[rate_limited(Spec)]`:
//! layers that run what is inside them once and need no classification.

use proc_macro2::{Ident, Span, TokenStream};
use quote::quote_spanned;

use crate::model::{spec_span, Context, Layer};

/// A timer entered before `inner`, whose awaits it bounds (see
/// [`super::awaited`]), and left with its outcome, if it came in time; a
/// call that timed out leaves past the exit, counted once, as timed out.
/// `timeout_spec` states the spec's bound where the user named it; the rest
/// has none that can fail.
pub(crate) fn timeout(layer: &Layer, inner: TokenStream) -> TokenStream {
    let Some(spec) = layer.spec() else {
        return inner;
    };
    let (timer, sleep, label) = super::timer_names();
    quote_spanned! {spec_span(spec)=>
        {
            let __resilient_timeout = ::resilient_core::__private::timeout(
                ::resilient_core::__private::timeout_spec::<#spec>(),
            );
            let __resilient_entered = __resilient_timeout.enter();
            let mut #sleep = ::core::pin::pin!(::resilient_core::__private::unarmed());
            // A timeout leaves the labelled block with its error, past the
            // exit: the timer already counted the call as timed out.
            let __resilient_out = match __resilient_entered {
                ::core::result::Result::Ok(ref #timer) => #label: {
                    let __resilient_inner = #inner;
                    #timer.exit(__resilient_inner)
                },
                ::core::result::Result::Err(__resilient_e) => ::core::result::Result::Err(
                    ::resilient_core::__private::Fail::Resilience(__resilient_e),
                ),
            };
            __resilient_out
        }
    }
}

/// A limit (`concurrency_limit` or `rate_limited`) entered before `inner`
/// and left with its outcome: a place or permit at once, or after the wait
/// the limit's settings allow.
pub(crate) fn limit(
    layer: &Layer,
    cx: &Context,
    runner: &str,
    check: &str,
    timed: bool,
    inner: TokenStream,
) -> TokenStream {
    let Some(spec) = layer.spec() else {
        return inner;
    };
    let runner = Ident::new(runner, Span::call_site());
    let check = Ident::new(check, Span::call_site());
    let span = spec_span(spec);
    let inside = super::inside_guard(span, inner);
    let wait = super::wait(
        cx,
        timed,
        span,
        quote_spanned!(span=> __resilient_limit),
        quote_spanned!(span=> __resilient_w),
    );
    let spec_ref = quote_spanned!(span=> ::resilient_core::__private::#check::<#spec>());
    let start = match layer.key() {
        None => quote_spanned!(span=> ::resilient_core::__private::#runner(#spec_ref)),
        Some(key) => {
            let runner = Ident::new(&format!("{runner}_keyed"), Span::call_site());
            super::keyed(
                span,
                key,
                |k| quote_spanned!(span=> ::resilient_core::__private::#runner(#spec_ref, #k)),
            )
        }
    };
    quote_spanned! {span=>
        {
            let __resilient_limit = #start;
            let mut __resilient_entered = match __resilient_limit.try_enter() {
                ::resilient_core::__private::Enter::Ready(__resilient_r) => __resilient_r,
                ::resilient_core::__private::Enter::Wait(__resilient_w) => {
                    #wait
                }
            };
            let __resilient_out = #inside;
            __resilient_out
        }
    }
}
