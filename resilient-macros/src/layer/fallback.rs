//! `#[fallback(method = "name(args)")]`: another method's answer when the
//! call fails.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};

use crate::model::{Context, FallbackArgs, FallbackOn, Receiver};

/// The name of the clone of argument `name` made for the fallback before the
/// call runs (when no retry keeps the originals).
pub(crate) fn saved(name: &syn::Ident) -> syn::Ident {
    format_ident!("__resilient_fb_{}", name, span = Span::call_site())
}

/// What clones argument `name` for the fallback: the receiver has its own
/// message, since it cannot be left out of `method`.
pub(crate) fn clone_fn(name: &syn::Ident) -> syn::Ident {
    let f = if name == "self" {
        "fallback_receiver_arg"
    } else {
        "fallback_arg"
    };
    syn::Ident::new(f, Span::call_site())
}

/// What both kinds of fallback layer say of the fallback: the span its
/// bounds are reported at, the `on` filter, the path it is called by, the
/// names of the arguments it takes (the receiver first, for a method), and
/// the checks that type each argument as the fallback's parameter.
struct Target {
    span: Span,
    p: TokenStream,
    on: TokenStream,
    path: TokenStream,
    names: Vec<syn::Ident>,
    markers: Vec<syn::Ident>,
    typed: Vec<TokenStream>,
}

