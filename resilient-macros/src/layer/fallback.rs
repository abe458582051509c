//! `#[fallback(method = "name(args)")]`: another method's answer when the
//! call fails.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};

use crate::args::{FallbackArgs, FallbackOn};
use crate::expand::{Context, Receiver};

/// The name of the clone of argument `name` made for the fallback before the
/// call runs (when no retry keeps the originals).
pub(crate) fn saved(name: &syn::Ident) -> syn::Ident {
    format_ident!("__resilient_fb_{}", name, span = Span::call_site())
}

pub(crate) fn call(f: &FallbackArgs, cx: &Context, inner: TokenStream) -> TokenStream {
    // At the `method` string, but marked as generated: rustc then reports
    // the bounds below in our words, and suggests no edit to the string
    // (such as `&"cached(id)"`). Every bound of the fallback is reported
    // there, so that rustc reports one mistake once.
    let span = Span::call_site().located_at(f.method.span());
    let p = quote_spanned!(span=> ::resilient_core::__private);
    let fn_name = cx.fn_name.to_string();
    let ret = &cx.ret;
    let on = match &f.on {
        FallbackOn::Any => quote!(#p::FallbackOn::Any),
        FallbackOn::Resilience => quote!(#p::FallbackOn::Resilience),
        FallbackOn::Rejection => quote!(#p::FallbackOn::Rejection),
        FallbackOn::Timeout => quote!(#p::FallbackOn::Timeout),
        FallbackOn::When(path) => quote!(#p::FallbackOn::When(#path)),
    };
    // With a retry, the originals stay in place and are cloned when the
    // fallback runs; without one, the call consumes them, and the fallback
    // takes the clones saved before it (moved in at their last use).
    let self_ident = syn::Ident::new("self", Span::call_site());
    let mut names: Vec<&syn::Ident> = Vec::new();
    let target = &f.target;
    let target = if f.target.get_ident().is_some() && cx.receiver.is_some() {
        names.push(&self_ident);
        quote_spanned!(span=> Self::#target)
    } else {
        quote!(#target)
    };
    names.extend(f.args.iter());
    let args: Vec<TokenStream> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            if *name == "self" && cx.receiver == Some(Receiver::Ref) {
                return quote!(self);
            }
            if cx.again {
                return quote_spanned!(span=> #p::fallback_arg(&#name));
            }
            let saved = saved(name);
            let used_later = names[i + 1..].iter().any(|n| n == name);
            if used_later {
                quote_spanned!(span=> #p::fallback_arg(&#saved))
            } else {
                quote_spanned!(span=> #saved)
            }
        })
        .collect();
    let capture = if cx.again {
        quote!()
    } else {
        quote_spanned!(span=> move)
    };
    quote_spanned! {span=>
        #p::fallback(
            #fn_name,
            #on,
            __resilient_wrap,
            async { #inner },
            #capture |__resilient_error| {
                // The arguments and the error are typed before the fallback
                // is matched against them, so that a mismatch is reported as
                // one, not as a type inferred from the fallback.
                let __resilient_args = (#(#args,)*);
                #p::fallback_output::<#ret, _, _, _, _>(
                    #p::fallback_call(__resilient_args, __resilient_error, #target),
                )
            },
        )
        .await
    }
}
