//! `#[derive(RetrySpec)]` and the `#[spec(..)]` attribute it reads.

use darling::ast::NestedMeta;
use darling::FromMeta;
use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::parse::ParseStream;
use syn::spanned::Spanned;
use syn::{Data, DeriveInput, Fields, Ident, LitStr, Token};

use crate::diag::meta::{self, WholeValue};
use crate::diag::Errors;

/// The mechanism a derive declares a spec for.
#[derive(Clone, Copy)]
pub(crate) enum SpecKind {
    Retry,
    CircuitBreaker,
    Timeout,
    ConcurrencyLimit,
    RateLimiter,
    Chaos,
    Hedging,
}

impl SpecKind {
    fn derive_name(self) -> &'static str {
        match self {
            SpecKind::Retry => "RetrySpec",
            SpecKind::CircuitBreaker => "CircuitBreakerSpec",
            SpecKind::Timeout => "TimeoutSpec",
            SpecKind::ConcurrencyLimit => "ConcurrencyLimitSpec",
            SpecKind::RateLimiter => "RateLimiterSpec",
            SpecKind::Chaos => "ChaosSpec",
            SpecKind::Hedging => "HedgingSpec",
        }
    }

    fn example_path(self) -> &'static str {
        match self {
            SpecKind::Retry => "resilient.retry.pet",
            SpecKind::CircuitBreaker => "resilient.circuitbreaker.pet",
            SpecKind::Timeout => "resilient.timeout.pet",
            SpecKind::ConcurrencyLimit => "resilient.concurrency.reviews",
            SpecKind::RateLimiter => "resilient.ratelimiter.pet",
            SpecKind::Chaos => "resilient.chaos.pet",
            SpecKind::Hedging => "resilient.hedging.pet",
        }
    }

    /// Whether the spec classifies outcomes (and so takes `classify`).
    fn classifies(self) -> bool {
        matches!(
            self,
            SpecKind::Retry | SpecKind::CircuitBreaker | SpecKind::Hedging
        )
    }
}

/// What `#[spec(..)]` says.
struct SpecAttr {
    path: LitStr,
    classify: Classification,
    last_failure: bool,
}

/// Which type classifies the spec's outcomes (`classify = ..`).
enum Classification {
    /// `classify = all_errors`, the default: every `Err` is a failure.
    AllErrors,
    /// `classify = custom`: the spec itself, by the user's `Classify` impls.
    Custom,
    /// `classify = http`: HTTP statuses and `Retry-After`.
    Http,
    /// `classify = grpc`: gRPC codes and `grpc-retry-pushback-ms`; the
    /// word's span, where a build without the feature is told so.
    Grpc(Span),
    /// `classify = PetOutcomes`: a classifier type shared by several specs.
    Type(syn::Path),
}

/// The `classify` words, as a sentence's end.
const CLASSIFY_ACCEPTED: &str = "`classify = all_errors` (the default: every `Err` is a failure), \
    `classify = custom` (you implement `resilient_core::Classify` for the spec), \
    `classify = http` (HTTP responses: 5xx, 408 and 429 fail, `Retry-After` is the wait), \
    `classify = grpc` (`tonic::Status` by gRPC's retry policy, `grpc-retry-pushback-ms` is the wait), \
    or a classifier type shared by several specs, such as `classify = PetOutcomes`";

pub(crate) fn expand(kind: SpecKind, input: TokenStream) -> TokenStream {
    let input: DeriveInput = match syn::parse2(input) {
        Ok(input) => input,
        Err(e) => return e.to_compile_error(),
    };
    match model(kind, &input) {
        Ok(spec) => generate(kind, &input.ident, &spec),
        Err(e) => e.to_compile_error(),
    }
}

