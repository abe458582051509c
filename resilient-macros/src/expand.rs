//! Code generation for an annotated fn: checks of the fn's shape, argument
//! re-binding for layers that call the body again, and the nested chain.

use proc_macro2::{Group, Ident, Span, TokenStream, TokenTree};
use quote::{format_ident, quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::{FnArg, Pat, ReturnType, Type};

use crate::diag::Errors;
use crate::layer;
use crate::model::{Context, FallbackArgs, FallbackOn, Func, Kind, Layer, LayerArgs, Receiver};

fn receiver(sig: &syn::Signature) -> Option<Receiver> {
    sig.receiver().map(|r| {
        if r.reference.is_some() || is_ref_type(&r.ty) {
            Receiver::Ref
        } else {
            Receiver::Owned
        }
    })
}

/// The names of the fn's parameters that a fallback can name.
fn param_names(sig: &syn::Signature) -> Vec<Ident> {
    sig.inputs
        .iter()
        .filter_map(|arg| match arg {
            FnArg::Typed(t) => match &*t.pat {
                Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => {
                    Some(pi.ident.clone())
                }
                _ => None,
            },
            FnArg::Receiver(_) => None,
        })
        .collect()
}

/// Checks a fallback's reference against the fn's parameters.
fn check_fallback(func: &Func, f: &FallbackArgs, errors: &mut Errors) {
    let names = param_names(&func.sig);
    let listed = || {
        if names.is_empty() {
            "it has none that can be named (patterns and `ref` bindings cannot be)".to_owned()
        } else {
            names
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    let method_fallback = f.target.get_ident().is_some();
    if let Some(r) = func.sig.receiver() {
        if method_fallback && r.reference.is_some() && r.mutability.is_some() {
            errors.push(syn::Error::new(
                f.method.span(),
                format!(
                    "`{}` takes `&mut self`, which the call and its fallback cannot both use; take `&self`, or name a free fn as the fallback (a path such as `crate::cache::lookup(id)`)",
                    func.sig.ident
                ),
            ));
        }
    }
    let mut_refs: Vec<Ident> = func
        .sig
        .inputs
        .iter()
        .filter_map(|arg| match arg {
            FnArg::Typed(t) => match (&*t.pat, mut_ref_type(&t.ty)) {
                (Pat::Ident(pi), Some(_)) => Some(pi.ident.clone()),
                _ => None,
            },
            FnArg::Receiver(_) => None,
        })
        .collect();
    for a in &f.args {
        if mut_refs.contains(a) {
            errors.push(syn::Error::new(
                f.method.span(),
                format!("`{a}` is a `&mut` argument, which the call and its fallback cannot both use; leave it out of `method = \"..\"`"),
            ));
        } else if a == "self" {
            errors.push(syn::Error::new(
                f.method.span(),
                "a fallback method is called on the same receiver: leave `self` out of `method = \"..\"`",
            ));
        } else if !names.iter().any(|n| n == a) {
            errors.push(syn::Error::new(
                f.method.span(),
                format!(
                    "`{a}` is not a parameter of `{}`; the fallback's arguments are named by the fn's parameters: {}",
                    func.sig.ident,
                    listed()
                ),
            ));
        }
    }
}

/// The error for a fallback (`layers[at]`) whose `on = ..` takes only
/// errors that no attribute below it raises, if it is one: it would be
/// compiled, called never, and its absence noticed only in an outage.
fn never_taken(func: &Func, layers: &[Layer], at: usize, f: &FallbackArgs) -> Option<syn::Error> {
    use Kind::{Chaos, CircuitBreaker, ConcurrencyLimit, RateLimiter, Retry, Timeout};
    let (on, takes, raisers, such_as): (&str, &str, &[Kind], &str) = match f.on {
        FallbackOn::Resilience => (
            "resilience",
            "the failures a resilience attribute below `#[fallback]` raises",
            &[Retry, CircuitBreaker, Timeout, ConcurrencyLimit, RateLimiter, Chaos],
            "a resilience attribute (such as `#[retryable(..)]`)",
        ),
        // A retry refuses first calls with adaptive throttling's
        // `first_calls`, a setting: checked when the registry is built.
        FallbackOn::Rejection => (
            "rejection",
            "the rejections of a `#[circuit_breakable]`, `#[rate_limited]`, `#[concurrency_limit]` or `#[retryable]` (adaptive throttling with `first_calls`) below `#[fallback]`",
            &[CircuitBreaker, RateLimiter, ConcurrencyLimit, Retry],
            "the breaker, limit or retry whose rejections it answers",
        ),
        FallbackOn::Timeout => (
            "timeout",
            "the timeouts of a `#[timeout]` below `#[fallback]`",
            &[Timeout],
            "a `#[timeout(..)]`",
        ),
        FallbackOn::Any | FallbackOn::When(_) => return None,
    };
    let below = layers.get(at + 1..).unwrap_or_default();
    if below.iter().any(|l| raisers.contains(&l.kind)) {
        return None;
    }
    let above: Vec<Kind> = layers[..at]
        .iter()
        .map(|l| l.kind)
        .filter(|k| raisers.contains(k))
        .collect();
    let names = |kinds: &[Kind]| {
        kinds
            .iter()
            .map(|k| format!("`#[{}]`", k.attr_name()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let fn_name = &func.sig.ident;
    let (why, fix) = if let Some(first) = above.first() {
        let (wrap, its) = if above.len() == 1 {
            ("wraps", "its")
        } else {
            ("wrap", "their")
        };
        (
            format!(
                " ({} above it {wrap} the fallback, so none of {its} errors reach it)",
                names(&above)
            ),
            format!(
                "move `#[fallback(..)]` above `#[{}(..)]`",
                first.attr_name()
            ),
        )
    } else {
        let why = if matches!(f.on, FallbackOn::Resilience)
            && below.iter().any(|l| l.kind == Kind::Hedging)
        {
            " (`#[hedged]` raises no error of its own: when every attempt fails, the last failure passes as it was)"
        } else if matches!(f.on, FallbackOn::Timeout) && below.iter().any(|l| l.kind == Retry) {
            " (a retry's own `timeout` key gives up with `RetryExhausted`, which `on = resilience` answers)"
        } else {
            ""
        };
        (
            why.to_owned(),
            format!("put `#[fallback(..)]` above {such_as}"),
        )
    };
    let message = format!(
        "`on = {on}` answers only {takes}, and `{fn_name}` has none below it{why}: this fallback can never be taken; {fix}, or remove `on = {on}` to answer every failure"
    );
    Some(match &f.on_written {
        Some(written) => syn::Error::new_spanned(written, message),
        None => syn::Error::new(f.method.span(), message),
    })
}

/// Checks that the fn can carry `layers`, reporting every problem at once.
pub(crate) fn check(func: &Func, layers: &[Layer]) -> syn::Result<()> {
    let Some(first) = layers.first() else {
        return Ok(());
    };
    let name = first.kind.attr_name();
    let sig = &func.sig;
    // Before the other checks: a `const fn` would be taken for a blocking
    // fn, and every call the chain makes reported as one a `const fn`
    // cannot make.
    if let Some(constness) = sig.constness {
        return Err(syn::Error::new(
            constness.span,
            format!(
                "`#[{name}]` does not go on a `const fn`: a resilience mechanism acts when the fn is called at run time (it reads the clock and the registry, and waits), which a `const fn` cannot do; \
                 it takes an `async fn`, a blocking fn (a plain `fn` returning `Result<T, E>`) or a fn that returns a stream: remove `const`, \
                 or keep `{}` a `const fn` and annotate a fn that calls it",
                sig.ident
            ),
        ));
    }
    if sig.asyncness.is_none() {
        if let Some(e) = rewritten_above(func, name) {
            return Err(e);
        }
    }
    let mut errors = Errors::default();
    for (at, layer) in layers.iter().enumerate() {
        if let LayerArgs::Fallback(f) = &layer.args {
            check_fallback(func, f, &mut errors);
            if let Some(e) = never_taken(func, layers, at, f) {
                errors.push(e);
            }
        }
    }
    // A plain fn is a blocking fn: its waits block the thread. What cannot
    // work on a thread is refused at its spec. A plain fn that returns a
    // stream is a stream's: what cannot work on a stream is refused.
    let blocking = sig.asyncness.is_none();
    let stream = match &sig.output {
        ReturnType::Type(_, ty) if blocking => stream_shape(ty),
        _ => None,
    };
    if let Some(shape) = &stream {
        for layer in layers {
            if let Some(why) = not_on_streams(layer.kind) {
                let at = match (&layer.args, layer.spec()) {
                    (_, Some(spec)) => crate::model::spec_span(spec),
                    (LayerArgs::Fallback(f), None) => f.method.span(),
                    _ => Span::call_site(),
                };
                errors.push(syn::Error::new(
                    at,
                    format!(
                        "`#[{}]` does not take a stream (yet), and `{}` returns one: {why}",
                        layer.kind.attr_name(),
                        sig.ident
                    ),
                ));
            }
        }
        if !is_result(&shape.item) {
            errors.push(syn::Error::new_spanned(
                &shape.item,
                format!(
                    "`#[{name}]` on a stream needs items of type `Result<T, E>` (or an alias whose name ends in `Result`), where `E: From<resilient_core::Error>`: a failure, or a resilience error that ends the stream, is an `Err` item; make the stream's `Item` a `Result`"
                ),
            ));
        }
    } else if blocking {
        for layer in layers {
            if let (Some(why), Some(spec)) = (async_only(layer.kind), layer.spec()) {
                errors.push(syn::Error::new(
                    crate::model::spec_span(spec),
                    format!(
                        "`#[{}]` needs an `async fn`, and `{}` is a blocking fn (no `async`): {why}",
                        layer.kind.attr_name(),
                        sig.ident
                    ),
                ));
            }
        }
    }
    match &sig.output {
        ReturnType::Type(..) if stream.is_some() => {}
        ReturnType::Type(_, ty) if blocking && returns_future(ty) => errors.push(syn::Error::new_spanned(
            ty,
            format!(
                "`#[{name}]` takes an `async fn`, or a plain fn that returns `Result<T, E>` (a blocking fn); `{}` returns a future: write it as an `async fn`",
                sig.ident
            ),
        )),
        ReturnType::Default => errors.push(syn::Error::new(
            sig.ident.span(),
            format!(
                "`#[{name}]` needs a fn that returns `Result<T, E>`, where `E: From<resilient_core::Error>`; add a return type such as `-> Result<Pet, PetError>`"
            ),
        )),
        ReturnType::Type(_, ty) if !blocking && stream_shape(ty).is_some() => {
            errors.push(syn::Error::new(
                sig.asyncness.map_or_else(|| ty.span(), |a| a.span),
                format!(
                    "`#[{name}]` takes a fn that returns a stream as a plain fn: `{}` is an `async fn` whose future returns a stream; remove `async` (the stream is made when it is first polled)",
                    sig.ident
                ),
            ))
        }
        ReturnType::Type(_, ty) if !is_result(ty) => errors.push(syn::Error::new(
            ty.span(),
            if blocking {
                format!(
                    "`#[{name}]` needs a fn that returns `Result<T, E>` (or an alias whose name ends in `Result`), where `E: From<resilient_core::Error>`, or a stream of such results written as `impl Stream<Item = Result<T, E>>`, `Pin<Box<dyn Stream<Item = Result<T, E>> + Send>>` or `BoxStream<'_, Result<T, E>>` (a named stream type cannot be told from any other type: return it as `impl Stream<..>`); resilience failures are reported through `E`"
                )
            } else {
                format!(
                    "`#[{name}]` needs a fn that returns `Result<T, E>` (or an alias whose name ends in `Result`), where `E: From<resilient_core::Error>`; resilience failures are reported through `E`"
                )
            },
        )),
        ReturnType::Type(_, ty) => {
            if let Some(hidden) = impl_trait_in(ty) {
                errors.push(syn::Error::new_spanned(
                    hidden,
                    format!(
                        "`#[{name}]` needs the fn's result types by name, and `impl Trait` hides one; name the type here (such as `Result<String, PetError>` for `Result<impl Display, PetError>`)"
                    ),
                ));
            }
        }
    }
    if let Some(again) = layers.iter().find(|l| l.kind.calls_again()) {
        let again = again.kind.attr_name();
        for arg in &sig.inputs {
            let mut_ref = match arg {
                FnArg::Receiver(r) => match (&r.reference, &r.mutability) {
                    (Some((and, _)), Some(m)) => Some(quote!(#and #m)),
                    (None, _) => mut_ref_type(&r.ty).or_else(|| mut_ref_within(&r.ty)),
                    _ => None,
                },
                FnArg::Typed(t) => mut_ref_type(&t.ty).or_else(|| mut_ref_within(&t.ty)),
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

/// Why a blocking fn cannot carry an attribute of `kind`, if it cannot.
fn async_only(kind: Kind) -> Option<&'static str> {
    match kind {
        Kind::Timeout => Some(
            "a thread cannot be stopped, so a timeout could only stop waiting while the work goes on holding what it holds; \
             give the blocking client its own timeout (a socket's read timeout, a statement timeout), which bounds the work itself \
             (a `#[timeout]` on an `async fn` that awaits this one through `tokio::task::spawn_blocking` bounds only the caller's wait)",
        ),
        Kind::Hedging => Some(
            "hedged attempts run side by side in one future, which a thread cannot do; \
             call this fn from an `async fn` through `tokio::task::spawn_blocking` and put `#[hedged(..)]` on that one",
        ),
        Kind::Chaos => Some(
            "injected latency is a timer of the fn's future; \
             put `#[chaos(..)]` on an `async fn` that calls this one through `tokio::task::spawn_blocking`",
        ),
        Kind::Retry
        | Kind::CircuitBreaker
        | Kind::ConcurrencyLimit
        | Kind::RateLimiter
        | Kind::Fallback => None,
    }
}

/// Why a stream cannot carry an attribute of `kind`, if it cannot.
fn not_on_streams(kind: Kind) -> Option<&'static str> {
    match kind {
        Kind::Hedging => {
            Some("a stream cannot be hedged; hedge an `async fn` that returns the whole answer")
        }
        Kind::Chaos => Some("faults are injected into `async fn`s only"),
        Kind::Retry
        | Kind::CircuitBreaker
        | Kind::Timeout
        | Kind::ConcurrencyLimit
        | Kind::RateLimiter
        | Kind::Fallback => None,
    }
}

/// A stream-returning fn's stream: its item type, and whether the fn
/// returns it boxed.
pub(crate) struct StreamShape {
    pub(crate) item: Type,
    pub(crate) boxed: bool,
}

/// The stream a return type names: `impl Stream<Item = X> + ..`,
/// `Pin<Box<dyn Stream<Item = X> + ..>>`, or `BoxStream<'_, X>`.
pub(crate) fn stream_shape(ty: &Type) -> Option<StreamShape> {
    fn item_of(
        bounds: &syn::punctuated::Punctuated<syn::TypeParamBound, syn::Token![+]>,
    ) -> Option<Type> {
        bounds.iter().find_map(|b| match b {
            syn::TypeParamBound::Trait(t) => {
                let last = t.path.segments.last()?;
                if last.ident != "Stream" {
                    return None;
                }
                match &last.arguments {
                    syn::PathArguments::AngleBracketed(args) => {
                        args.args.iter().find_map(|a| match a {
                            syn::GenericArgument::AssocType(at) if at.ident == "Item" => {
                                Some(at.ty.clone())
                            }
                            _ => None,
                        })
                    }
                    _ => None,
                }
            }
            _ => None,
        })
    }
    fn type_args(seg: &syn::PathSegment) -> Vec<&Type> {
        match &seg.arguments {
            syn::PathArguments::AngleBracketed(args) => args
                .args
                .iter()
                .filter_map(|a| match a {
                    syn::GenericArgument::Type(t) => Some(t),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        }
    }
    match ty {
        Type::ImplTrait(i) => item_of(&i.bounds).map(|item| StreamShape { item, boxed: false }),
        Type::Group(g) => stream_shape(&g.elem),
        Type::Paren(p) => stream_shape(&p.elem),
        Type::Path(p) if p.qself.is_none() => {
            let last = p.path.segments.last()?;
            if last.ident == "BoxStream" || last.ident == "LocalBoxStream" {
                let item = type_args(last).first().map(|t| (*t).clone())?;
                return Some(StreamShape { item, boxed: true });
            }
            if last.ident != "Pin" {
                return None;
            }
            let Type::Path(boxed) = *type_args(last).first()? else {
                return None;
            };
            let b = boxed.path.segments.last()?;
            if b.ident != "Box" {
                return None;
            }
            match type_args(b).first()? {
                Type::TraitObject(o) => {
                    item_of(&o.bounds).map(|item| StreamShape { item, boxed: true })
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// Whether a return type is a future: `impl Future<..>`, or a boxed one
/// (`Pin<Box<dyn Future<..>>>`, `BoxFuture<..>`).
fn returns_future(ty: &Type) -> bool {
    fn names_future(tokens: TokenStream) -> bool {
        tokens.into_iter().any(|t| match t {
            TokenTree::Ident(i) => i == "Future" || i == "BoxFuture" || i == "LocalBoxFuture",
            TokenTree::Group(g) => names_future(g.stream()),
            _ => false,
        })
    }
    !is_result(ty) && names_future(ty.to_token_stream())
}

/// The error for a fn written `async fn` that an attribute expanded before
/// this one turned into a plain fn, if its shape says so: the user sees
/// `async fn` in the source, so "add `async`" would contradict it.
fn rewritten_above(func: &Func, name: &str) -> Option<syn::Error> {
    let sig = &func.sig;
    let async_trait = sig
        .generics
        .lifetimes()
        .any(|l| l.lifetime.ident == "async_trait");
    if async_trait {
        return Some(syn::Error::new(
            sig.ident.span(),
            format!(
                "`#[{name}]` needs an `async fn`, and `#[async_trait]` has already turned this method into a fn that returns a boxed future; \
                 move the body into an inherent `async fn` that carries `#[{name}(..)]` and call it from the trait method, \
                 or write the trait with `async fn` and no `#[async_trait]` (Rust 1.75 and later)"
            ),
        ));
    }
    // `#[tokio::test]` and `#[tokio::main]` leave `let body = async { .. };`
    // and a runtime that blocks on it; the test one also `#[test]`.
    let test_attr = func.attrs.iter().any(|a| {
        let path = a.path();
        path.leading_colon.is_some()
            && path
                .segments
                .iter()
                .map(|s| s.ident.to_string())
                .eq(["core", "prelude", "v1", "test"])
    });
    // Parsed here only: a fn that is not `async` is an error anyway.
    let stmts = syn::parse2::<syn::Block>(func.body.to_token_stream())
        .map(|b| b.stmts)
        .unwrap_or_default();
    let async_local = stmts.iter().any(|stmt| {
        matches!(stmt, syn::Stmt::Local(syn::Local { pat: Pat::Ident(p), init: Some(init), .. })
            if p.ident == "body" && matches!(&*init.expr, syn::Expr::Async(_)))
    });
    // And the runtime it blocks on, so that a plain fn of the user's that
    // happens to hold `let body = async ..` is not mistaken for one.
    // tokio's own words, so that a blocking fn of the user's that blocks
    // on a future of its own is not mistaken for one.
    let blocks_on = contains_ident(func.body.stream(), "block_on")
        && contains_literal(func.body.stream(), "\"Failed building the Runtime\"");
    if async_local && blocks_on {
        let above = if test_attr {
            "`#[tokio::test]`"
        } else {
            "`#[tokio::main]` (or `#[tokio::test]`)"
        };
        return Some(syn::Error::new(
            Span::call_site(),
            format!(
                "`#[{name}]` needs an `async fn`, and {above} above it has already turned this one into a plain fn that runs its body on a runtime; \
                 attributes apply from the top down, so put `#[{name}(..)]` above it"
            ),
        ));
    }
    None
}

/// Whether `tokens` hold the literal `text` (as written, quotes included),
/// at any depth.
fn contains_literal(tokens: TokenStream, text: &str) -> bool {
    tokens.into_iter().any(|t| match t {
        TokenTree::Literal(l) => l.to_string() == text,
        TokenTree::Group(g) => contains_literal(g.stream(), text),
        _ => false,
    })
}

/// Whether `tokens` hold the identifier `name`, at any depth.
fn contains_ident(tokens: TokenStream, name: &str) -> bool {
    tokens.into_iter().any(|t| match t {
        TokenTree::Ident(i) => i == name,
        TokenTree::Group(g) => contains_ident(g.stream(), name),
        _ => false,
    })
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

/// A `&mut` inside a type that is `Clone` only if its parts are (a tuple, an
/// array, an `Option`), as in `(count, step): (&mut u32, u32)`: such an
/// argument cannot be cloned for another attempt either.
fn mut_ref_within(ty: &Type) -> Option<TokenStream> {
    let inner = |ty: &Type| mut_ref_type(ty).or_else(|| mut_ref_within(ty));
    match ty {
        Type::Tuple(t) => t.elems.iter().find_map(inner),
        Type::Array(a) => inner(&a.elem),
        Type::Paren(p) => mut_ref_within(&p.elem),
        Type::Group(g) => mut_ref_within(&g.elem),
        Type::Path(p) if p.qself.is_none() => {
            let last = p.path.segments.last()?;
            // `Pin<&mut T>` (as in `self: Pin<&mut Self>`) is no more
            // `Clone` than `&mut T`.
            if last.ident != "Option" && last.ident != "Pin" {
                return None;
            }
            match &last.arguments {
                syn::PathArguments::AngleBracketed(args) => {
                    args.args.iter().find_map(|a| match a {
                        syn::GenericArgument::Type(t) => inner(t),
                        _ => None,
                    })
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// The first `impl Trait` in a return type, as in `Result<impl Display, E>`.
fn impl_trait_in(ty: &Type) -> Option<&syn::TypeImplTrait> {
    match ty {
        Type::ImplTrait(i) => Some(i),
        Type::Tuple(t) => t.elems.iter().find_map(impl_trait_in),
        Type::Array(a) => impl_trait_in(&a.elem),
        Type::Slice(s) => impl_trait_in(&s.elem),
        Type::Reference(r) => impl_trait_in(&r.elem),
        Type::Paren(p) => impl_trait_in(&p.elem),
        Type::Group(g) => impl_trait_in(&g.elem),
        Type::Path(p) => p.path.segments.iter().find_map(|seg| match &seg.arguments {
            syn::PathArguments::AngleBracketed(args) => args.args.iter().find_map(|a| match a {
                syn::GenericArgument::Type(t) => impl_trait_in(t),
                _ => None,
            }),
            _ => None,
        }),
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

/// Rewrites the fn's body into the nested chain. `check` has passed.
/// `markers` go first in the new body.
pub(crate) fn expand(mut func: Func, layers: &[Layer], markers: TokenStream) -> TokenStream {
    let p = quote!(::resilient_core::__private);
    let again = layers.iter().any(|l| l.kind.calls_again());
    let ReturnType::Type(_, ret) = func.sig.output.clone() else {
        let (inner_attrs, rest) = func.split_body();
        return func.with_body(quote!(#(#![#inner_attrs])* #markers #rest));
    };

    let fallback_names: Vec<Ident> = layers
        .iter()
        .filter_map(|l| match &l.args {
            LayerArgs::Fallback(f) => Some(f.args.iter().cloned()),
            LayerArgs::Spec(_) | LayerArgs::Chaos { .. } | LayerArgs::Keyed { .. } => None,
        })
        .flatten()
        .collect();
    // Arguments the body needs afresh for each attempt, cloned by the fn
    // whose message names the attribute that asks for them (retry's when
    // both do).
    let retried = layers.iter().any(|l| l.kind == Kind::Retry);
    let (clone_arg, clone_receiver) = if retried {
        (quote!(clone_arg), quote!(clone_receiver))
    } else {
        (quote!(hedge_arg), quote!(hedge_receiver))
    };
    let mut rebind = Vec::new();
    let mut owned_self = None;
    let mut self_mut = None;
    if again {
        for (i, arg) in func.sig.inputs.iter_mut().enumerate() {
            match arg {
                FnArg::Receiver(r) => {
                    if r.reference.is_none() && !is_ref_type(&r.ty) {
                        owned_self = Some(r.self_token.span);
                        self_mut = r.mutability.take();
                    }
                }
                FnArg::Typed(t) => {
                    let span = t.pat.span();
                    match &mut *t.pat {
                        Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => {
                            let name = pi.ident.clone();
                            let m = pi.mutability.take();
                            // A parameter a fallback names is used there,
                            // even if the body leaves its copy alone.
                            let allow = fallback_names
                                .contains(&name)
                                .then(|| quote!(#[allow(unused_variables)]));
                            rebind.push(quote_spanned! {span=>
                                #allow
                                let #m #name = #p::#clone_arg(&#name);
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
                                let #inner = #p::#clone_arg(&#outer);
                            });
                        }
                    }
                }
            }
        }
    }

    // Inner attributes (`#![allow(..)]`) go on the fn as outer ones: the
    // body becomes an async block, where they are not allowed.
    let (inner_attrs, mut body) = func.split_body();
    for inner in inner_attrs {
        let outer = quote!(#[#inner]);
        if let Ok(mut attrs) = syn::parse::Parser::parse2(syn::Attribute::parse_outer, outer) {
            func.attrs.append(&mut attrs);
        }
    }
    if let Some(receiver_span) = owned_self {
        let self_ident = Ident::new("__resilient_self", Span::call_site());
        body = rename_self(body, &self_ident);
        // At the receiver, so that a receiver that is not `Clone` is
        // reported there.
        let this = Ident::new("self", receiver_span);
        rebind.push(quote_spanned! {receiver_span=>
            let #self_mut #self_ident = #p::#clone_receiver(&#this);
        });
    }
    if func.sig.asyncness.is_none() {
        if let Some(shape) = stream_shape(&ret) {
            return expand_stream(&func, &ret, layers, markers, body, &rebind, &shape);
        }
    }
    // The return type, for the layers' bounds (errors about it point at it).
    // `check` rejected `impl Trait` in it, which could not be named here.
    let ret_arg = ret.to_token_stream();
    // The body runs in an async block of its own, typed as the fn's output,
    // so that its `return` and `?` mean what they meant in the fn; its
    // outcome then enters the chain. Under a retry it takes fresh clones of
    // the arguments for each attempt; the originals stay in the fn. Inside
    // a timeout, its await is bounded by the timer.
    let typed = quote!(: #ret);
    // Whether the body is inside a `#[timeout]` whose block it can leave:
    // not when a `#[hedged]` lies between them, which runs the body in an
    // attempt of its own (bounded as a whole; see `nest`).
    let timed = layers.iter().fold(false, |timed, l| match l.kind {
        Kind::Hedging => false,
        Kind::Timeout => true,
        _ => timed,
    });
    // A `return` of the fn's type that never runs, first in the body: the
    // block's output is then known before the body is checked, so a type
    // error in the body is reported in the body (at `name` in `Ok(name)`,
    // as without the attribute), not at the attribute. Inside the body's
    // own braces, so that the body is not a block in a block (which
    // `unused_braces` would report in the user's code).
    let mut block = Group::new(
        proc_macro2::Delimiter::Brace,
        quote! {
            if let ::core::option::Option::Some(__resilient_ret) =
                ::core::option::Option::None::<#ret_arg>
            {
                #[allow(unreachable_code)]
                return __resilient_ret;
            }
            #body
        },
    );
    block.set_span(func.body.span());
    let body_span = func.body.span();
    let blocking = func.sig.asyncness.is_none();
    // Under a retry, the body runs marked with the attempt when it is a
    // retry (`resilient_core::retry::current_attempt`): the innermost
    // retry's call is in scope at the body, unless a `#[hedged]` inside it
    // runs the body in attempts of its own.
    let last = |kind: Kind| layers.iter().rposition(|l| l.kind == kind);
    let marked = match (last(Kind::Retry), last(Kind::Hedging)) {
        (Some(retry), Some(hedging)) => retry > hedging,
        (retry, _) => retry.is_some(),
    };
    // At the spec, where a spec of the wrong kind is reported once: the
    // call's type is unknown then, and an error of its own at the body
    // would repeat it.
    let retry_span = layers
        .iter()
        .rev()
        .find(|l| l.kind == Kind::Retry)
        .and_then(|l| l.spec())
        .map_or_else(Span::call_site, crate::model::spec_span);
    let attempt = quote_spanned!(retry_span=> __resilient_retry.attempt());
    let body = if blocking {
        // A closure called in place: `return` and `?` leave it as they
        // left the fn.
        if marked {
            quote_spanned!(body_span=> #p::call_in_attempt(#attempt, move || -> #ret #block))
        } else {
            quote_spanned!(body_span=> #p::call_once(move || -> #ret #block))
        }
    } else if marked {
        let body = quote_spanned!(body_span=> #p::in_attempt(#attempt, async move #block));
        layer::awaited(timed, Span::call_site(), body)
    } else {
        let body = quote_spanned!(body_span=> async move #block);
        layer::awaited(timed, Span::call_site(), body)
    };
    let body = quote! {
        {
            #(#rebind)*
            let __resilient_body #typed = #body;
            #p::body::<#ret_arg, _, _>(__resilient_body)
        }
    };
    let cx = context(&func, ret_arg.clone(), again, blocking);
    // Without a retry the call consumes its arguments: a fallback gets clones
    // saved before it.
    let mut saved = Vec::new();
    if !again {
        for layer in layers {
            if let LayerArgs::Fallback(f) = &layer.args {
                // As in `layer::fallback`: at the string, marked as generated.
                let span = Span::call_site().located_at(f.method.span());
                let takes_self =
                    f.target.get_ident().is_some() && cx.receiver == Some(Receiver::Owned);
                let self_ident = Ident::new("self", cx.self_span);
                let names = f.args.iter().chain(takes_self.then_some(&self_ident));
                for name in names {
                    let to = layer::fallback_saved(name);
                    if !saved.iter().any(|(t, _): &(Ident, TokenStream)| *t == to) {
                        let source = quote!(#name);
                        saved.push((to.clone(), {
                            // The receiver's clone at the receiver.
                            let at = if name == "self" { cx.self_span } else { span };
                            let clone = layer::fallback_clone_fn(name);
                            quote_spanned!(at=> let #to = #p::#clone(&#source);)
                        }));
                    }
                }
            }
        }
    }
    let saved = saved.into_iter().map(|(_, s)| s);
    // One expression: each layer's code around the next, all in the fn's own
    // future, with no future or closure per layer (a timeout bounds each
    // await inside it; a fallback decides on the outcome in place).
    let chain = nest(layers, &cx, false, body);
    // Spanned from the return type's first token to its last, so that a
    // missing `From<resilient_core::Error>` is reported at the whole type.
    let mut ret_tokens = ret.to_token_stream().into_iter().map(|t| t.span());
    let first = ret_tokens.next().unwrap_or_else(Span::call_site);
    let last = ret_tokens.last().unwrap_or(first);
    let wrap_fn = quote_spanned!(first=> ::resilient_core::__private::error_wrap::<#ret_arg, _>);
    let wrap = quote_spanned!(last=> #wrap_fn());
    func.with_body(quote! {
        #markers
        let __resilient_wrap = #wrap;
        #(#saved)*
        let __resilient_out = #chain;
        #p::finish::<#ret_arg, _, _>(__resilient_out, __resilient_wrap)
    })
}

/// The body of a fn that returns a stream: each layer a stream around the
/// next (innermost the body's, made when first polled), then the fn's
/// error type for resilience errors. `check` has passed.
fn expand_stream(
    func: &Func,
    ret: &Type,
    layers: &[Layer],
    markers: TokenStream,
    body: TokenStream,
    rebind: &[TokenStream],
    shape: &StreamShape,
) -> TokenStream {
    let p = quote!(::resilient_core::__private);
    let item = shape.item.to_token_stream();
    let body_span = func.body.span();
    let mut block = Group::new(proc_macro2::Delimiter::Brace, body);
    block.set_span(body_span);
    // A closure of its own, so that the body's `return` gives the body's
    // stream. Its stream is checked against the fn's return type so that
    // a type error in the body reads as without the attributes: a boxed
    // stream's type is named, so the closure returns it (a mismatch is
    // reported at the `return` or the tail, as in the fn); an `impl Stream`
    // cannot be named there, so the stream is cast to `&dyn Stream<Item =
    // ..>` at the return type, where rustc reports a mismatch without the
    // attributes, and once: the same failure of the fn's own return type,
    // at the same place, is not reported again.
    let body = if shape.boxed {
        let ret = static_object(ret);
        quote_spanned!(body_span=> #p::stream_lift(#p::call_once(move || -> #ret #block)))
    } else {
        let mut spans = ret.to_token_stream().into_iter().map(|t| t.span());
        let first = spans.next().unwrap_or_else(Span::call_site);
        let last = spans.last().unwrap_or(first);
        let and = quote_spanned!(first=> &);
        let stream = Ident::new("__resilient_stream", last);
        quote_spanned! {body_span=>
            {
                let __resilient_stream = #p::call_once(move || #block);
                let _: &dyn #p::Stream<Item = #item> = #and #stream;
                #p::stream_lift(__resilient_stream)
            }
        }
    };
    let again = layers.iter().any(|l| l.kind.calls_again());
    let cx = context(func, item.clone(), again, false);
    let chain = layers.iter().rev().fold(body, |inner, layer| {
        layer::stream::call(layer, &cx, &item, rebind, inner)
    });
    // At the item type: a missing `From<resilient_core::Error>` is reported
    // there.
    let mut spans = item.clone().into_iter().map(|t| t.span());
    let first = spans.next().unwrap_or_else(Span::call_site);
    let last = spans.last().unwrap_or(first);
    let wrap_fn = quote_spanned!(first=> #p::error_wrap::<#item, _>);
    let wrap = quote_spanned!(last=> #wrap_fn());
    let stream = quote!(#p::stream_lower(__resilient_wrap, #chain));
    let stream = if shape.boxed {
        quote!(::std::boxed::Box::pin(#stream))
    } else {
        stream
    };
    func.with_body(quote! {
        #markers
        let __resilient_wrap = #wrap;
        #stream
    })
}

/// `ty` with `+ 'static` on the `dyn` of `Pin<Box<dyn ..>>` if it names
/// no lifetime: what the elided bound means in the fn's signature, written
/// out for a closure's return type, where it would be inferred instead (and
/// a mismatch would then name another type than without the attributes).
fn static_object(ty: &Type) -> Type {
    fn visit(ty: &mut Type) {
        match ty {
            Type::Group(g) => visit(&mut g.elem),
            Type::Paren(p) => visit(&mut p.elem),
            // `Pin<..>`, then `Box<..>`: the first argument of each.
            Type::Path(p) => {
                let args = p.path.segments.last_mut().map(|s| &mut s.arguments);
                if let Some(syn::PathArguments::AngleBracketed(args)) = args {
                    if let Some(syn::GenericArgument::Type(t)) = args.args.first_mut() {
                        visit(t);
                    }
                }
            }
            Type::TraitObject(o)
                if !o
                    .bounds
                    .iter()
                    .any(|b| matches!(b, syn::TypeParamBound::Lifetime(_))) =>
            {
                o.bounds.push(syn::parse_quote!('static));
            }
            _ => {}
        }
    }
    let mut ty = ty.clone();
    visit(&mut ty);
    ty
}

/// What the layers need to know of `func`, whose output (a stream fn's:
/// its item) is `ret`.
fn context(func: &Func, ret: TokenStream, again: bool, blocking: bool) -> Context {
    Context {
        ret,
        again,
        receiver: receiver(&func.sig),
        self_span: func
            .sig
            .receiver()
            .map_or_else(Span::call_site, |r| r.self_token.span),
        fn_name: func.sig.ident.clone(),
        blocking,
    }
}

fn is_ref_type(ty: &Type) -> bool {
    match ty {
        Type::Reference(_) => true,
        Type::Paren(p) => is_ref_type(&p.elem),
        Type::Group(g) => is_ref_type(&g.elem),
        _ => false,
    }
}

/// The outcome of `layers[0]` around the rest, innermost around `body`;
/// `timed` says whether `layers` are inside the fn's `#[timeout]`.
fn nest(layers: &[Layer], cx: &Context, timed: bool, body: TokenStream) -> TokenStream {
    match layers.split_first() {
        None => body,
        Some((outer, rest)) => {
            // Hedging runs what is inside it as attempts of their own (async
            // blocks), which a timeout outside bounds as a whole: no await
            // inside them can leave the timeout's block.
            let inner_timed = match outer.kind {
                Kind::Hedging => false,
                Kind::Timeout => true,
                _ => timed,
            };
            layer::call(outer, cx, timed, nest(rest, cx, inner_timed, body))
        }
    }
}

/// Replaces the `self` value in `tokens` with `with` (a clone made for one
/// attempt); `self::path` is left alone.
fn rename_self(tokens: TokenStream, with: &Ident) -> TokenStream {
    let trees: Vec<TokenTree> = tokens.into_iter().collect();
    let mut out = Vec::with_capacity(trees.len());
    // Inside a `use` item, `self` names a module (`use std::io::{self,
    // Write};`): left alone up to its `;`.
    let mut in_use = false;
    for (i, tree) in trees.iter().enumerate() {
        if in_use {
            in_use = !matches!(tree, TokenTree::Punct(p) if p.as_char() == ';');
            out.push(tree.clone());
            continue;
        }
        match tree {
            TokenTree::Ident(ident) if ident == "use" => {
                in_use = true;
                out.push(tree.clone());
            }
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