impl Target {
    fn of(f: &FallbackArgs, cx: &Context) -> Self {
        // At the `method` string, but marked as generated: rustc then
        // reports the bounds below in our words, and suggests no edit to
        // the string (such as `&"cached(id)"`). Every bound of the fallback
        // is reported there, so that rustc reports one mistake once.
        let span = Span::call_site().located_at(f.method.span());
        let p = quote_spanned!(span=> ::resilient_core::__private);
        let on = match &f.on {
            FallbackOn::Any => quote!(#p::FallbackOn::Any),
            FallbackOn::Resilience => quote!(#p::FallbackOn::Resilience),
            FallbackOn::Rejection => quote!(#p::FallbackOn::Rejection),
            FallbackOn::Timeout => quote!(#p::FallbackOn::Timeout),
            FallbackOn::When(path) => quote!(#p::FallbackOn::When(#path)),
        };
        let mut names = Vec::new();
        let target = &f.target;
        let path = if f.target.get_ident().is_some() && cx.receiver.is_some() {
            names.push(syn::Ident::new("self", cx.self_span));
            quote_spanned!(span=> Self::#target)
        } else {
            quote!(#target)
        };
        names.extend(f.args.iter().cloned());
        // Each argument is matched against the fallback's parameter it goes
        // to (numbered as the user counts them: from 1, a receiver apart),
        // so that a mismatch names that parameter; see
        // `resilient_core::fallback`.
        let has_receiver = names.first().is_some_and(|n| n == "self");
        let self_path = cx.receiver.is_some()
            && f.target.segments.len() > 1
            && f.target.segments.first().is_some_and(|s| s.ident == "Self");
        let markers: Vec<syn::Ident> = (0..names.len())
            .map(|i| format_ident!("__resilient_param{}", i, span = span))
            .collect();
        let typed = markers
            .iter()
            .enumerate()
            .map(|(i, marker)| {
                let field = syn::Index {
                    index: u32::try_from(i).unwrap_or(u32::MAX),
                    span,
                };
                if has_receiver && i == 0 {
                    quote_spanned!(span=> #p::fallback_receiver(#marker, __resilient_args.#field))
                } else {
                    let number = i + usize::from(!has_receiver);
                    let check = if self_path {
                        quote_spanned!(span=> fallback_path_param)
                    } else {
                        quote_spanned!(span=> fallback_param)
                    };
                    quote_spanned!(span=> #p::#check::<_, _, #number>(#marker, __resilient_args.#field))
                }
            })
            .collect();
        Self {
            span,
            p,
            on,
            path,
            names,
            markers,
            typed,
        }
    }

    /// The statements that type the arguments (`args`, a tuple's items)
    /// and the error before the fallback is called with them as
    /// `__resilient_args` and `__resilient_error`, with `ret` the fn's
    /// output (a stream fn's: its item).
    fn prepare(&self, args: &[TokenStream], ret: &TokenStream) -> TokenStream {
        let Target {
            span,
            p,
            path,
            markers,
            typed,
            ..
        } = self;
        quote_spanned! {*span=>
            let __resilient_args = (#(#args,)*);
            let __resilient_fit = #p::fallback_fit::<#ret, _, _, _, _>(&#path, &__resilient_args, &__resilient_error);
            let __resilient_passed = __resilient_fit.passed(&__resilient_args);
            let (#(#markers,)*) = __resilient_fit.named();
            let __resilient_args = (#(#typed,)*);
            let __resilient_error = __resilient_fit.error(__resilient_passed, __resilient_error);
        }
    }
}

pub(crate) fn call(f: &FallbackArgs, cx: &Context, timed: bool, inner: TokenStream) -> TokenStream {
    let target = Target::of(f, cx);
    let Target {
        span,
        ref p,
        ref on,
        ref path,
        ref names,
        ..
    } = target;
    let fn_name = cx.fn_name.to_string();
    let ret = &cx.ret;
    // With a retry, the originals stay in place and are cloned when the
    // fallback runs; without one, the call consumes them, and the fallback
    // takes the clones saved before it (moved in at their last use).
    let args: Vec<TokenStream> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            if name == "self" && cx.receiver == Some(Receiver::Ref) {
                return quote!(self);
            }
            if cx.again {
                let clone = clone_fn(name);
                let at = if name == "self" { cx.self_span } else { span };
                return quote_spanned!(at=> #p::#clone(&#name));
            }
            let saved = saved(name);
            let used_later = names[i + 1..].iter().any(|n| n == name);
            if used_later {
                let clone = clone_fn(name);
                quote_spanned!(span=> #p::#clone(&#saved))
            } else {
                quote_spanned!(span=> #saved)
            }
        })
        .collect();
    let prepare = target.prepare(&args, ret);
    if cx.blocking {
        // A blocking fn's fallback is a plain fn: its answer, at once.
        return quote_spanned! {span=>
            {
            let __resilient_inner = #inner;
            match #p::fallback_decide(#fn_name, #on, __resilient_wrap, __resilient_inner) {
                ::core::result::Result::Ok(__resilient_o) => __resilient_o,
                ::core::result::Result::Err(__resilient_error) => {
                    #prepare
                    #p::fallback_now::<#ret, _, _, _>(
                        __resilient_fit.call(#path, __resilient_args, __resilient_error),
                    )
                }
            }
            }
        };
    }
    // What is inside runs first, in the fn's own future; its outcome then
    // passes on, or its error goes to the fallback. The arguments and the
    // error are typed before the fallback is matched against them, so that
    // a mismatch is reported as one, not as a type inferred from the
    // fallback. A sync fallback's answer is not awaited, and the matches end
    // before an async one's await: no outcome lives across an await (the
    // future stays `Send` whatever `T` and `E` are).
    let later = super::awaited(timed, span, quote_spanned!(span=> __resilient_later));
    quote_spanned! {span=>
        '__resilient_fallback: {
            let __resilient_inner = #inner;
            let __resilient_later = match #p::fallback_decide(
                #fn_name,
                #on,
                __resilient_wrap,
                __resilient_inner,
            ) {
                ::core::result::Result::Ok(__resilient_o) => break '__resilient_fallback __resilient_o,
                ::core::result::Result::Err(__resilient_error) => {
                    #prepare
                    match #p::fallback_output::<#ret, _, _, _, _>(
                        __resilient_fit.call(#path, __resilient_args, __resilient_error),
                    ) {
                        #p::Answer::Now(__resilient_answer) => {
                            // Named first: syn reads `'label ::path` as the
                            // start of a labelled block.
                            let __resilient_out = #p::fallback_done(__resilient_answer);
                            break '__resilient_fallback __resilient_out;
                        }
                        #p::Answer::Later(__resilient_later) => __resilient_later,
                    }
                }
            };
            #p::fallback_done(#later)
        }
    }
}

/// `#[fallback]` on a stream: what is inside, replaced by the fallback's
/// stream when it fails before its first item. The fallback's arguments are
/// cloned here, before what is inside takes the originals (inside a retry,
/// the attempt's own clones).
pub(crate) fn stream(
    f: &FallbackArgs,
    cx: &Context,
    item: &TokenStream,
    inner: TokenStream,
) -> TokenStream {
    let target = Target::of(f, cx);
    let Target {
        span,
        ref p,
        ref on,
        ref path,
        ref names,
        ..
    } = target;
    let fn_name = cx.fn_name.to_string();
    let mut clones = Vec::new();
    let args: Vec<TokenStream> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            if name == "self" && cx.receiver == Some(Receiver::Ref) {
                return quote!(self);
            }
            let to = saved(name);
            if !names[..i].iter().any(|n| n == name) {
                let clone = clone_fn(name);
                let at = if name == "self" { cx.self_span } else { span };
                clones.push(quote_spanned!(at=> let #to = #p::#clone(&#name);));
            }
            if names[i + 1..].iter().any(|n| n == name) {
                let clone = clone_fn(name);
                quote_spanned!(span=> #p::#clone(&#to))
            } else {
                quote_spanned!(span=> #to)
            }
        })
        .collect();
    let prepare = target.prepare(&args, item);
    quote_spanned! {span=>
        {
            #(#clones)*
            #p::stream_fallback(
                #fn_name,
                #on,
                __resilient_wrap,
                move || #inner,
                move |__resilient_error| {
                    #prepare
                    #p::fallback_stream::<#item, _, _, _, _>(
                        __resilient_fit.call(#path, __resilient_args, __resilient_error),
                    )
                },
            )
        }
    }
}