fn model(kind: SpecKind, input: &DeriveInput) -> syn::Result<SpecAttr> {
    let derive = kind.derive_name();
    let mut errors = Errors::default();
    match &input.data {
        Data::Struct(s) => match &s.fields {
            Fields::Unit => {}
            fields => errors.push(syn::Error::new(
                fields.span(),
                format!(
                    "`#[derive({derive})]` needs a unit struct, but `{}` has fields; \
                     a spec only names a config section, so declare it as `pub struct {};`",
                    input.ident, input.ident
                ),
            )),
        },
        Data::Enum(e) => errors.push(syn::Error::new(
            e.enum_token.span,
            format!(
                "`#[derive({derive})]` needs a unit struct, not an enum; \
                 declare the spec as `pub struct {};`",
                input.ident
            ),
        )),
        Data::Union(u) => errors.push(syn::Error::new(
            u.union_token.span,
            format!(
                "`#[derive({derive})]` needs a unit struct, not a union; \
                 declare the spec as `pub struct {};`",
                input.ident
            ),
        )),
    }
    if !input.generics.params.is_empty() || input.generics.where_clause.is_some() {
        errors.push(syn::Error::new_spanned(
            &input.generics,
            format!(
                "`#[derive({derive})]` needs a struct without generic parameters: \
                 every spec type has exactly one shared instance; declare one spec type per config section"
            ),
        ));
    }

    let mut found: Option<SpecAttr> = None;
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("spec")) {
        if found.is_some() {
            errors.push(syn::Error::new_spanned(
                attr,
                "`#[spec]` is given more than once; a spec has one config path, so keep one `#[spec(\"..\")]`",
            ));
            continue;
        }
        if let syn::Meta::Path(p) = &attr.meta {
            errors.push(syn::Error::new(
                p.span(),
                format!(
                    "`#[spec]` needs the config path in parentheses: `#[spec(\"{}\")]`",
                    kind.example_path()
                ),
            ));
        } else {
            match attr.parse_args_with(|input: ParseStream<'_>| parse_spec_args(kind, input)) {
                Ok(spec) => {
                    found = Some(spec);
                    continue;
                }
                Err(e) => errors.push(e),
            }
        }
        // Counted as given, so that a second `#[spec]` is still reported.
        found = Some(SpecAttr {
            path: LitStr::new("", Span::call_site()),
            classify: Classification::AllErrors,
            last_failure: false,
        });
    }
    let spec = match found {
        Some(spec) => Some(spec),
        None => {
            errors.push(syn::Error::new(
                input.ident.span(),
                format!(
                    "`#[derive({derive})]` needs the spec's config path: add `#[spec(\"{}\")]` to `{}`",
                    kind.example_path(),
                    input.ident
                ),
            ));
            None
        }
    };
    errors.finish()?;
    spec.ok_or_else(|| syn::Error::new(Span::call_site(), "missing `#[spec]`"))
}

/// The options after the path, read by darling from the known keys only
/// (see [`check_option`]); each value type answers a wrong value.
#[derive(FromMeta)]
struct SpecOptions {
    classify: Option<WholeValue<Classification>>,
    exhausted: Option<WholeValue<Exhausted>>,
}

/// What a retry spec returns once its attempts are spent (`exhausted = ..`).
enum Exhausted {
    /// `exhausted = error`, the default: `resilient_core::Error::RetryExhausted`.
    Error,
    /// `exhausted = last_failure`: the last failure, unchanged.
    LastFailure,
}

/// The `exhausted` words, as a sentence's end.
const EXHAUSTED_ACCEPTED: &str =
    "`exhausted = error` (the default: `resilient_core::Error::RetryExhausted`) \
    or `exhausted = last_failure` (the last failure, unchanged)";

