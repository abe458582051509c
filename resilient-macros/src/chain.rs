//! The entry of every resilience attribute: the chain of attributes a fn
//! carries, collected in order, parsed, checked and expanded.
//!
//! Rust expands attribute macros from the top down, and the first one sees the
//! others still on the item. So the first resilience attribute takes every
//! resilience attribute of the fn at once, removes them (keeping every other
//! attribute where it was), and builds the whole chain: top = outermost.

use proc_macro2::{Span, TokenStream};
use syn::spanned::Spanned;
use syn::Meta;

use crate::diag::{self, Errors};
use crate::model::{Func, Kind, Layer, LayerArgs};
use crate::{args, expand};

fn parse_args(kind: Kind, tokens: TokenStream, span: Span) -> syn::Result<LayerArgs> {
    match kind {
        Kind::Fallback => args::parse_fallback(tokens, span).map(LayerArgs::Fallback),
        Kind::Chaos => args::parse_chaos(tokens, span),
        _ if kind.keyed() => args::parse_keyed(kind, tokens, span),
        _ => args::parse_spec(kind, tokens, span).map(LayerArgs::Spec),
    }
}

/// What a collected attribute becomes: a marker on an empty item at the top
/// of the fn's body, so that the user's import of its macro counts as used,
/// which expands to nothing. (Left on the fn, each would hand the whole
/// expanded fn through its macro once more.)
const DONE: &str = "__resilient_done";

