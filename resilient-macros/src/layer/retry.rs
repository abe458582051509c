//! `#[retryable(Spec)]`: what is inside, again after each failure.

use proc_macro2::TokenStream;
use quote::quote_spanned;

use crate::model::{spec_span, Context, Layer};

pub(crate) fn call(layer: &Layer, cx: &Context, timed: bool, inner: TokenStream) -> TokenStream {
    let ret = &cx.ret;
    let Some(spec) = layer.spec() else {
        return inner;
    };
    // Every requirement is checked by `retry_ops`, at the spec and the return
    // type; the rest has none that can fail, so each mistake is reported
    // once. The attempts are a loop in the fn's own future.
    let span = spec_span(spec);
    let wait = super::wait(
        cx,
        timed,
        span,
        quote_spanned!(span=> __resilient_wait),
        TokenStream::new(),
    );
    quote_spanned! {span=>
        {
            // The settings are read once, here: the call runs under them.
            let mut __resilient_retry = ::resilient_core::__private::retry(
                ::resilient_core::__private::retry_ops::<#spec, #ret, _, _, _>(),
            );
            loop {
                if let ::core::option::Option::Some(__resilient_e) = __resilient_retry.refused() {
                    break ::core::result::Result::Err(__resilient_e);
                }
                let __resilient_attempt = #inner;
                // The match ends before the wait: the outcome it held does
                // not live across the await (the future stays `Send`
                // whatever `T` and `E` are).
                let __resilient_wait = match __resilient_retry.step(__resilient_attempt) {
                    ::resilient_core::__private::Step::Done(__resilient_o) => break __resilient_o,
                    ::resilient_core::__private::Step::Wait(__resilient_w) => __resilient_w,
                };
                #wait;
            }
        }
    }
}