/// `unknown `key` value ..`, naming what was written and what is accepted.
fn unknown_value(key: &str, value: &syn::Expr, accepted: &str) -> darling::Error {
    let value = meta::ungroup(value);
    let found = meta::word(value).map_or_else(|| quote!(#value).to_string(), ToString::to_string);
    darling::Error::custom(format!(
        "unknown `{key}` value `{found}`; accepted: {accepted}"
    ))
    .with_span(value)
}

impl FromMeta for Classification {
    fn from_expr(expr: &syn::Expr) -> darling::Result<Self> {
        let value = meta::ungroup(expr);
        match meta::word(value).map(ToString::to_string).as_deref() {
            Some("custom") => Ok(Classification::Custom),
            Some("all_errors") => Ok(Classification::AllErrors),
            Some("http") => Ok(Classification::Http),
            Some("grpc") => Ok(Classification::Grpc(value.span())),
            _ => match type_path(value) {
                Some(path) => Ok(Classification::Type(path.clone())),
                None => Err(unknown_value("classify", expr, CLASSIFY_ACCEPTED)),
            },
        }
    }
}

impl FromMeta for Exhausted {
    fn from_expr(expr: &syn::Expr) -> darling::Result<Self> {
        let value = meta::ungroup(expr);
        match meta::word(value).map(ToString::to_string).as_deref() {
            Some("last_failure") => Ok(Exhausted::LastFailure),
            Some("error") => Ok(Exhausted::Error),
            _ => Err(unknown_value("exhausted", expr, EXHAUSTED_ACCEPTED)),
        }
    }
}

/// The value as a type path (`PetOutcomes`, `crate::classify::Pet`): a path
/// of more than one segment, or one that does not start with a lower-case
/// letter, so that a misspelt word (`custm`) is reported as one.
fn type_path(value: &syn::Expr) -> Option<&syn::Path> {
    let syn::Expr::Path(p) = value else {
        return None;
    };
    if p.qself.is_some() {
        return None;
    }
    let lower_word = p.path.get_ident().is_some_and(|ident| {
        ident
            .to_string()
            .trim_start_matches("r#")
            .starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
    });
    (!lower_word).then_some(&p.path)
}

fn parse_spec_args(kind: SpecKind, input: ParseStream<'_>) -> syn::Result<SpecAttr> {
    // The path is read by hand: it is positional, a lone string before the
    // options, and darling's `FromMeta` reads named `key = value` items (a
    // lone literal is only "Unexpected literal" to it).
    if input.is_empty() {
        return Err(input.error(format!(
            "`#[spec]` needs the config path: `#[spec(\"{}\")]`",
            kind.example_path()
        )));
    }
    let path: LitStr = if input.peek(LitStr) {
        input.parse()?
    } else {
        let tokens: TokenStream = input.fork().parse()?;
        return Err(syn::Error::new_spanned(
            tokens,
            format!(
                "the config path must be a string literal, such as `#[spec(\"{}\")]`",
                kind.example_path()
            ),
        ));
    };
    check_path(kind, &path)?;
    let mut spec = SpecAttr {
        path,
        classify: Classification::AllErrors,
        last_failure: false,
    };
    if input.is_empty() {
        return Ok(spec);
    }
    input.parse::<Token![,]>()?;
    let items = meta::parse_items(input, &meta::Syntax::SYN)?;
    // Each error with the place of its option, so that they are reported in
    // the order written.
    let mut errors: Vec<(usize, syn::Error)> = Vec::new();
    // The options darling reads: name, place, item.
    let mut known: Vec<(String, usize, NestedMeta)> = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    for (at, item) in items.iter().enumerate() {
        let Some(key) = meta::key(item) else {
            continue;
        };
        let name = key.to_string();
        if seen.contains(&name) {
            errors.push((
                at,
                syn::Error::new(
                    key.span(),
                    format!("`{name}` is given more than once; keep one"),
                ),
            ));
            continue;
        }
        seen.push(name.clone());
        match check_option(kind, key) {
            Ok(()) => known.push((name, at, item.clone())),
            Err(e) => errors.push((at, e)),
        }
    }
    let place = |key: &str| {
        known
            .iter()
            .find(|(name, _, _)| name == key)
            .map_or(usize::MAX, |(_, at, _)| *at)
    };
    let items: Vec<NestedMeta> = known.iter().map(|(_, _, item)| item.clone()).collect();
    match SpecOptions::from_list(&items) {
        Ok(options) => {
            match options.classify.map(|v| v.0) {
                Some(Ok(classify)) => spec.classify = classify,
                Some(Err(e)) => errors.push((place("classify"), e)),
                None => {}
            }
            match options.exhausted.map(|v| v.0) {
                Some(Ok(exhausted)) => {
                    spec.last_failure = matches!(exhausted, Exhausted::LastFailure);
                }
                Some(Err(e)) => errors.push((place("exhausted"), e)),
                None => {}
            }
        }
        Err(e) => errors.push((usize::MAX, e.into())),
    }
    errors.sort_by_key(|(at, _)| *at);
    let mut all = Errors::default();
    for (_, e) in errors {
        all.push(e);
    }
    all.finish()?;
    Ok(spec)
}

/// Answers an option that darling should not see: unknown, or not for this
/// kind of spec.
fn check_option(kind: SpecKind, key: &Ident) -> syn::Result<()> {
    let name = key.to_string();
    let derive = kind.derive_name();
    // What may follow the path, as the end of a sentence.
    let options = match kind {
        SpecKind::Retry => {
            "accepted after the path: `classify = custom` and `exhausted = last_failure`".to_owned()
        }
        SpecKind::CircuitBreaker | SpecKind::Hedging => {
            "accepted after the path: `classify = custom`".to_owned()
        }
        _ => format!("a `{derive}` takes only its config path, so remove `{name}`"),
    };
    let message = match name.as_str() {
        "classify" if !kind.classifies() => {
            format!(
                "`classify` applies to retry, circuit breaker and hedging specs only; {options}"
            )
        }
        "exhausted" if !matches!(kind, SpecKind::Retry) => {
            format!("`exhausted` applies to retry specs only; {options}")
        }
        "classify" | "exhausted" => return Ok(()),
        _ => {
            let names: &[&str] = match kind {
                SpecKind::Retry => &["classify", "exhausted"],
                SpecKind::CircuitBreaker | SpecKind::Hedging => &["classify"],
                _ => &[],
            };
            match crate::diag::did_you_mean(&name, names) {
                Some(near) => format!(
                    "unknown `#[spec]` option `{name}`; did you mean `{near}`? {options}"
                ),
                None => format!(
                    "unknown `#[spec]` option `{name}`; {options}; settings such as `{name}` belong in the config section"
                ),
            }
        }
    };
    Err(syn::Error::new(key.span(), message))
}

fn check_path(kind: SpecKind, lit: &LitStr) -> syn::Result<()> {
    let path = lit.value();
    let example = kind.example_path();
    if path.trim().is_empty() {
        return Err(syn::Error::new(
            lit.span(),
            format!(
                "the config path is blank; write the absolute, dotted path of the spec's section, such as `\"{example}\"`"
            ),
        ));
    }
    // Environment overrides reach only lower-case keys (`config` lower-cases
    // them), and cannot spell `-` or an empty segment: a path outside
    // snake_case would build, and could never be overridden.
    let rule = format!(
        "write dot-separated snake_case names (lower-case letters, digits and `_`), which environment overrides can reach, such as `\"{example}\"`"
    );
    let segments: Vec<&str> = path.split('.').collect();
    if segments.iter().any(|seg| seg.is_empty()) {
        return Err(syn::Error::new(
            lit.span(),
            format!("`{path}` has an empty segment; {rule}"),
        ));
    }
    let is_snake = |seg: &str| {
        seg.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    };
    if segments.iter().all(|seg| is_snake(seg)) {
        return Ok(());
    }
    let snake: Vec<String> = segments.iter().map(|seg| to_snake_case(seg)).collect();
    let message = if snake.iter().all(|seg| is_snake(seg)) {
        format!(
            "`{path}` is not snake_case: write `\"{}\"`; environment overrides reach only lower-case keys, so each segment of a config path is a snake_case name (lower-case letters, digits and `_`)",
            snake.join(".")
        )
    } else {
        let bad: Vec<String> = segments
            .iter()
            .filter(|seg| !is_snake(seg))
            .map(|seg| format!("`{seg}`"))
            .collect();
        format!(
            "`{path}` is not a valid config path: {} is not a snake_case name; {rule}",
            bad.join(", ")
        )
    };
    Err(syn::Error::new(lit.span(), message))
}

/// `PetStore` → `pet_store`, `Pet-Store` → `pet_store`; anything else is
/// left for the caller to reject.
fn to_snake_case(seg: &str) -> String {
    let mut out = String::with_capacity(seg.len() + 2);
    let mut prev_lower = false;
    for c in seg.chars() {
        if c == '-' {
            out.push('_');
            prev_lower = false;
        } else if c.is_ascii_uppercase() {
            if prev_lower {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
            prev_lower = false;
        } else {
            out.push(c);
            prev_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        }
    }
    out
}

fn generate(kind: SpecKind, ident: &Ident, spec: &SpecAttr) -> TokenStream {
    let name = ident.to_string();
    let path = &spec.path;
    let p = quote!(::resilient_core::__private);
    let instance = match kind {
        SpecKind::Retry => quote!(#p::Retry),
        SpecKind::CircuitBreaker => quote!(#p::Breaker),
        SpecKind::Timeout => quote!(#p::Timeout),
        SpecKind::ConcurrencyLimit => quote!(#p::Limiter),
        SpecKind::RateLimiter => quote!(#p::RateLimiter),
        SpecKind::Chaos => quote!(#p::Chaos),
        SpecKind::Hedging => quote!(#p::Hedging),
    };
    let classifier = match &spec.classify {
        Classification::AllErrors => quote!(#p::AllErrors),
        Classification::Custom => quote!(Self),
        Classification::Http => quote!(#p::Http),
        // A macro: without the `grpc` feature it is an error naming it.
        Classification::Grpc(span) => {
            quote_spanned!(*span=> ::resilient_core::__private::grpc_classifier!())
        }
        // Spanned, so that a missing or wrong type is reported at the option.
        Classification::Type(path) => quote_spanned!(path.span()=> #path),
    };
    let mechanism = match kind {
        SpecKind::Retry => {
            let exhausted = if spec.last_failure {
                quote!(#p::ReturnLastFailure)
            } else {
                quote!(#p::ReturnError)
            };
            quote! {
                impl #p::RetrySpec for #ident {
                    type Classifier = #classifier;
                    type Exhausted = #exhausted;
                }
            }
        }
        SpecKind::CircuitBreaker => quote! {
            impl #p::CircuitBreakerSpec for #ident {
                type Classifier = #classifier;
            }
        },
        SpecKind::Timeout => quote!(impl #p::TimeoutSpec for #ident {}),
        SpecKind::ConcurrencyLimit => quote!(impl #p::ConcurrencyLimitSpec for #ident {}),
        SpecKind::RateLimiter => quote!(impl #p::RateLimiterSpec for #ident {}),
        SpecKind::Chaos => quote!(impl #p::ChaosSpec for #ident {}),
        SpecKind::Hedging => quote! {
            impl #p::HedgingSpec for #ident {
                type Classifier = #classifier;
            }
        },
    };
    // Only a spec declared with `classify = custom` may implement `Classify`
    // for itself: for any other spec such an impl would never be used, and
    // `Classify`'s supertrait refuses it with a message that says so.
    let classify = match (&spec.classify, kind.classifies()) {
        (Classification::Custom, true) => quote!(impl #p::Classifier for #ident {}),
        _ => quote!(),
    };
    let span = ident.span();
    let submit = quote_spanned! {span=>
        #p::inventory::submit! {
            #p::SpecEntry::of::<#ident>()
        }
    };
    quote! {
        impl #p::Spec for #ident {
            const NAME: &'static str = #name;
            const PATH: &'static str = #path;
            type Mechanism = #instance;
            #[inline]
            fn __slot() -> &'static #p::Slot<#instance> {
                static SLOT: #p::Slot<#instance> = #p::Slot::new();
                &SLOT
            }
        }
        #mechanism
        #classify
        #submit
    }
}