/// Entry point of every resilience attribute.
pub(crate) fn expand(kind: Kind, attr: TokenStream, item: TokenStream) -> TokenStream {
    if is_done(&attr) {
        return TokenStream::new();
    }
    let mut func = match args::parse_fn(item.clone()) {
        Ok(func) => func,
        Err(_) => {
            let name = kind.attr_name();
            let e = syn::Error::new(
                Span::call_site(),
                format!(
                    "`#[{name}]` goes on a fn with a body: an `async fn`, a blocking fn, or a fn that returns a stream (a free fn, a method, or a method of a trait impl)"
                ),
            );
            return diag::with_item(item, e);
        }
    };
    let mut errors = Errors::default();
    let mut layers = Vec::new();
    match parse_args(kind, attr, Span::call_site()) {
        Ok(args) => layers.push(Layer { kind, args }),
        Err(e) => errors.push(e),
    }
    let mut siblings = Vec::new();
    let mut markers: Vec<syn::Stmt> = Vec::new();
    func.attrs.retain(|a| {
        let Some(kind) = Kind::of(a) else {
            return true;
        };
        siblings.push((kind, a.clone()));
        let path = a.path();
        let done = syn::Ident::new(DONE, Span::call_site());
        markers.push(syn::parse_quote!(#[#path(#done)] fn #done() {}));
        false
    });
    let mut seen = vec![kind];
    for (kind, attr) in siblings {
        let name = kind.attr_name();
        if seen.contains(&kind) {
            let hint = match kind {
                // The usual wish behind a second timeout: one per attempt and
                // one for the whole call.
                Kind::Timeout => "; for a limit on the whole call across a retry's attempts, set the retry spec's own `timeout` key and keep one `#[timeout]` for each attempt (below `#[retryable]`)",
                Kind::Retry => "; for more attempts, raise the spec's `attempts`",
                Kind::Hedging => "; for more attempts side by side, raise the spec's `max_hedged_attempts`",
                _ => "",
            };
            errors.push(syn::Error::new_spanned(
                &attr,
                format!(
                    "`#[{name}]` is given twice on this fn; each resilience attribute may appear once per fn (to nest two, annotate a second fn that calls this one){hint}"
                ),
            ));
            continue;
        }
        seen.push(kind);
        let tokens = match &attr.meta {
            Meta::List(list) => Ok(list.tokens.clone()),
            Meta::Path(_) => Ok(TokenStream::new()),
            Meta::NameValue(nv) => Err(syn::Error::new(
                nv.eq_token.span,
                match kind {
                    Kind::Fallback => "`#[fallback]` takes its arguments in parentheses: `#[fallback(method = \"cached(id)\")]`".to_owned(),
                    _ => format!(
                        "`#[{name}]` takes the spec in parentheses: `#[{name}({})]`",
                        kind.example_spec()
                    ),
                },
            )),
        };
        match tokens.and_then(|t| parse_args(kind, t, attr.span())) {
            Ok(args) => layers.push(Layer { kind, args }),
            Err(e) => errors.push(e),
        }
    }
    let checked = expand::check(&func, &layers);
    if let Err(e) = checked {
        errors.push(e);
    }
    if let Err(e) = errors.finish() {
        // The fn without its resilience attributes: one error, no cascade.
        // The specs stay named in the body, so their imports are still used.
        let specs = layers.iter().filter_map(Layer::spec);
        // Inner attributes (`#![allow(..)]`) stay first in the body.
        let (inner_attrs, rest) = func.split_body();
        let body = quote::quote! {
            #(#![#inner_attrs])*
            #(#markers)*
            #(let _ = ::core::marker::PhantomData::<#specs>;)*
            #rest
        };
        return diag::with_item(func.with_body(body), e);
    }
    let record = chain_record(&func, &layers);
    expand::expand(func, &layers, quote::quote!(#(#markers)* #record))
}

/// The fn's chain as a record: its attributes in order, each with its spec
/// and arguments, for the startup check of settings that no fn using a spec
/// can make act, and for the explanation of each fn (`registry::uses`).
///
/// The record is an item inside the body, which cannot name the generic
/// parameters of the fn or of its impl: a spec named by `Self` or by one of
/// the fn's generic parameters is recorded without its type, as is one whose
/// name is written as a generic parameter usually is (one or two
/// characters, `S`, `R2`), which may be the impl's.
fn chain_record(func: &Func, layers: &[Layer]) -> TokenStream {
    let p = quote::quote!(::resilient_core::__private);
    let blocking = func.sig.asyncness.is_none();
    let shape = match &func.sig.output {
        syn::ReturnType::Type(_, ty) if blocking && expand::stream_shape(ty).is_some() => {
            quote::quote!(Stream)
        }
        _ if blocking => quote::quote!(Blocking),
        _ => quote::quote!(Async),
    };
    let generic = |spec: &syn::Path| {
        let Some(first) = spec.segments.first() else {
            return true;
        };
        let name = first.ident.to_string();
        name == "Self"
            || (spec.segments.len() == 1 && name.chars().count() <= 2)
            || func.sig.generics.params.iter().any(|g| match g {
                syn::GenericParam::Type(t) => t.ident == first.ident,
                _ => false,
            })
    };
    // Tokens as a person writes them: `PetError::gave_up`, not
    // `PetError :: gave_up`.
    let text = |tokens: &dyn quote::ToTokens| {
        let mut out = tokens.to_token_stream().to_string();
        for (spaced, tight) in [
            (" :: ", "::"),
            (" . ", "."),
            ("( ", "("),
            (" )", ")"),
            (" ,", ","),
            ("& ", "&"),
        ] {
            out = out.replace(spaced, tight);
        }
        out
    };
    let links = layers.iter().map(|layer| {
        let attr = syn::Ident::new(
            match layer.kind {
                Kind::Retry => "Retry",
                Kind::CircuitBreaker => "CircuitBreaker",
                Kind::Timeout => "Timeout",
                Kind::ConcurrencyLimit => "ConcurrencyLimit",
                Kind::RateLimiter => "RateLimiter",
                Kind::Fallback => "Fallback",
                Kind::Chaos => "Chaos",
                Kind::Hedging => "Hedging",
            },
            Span::call_site(),
        );
        let spec = match layer.spec().filter(|s| !generic(s)) {
            Some(spec) => quote::quote!(::core::option::Option::Some(
                ::core::any::TypeId::of::<#spec>
            )),
            None => quote::quote!(::core::option::Option::None),
        };
        let key = layer.key().map(|k| text(k)).unwrap_or_default();
        let (outcome, fallback) = match &layer.args {
            LayerArgs::Chaos {
                outcome: Some(o), ..
            } => (text(o), (String::new(), String::new())),
            LayerArgs::Fallback(f) => (
                String::new(),
                (
                    f.method.value(),
                    match (&f.on, &f.on_written) {
                        (crate::model::FallbackOn::When(path), _) => {
                            format!("when = {}", text(path))
                        }
                        (_, Some(on)) => text(on),
                        (_, None) => String::new(),
                    },
                ),
            ),
            _ => (String::new(), (String::new(), String::new())),
        };
        let (method, on) = fallback;
        quote::quote! {
            #p::ChainLink {
                attr: #p::ChainAttr::#attr,
                spec: #spec,
                key: #key,
                outcome: #outcome,
                fallback: (#method, #on),
            }
        }
    });
    let name = func.sig.ident.to_string();
    quote::quote! {
        const _: () = {
            #p::inventory::submit! {
                #p::FnChain {
                    module: ::core::module_path!(),
                    name: #name,
                    shape: #p::FnShape::#shape,
                    links: &[#(#links),*],
                }
            }
        };
    }
}

/// Whether the attribute's arguments are the marker [`DONE`].
fn is_done(attr: &TokenStream) -> bool {
    let mut tokens = attr.clone().into_iter();
    matches!(
        (tokens.next(), tokens.next()),
        (Some(proc_macro2::TokenTree::Ident(i)), None) if i == DONE
    )
}
