//! Code generation for an annotated fn: checks of the fn's shape, argument
//! re-binding for layers that call the body again, and the nested chain.

use proc_macro2::{Group, Ident, Span, TokenStream, TokenTree};
use quote::{format_ident, quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::{FnArg, ItemFn, Pat, ReturnType, Type};

use crate::chain::Layer;
use crate::diag::Errors;
use crate::layer;

/// Checks that the fn can carry `layers`, reporting every problem at once.
pub(crate) fn check(func: &ItemFn, layers: &[Layer]) -> syn::Result<()> {
    let Some(first) = layers.first() else {
        return Ok(());
    };
    let name = first.kind.attr_name();
    let sig = &func.sig;
    let mut errors = Errors::default();
    if sig.asyncness.is_none() {
        errors.push(syn::Error::new(
            sig.fn_token.span,
            format!("`#[{name}]` needs an `async fn`: add `async` before `fn`"),
        ));
    }
    match &sig.output {
        ReturnType::Default => errors.push(syn::Error::new(
            sig.ident.span(),
            format!(
                "`#[{name}]` needs a fn that returns `Result<T, E>`, where `E: From<resilient_core::Error>`; add a return type such as `-> Result<Pet, PetError>`"
            ),
        )),
        ReturnType::Type(_, ty) if !is_result(ty) => errors.push(syn::Error::new(
            ty.span(),
            format!(
                "`#[{name}]` needs a fn that returns `Result<T, E>` (or an alias whose name ends in `Result`), where `E: From<resilient_core::Error>`; resilience failures are reported through `E`"
            ),
        )),
        ReturnType::Type(..) => {}
    }
    if let Some(again) = layers.iter().find(|l| l.kind.calls_again()) {
        let again = again.kind.attr_name();
        for arg in &sig.inputs {
            let mut_ref = match arg {
                FnArg::Receiver(r) => match (&r.reference, &r.mutability) {
                    (Some((and, _)), Some(m)) => Some(quote!(#and #m)),
                    (None, _) => mut_ref_type(&r.ty),
                    _ => None,
                },
                FnArg::Typed(t) => mut_ref_type(&t.ty),
            };
            if let Some(tokens) = mut_ref {
                errors.push(syn::Error::new_spanned(
                    tokens,
                    format!(
                        "`#[{again}]` runs the body again for each attempt, so it cannot take `&mut` arguments; take a shared reference (`&self`, `&T`) or an owned value that is `Clone`"
                    ),
                ));
            }
        }
    }
    errors.finish()
}

fn mut_ref_type(ty: &Type) -> Option<TokenStream> {
    match ty {
        Type::Reference(r) => r.mutability.map(|m| {
            let and = r.and_token;
            quote!(#and #m)
        }),
        Type::Paren(p) => mut_ref_type(&p.elem),
        Type::Group(g) => mut_ref_type(&g.elem),
        _ => None,
    }
}

/// `Result<..>`, `io::Result<..>`, `PetResult<..>`: a path whose last segment
/// names a result. The compiler checks the rest (see `__private::ResultType`).
fn is_result(ty: &Type) -> bool {
    match ty {
        Type::Path(p) => p
            .path
            .segments
            .last()
            .is_some_and(|s| s.ident.to_string().ends_with("Result")),
        Type::Group(g) => is_result(&g.elem),
        Type::Paren(p) => is_result(&p.elem),
        _ => false,
    }
}

fn contains_impl_trait(ty: &Type) -> bool {
    ty.to_token_stream()
        .into_iter()
        .any(|t| matches!(&t, TokenTree::Ident(i) if i == "impl"))
        || ty.to_token_stream().into_iter().any(|t| match t {
            TokenTree::Group(g) => contains_impl_trait_tokens(g.stream()),
            _ => false,
        })
}

fn contains_impl_trait_tokens(ts: TokenStream) -> bool {
    ts.into_iter().any(|t| match t {
        TokenTree::Ident(i) => i == "impl",
        TokenTree::Group(g) => contains_impl_trait_tokens(g.stream()),
        _ => false,
    })
}

/// Rewrites the fn's body into the nested chain. `check` has passed.
pub(crate) fn expand(mut func: ItemFn, layers: &[Layer]) -> TokenStream {
    let p = quote!(::resilient_core::__private);
    let again = layers.iter().any(|l| l.kind.calls_again());
    let ReturnType::Type(_, ret) = func.sig.output.clone() else {
        return quote!(#func);
    };

    // Arguments the body needs afresh for each attempt.
    let mut rebind = Vec::new();
    let mut owned_self = false;
    if again {
        for (i, arg) in func.sig.inputs.iter_mut().enumerate() {
            match arg {
                FnArg::Receiver(r) => {
                    if r.reference.is_none() && !is_ref_type(&r.ty) {
                        owned_self = true;
                        r.mutability = None;
                    }
                }
                FnArg::Typed(t) => {
                    let span = t.pat.span();
                    match &mut *t.pat {
                        Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => {
                            let name = pi.ident.clone();
                            let m = pi.mutability.take();
                            rebind.push(quote_spanned! {span=>
                                let #m #name = #p::clone_arg(&#name);
                            });
                        }
                        Pat::Wild(_) => {}
                        pat => {
                            let outer = format_ident!("__resilient_arg{}", i);
                            let inner = pat.clone();
                            *pat = Pat::Ident(syn::PatIdent {
                                attrs: Vec::new(),
                                by_ref: None,
                                mutability: None,
                                ident: outer.clone(),
                                subpat: None,
                            });
                            rebind.push(quote_spanned! {span=>
                                let #inner = #p::clone_arg(&#outer);
                            });
                        }
                    }
                }
            }
        }
    }

    let mut body = func.block.to_token_stream();
    if owned_self {
        let self_ident = Ident::new("__resilient_self", Span::call_site());
        body = rename_self(body, &self_ident);
        rebind.push(quote! { let #self_ident = #p::clone_arg(&self); });
    }
    // The body's `?` and `return` need the output type: a typed binding gives
    // it to the async block (not possible when it mentions `impl Trait`).
    // The return type, for the layers' bounds (errors about it point at it).
    let ret_arg = if contains_impl_trait(&ret) {
        quote!(::core::result::Result<_, _>)
    } else {
        ret.to_token_stream()
    };
    // The body runs in an async block of its own, typed as the fn's output,
    // so that its `return` and `?` mean what they meant in the fn; its
    // outcome then enters the chain.
    let typed = if contains_impl_trait(&ret) {
        quote!()
    } else {
        quote!(: #ret)
    };
    let body = quote! {
        async move {
            let __resilient_out #typed = async move #body.await;
            #p::body::<#ret_arg>(__resilient_out)
        }
    };
    let factory = if again {
        quote!(|| { #(#rebind)* #body })
    } else {
        quote!(move || #body)
    };
    let chain = nest(layers, &ret_arg, factory, again);
    // Keep the body's braces: the fn's span then stays in the user's code, so
    // lints on the fn as a whole (`dead_code`) still fire.
    // Awaited at the outermost spec: the future's bounds are then reported at
    // the same tokens as the call's, once.
    let outer = layers
        .first()
        .map_or_else(Span::call_site, |l| spec_span(&l.spec));
    let awaited = quote_spanned!(outer=> #chain.await);
    let block: syn::Block = syn::parse_quote!({
        let __resilient_wrap = #p::error_wrap::<#ret_arg>();
        #p::finish(#awaited, __resilient_wrap)
    });
    func.block.stmts = block.stmts;
    quote!(#func)
}

fn is_ref_type(ty: &Type) -> bool {
    match ty {
        Type::Reference(_) => true,
        Type::Paren(p) => is_ref_type(&p.elem),
        Type::Group(g) => is_ref_type(&g.elem),
        _ => false,
    }
}

/// The future of `layers[0]` wrapping the rest, innermost around `factory`.
fn nest(layers: &[Layer], ret: &TokenStream, factory: TokenStream, again: bool) -> TokenStream {
    match layers {
        [] => quote!((#factory)()),
        [only] => layer::call(only, ret, factory),
        [outer, rest @ ..] => {
            let inner = nest(rest, ret, factory, again);
            let inner_factory = if again {
                quote!(|| #inner)
            } else {
                quote!(move || #inner)
            };
            layer::call(outer, ret, inner_factory)
        }
    }
}

/// Replaces the `self` value in `tokens` with `with` (a clone made for one
/// attempt); `self::path` is left alone.
fn rename_self(tokens: TokenStream, with: &Ident) -> TokenStream {
    let trees: Vec<TokenTree> = tokens.into_iter().collect();
    let mut out = Vec::with_capacity(trees.len());
    for (i, tree) in trees.iter().enumerate() {
        match tree {
            TokenTree::Ident(ident) if ident == "self" => {
                let path_follows = matches!(
                    (trees.get(i + 1), trees.get(i + 2)),
                    (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)))
                        if a.as_char() == ':' && b.as_char() == ':'
                );
                if path_follows {
                    out.push(tree.clone());
                } else {
                    out.push(TokenTree::Ident(Ident::new(
                        &with.to_string(),
                        ident.span(),
                    )));
                }
            }
            TokenTree::Group(g) => {
                let mut group = Group::new(g.delimiter(), rename_self(g.stream(), with));
                group.set_span(g.span());
                out.push(TokenTree::Group(group));
            }
            other => out.push(other.clone()),
        }
    }
    out.into_iter().collect()
}

/// Where to report a problem with a spec: its last segment (`PetRetry` in
/// `crate::specs::PetRetry`), since stable Rust cannot join the segments.
pub(crate) fn spec_span(spec: &syn::Path) -> Span {
    spec.segments
        .last()
        .map_or_else(|| spec.span(), |s| s.ident.span())
}
