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
    let p = quote!(::resilient_core::__private);
    let span = f.method.span();
    let fn_name = cx.fn_name.to_string();
    let on = match &f.on {
        FallbackOn::Any => quote!(#p::FallbackOn::Any),
        FallbackOn::Resilience => quote!(#p::FallbackOn::Resilience),
        FallbackOn::Rejection => quote!(#p::FallbackOn::Rejection),
        FallbackOn::Timeout => quote!(#p::FallbackOn::Timeout),
        FallbackOn::When(path) => quote!(#p::FallbackOn::When(#path)),
    };
    // With a retry, the originals stay in place and are cloned when the
    // fallback runs; without one, the call consumes them, and the fallback
    // uses the clones saved before it.
    let arg = |name: &syn::Ident| -> TokenStream {
        let source = if cx.again { name.clone() } else { saved(name) };
        quote_spanned!(span=> #p::clone_arg(&#source))
    };
    let mut args: Vec<TokenStream> = Vec::new();
    let target = &f.target;
    let target = if f.target.get_ident().is_some() && cx.receiver.is_some() {
        args.push(match cx.receiver {
            Some(Receiver::Ref) => quote!(self),
            _ => arg(&syn::Ident::new("self", Span::call_site())),
        });
        quote_spanned!(span=> Self::#target)
    } else {
        quote!(#target)
    };
    args.extend(f.args.iter().map(arg));
    let capture = if cx.again { quote!() } else { quote!(move) };
    quote_spanned! {span=>
        #p::fallback(
            #fn_name,
            #on,
            __resilient_wrap,
            #inner,
            #capture |__resilient_error| #p::fallback_call(#target, (#(#args,)*), __resilient_error),
        )
    }
}
