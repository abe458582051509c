//! The argument of a resilience attribute: one spec type, `#[retryable(PetRetry)]`.

use proc_macro2::{Span, TokenStream};
use syn::ext::IdentExt;
use syn::parse::{ParseStream, Parser};
use syn::{LitStr, Path, Token};

use crate::model::{FallbackArgs, FallbackOn, Func, Kind};

/// Reads an annotated fn: attributes, visibility and signature, and the
/// body as one brace-delimited group, unparsed.
pub(crate) fn parse_fn(item: TokenStream) -> syn::Result<Func> {
    let parser = |input: ParseStream<'_>| -> syn::Result<Func> {
        let attrs = input.call(syn::Attribute::parse_outer)?;
        let vis = input.parse()?;
        let sig = input.parse()?;
        let body = input.step(|cursor| match cursor.token_tree() {
            Some((proc_macro2::TokenTree::Group(g), rest))
                if g.delimiter() == proc_macro2::Delimiter::Brace =>
            {
                Ok((g, rest))
            }
            _ => Err(cursor.error("expected the fn's body")),
        })?;
        Ok(Func {
            attrs,
            vis,
            sig,
            body,
        })
    };
    parser.parse2(item)
}

/// Parses the tokens inside `#[retryable(..)]`; `span` is where to report a
/// missing spec.
pub(crate) fn parse_spec(kind: Kind, tokens: TokenStream, span: Span) -> syn::Result<Path> {
    let name = kind.attr_name();
    let example = kind.example_spec();
    let derive = kind.derive_name();
    if tokens.is_empty() {
        return Err(syn::Error::new(
            span,
            format!(
                "`#[{name}]` needs a spec: write `#[{name}({example})]`, naming a type declared with `#[derive({derive})]`"
            ),
        ));
    }
    // A value where the spec goes, as in `#[timeout(Duration::from_secs(2))]`
    // or `#[retryable(3)]`: say where settings go, with both halves written.
    // What was written, where a config key takes it as is: a whole number
    // as retry's attempts, a duration string as timeout's duration.
    let value_given = |tokens: TokenStream| {
        let written = syn::parse2::<syn::Lit>(tokens.clone()).ok();
        let path = kind.example_path();
        let (what, setting, note) = match (kind, &written) {
            (Kind::Timeout, Some(syn::Lit::Str(s))) if is_duration(&s.value()) => (
                "a duration",
                format!("duration = \"{}\"", s.value()),
                String::new(),
            ),
            (Kind::Timeout, _) => ("a duration", "duration = \"2s\"".to_owned(), String::new()),
            (Kind::Retry, Some(syn::Lit::Int(n))) => match n.base10_parse::<u64>() {
                Ok(n) if n > 0 => (
                    "a value",
                    format!("attempts = {n}"),
                    format!(
                        " (`attempts` counts the retries after the first call: {n} calls in all is `attempts = {}`)",
                        n - 1
                    ),
                ),
                _ => ("a value", "attempts = 3".to_owned(), String::new()),
            },
            (Kind::Retry, _) => ("a value", "attempts = 3".to_owned(), String::new()),
            (Kind::CircuitBreaker, _) => {
                ("a value", "failure_rate_threshold = 50".to_owned(), String::new())
            }
            (Kind::ConcurrencyLimit, _) => ("a value", "limit = 10".to_owned(), String::new()),
            (Kind::RateLimiter | Kind::Fallback, _) => {
                ("a value", "limit_for_period = 100".to_owned(), String::new())
            }
        };
        syn::Error::new_spanned(
            tokens,
            format!(
                "`#[{name}]` takes a spec type, not {what}: settings go in the spec's config section; \
                 declare the spec as `#[derive({derive})] #[spec(\"{path}\")] pub struct {example};`, \
                 write `#[{name}({example})]`, and set `{setting}` under `[{path}]` in the configuration{note}"
            ),
        )
    };
    let all = tokens.clone();
    let parser = |input: ParseStream<'_>| -> syn::Result<Path> {
        if input.peek(syn::Lit) && !input.peek(LitStr) {
            return Err(value_given(all.clone()));
        }
        if input.peek(LitStr) {
            let lit: LitStr = input.parse()?;
            if is_duration(&lit.value()) {
                return Err(value_given(all.clone()));
            }
            return Err(syn::Error::new(
                lit.span(),
                format!(
                    "`#[{name}]` takes the spec type, not a string: write `#[{name}({example})]`; the config path belongs on the spec's `#[spec(\"..\")]`"
                ),
            ));
        }
        let path: Path = input.parse().map_err(|e| {
            syn::Error::new(
                e.span(),
                format!("`#[{name}]` takes a spec type, such as `#[{name}({example})]`"),
            )
        })?;
        if input.peek(syn::token::Paren) || input.peek(Token![.]) {
            return Err(value_given(all.clone()));
        }
        if input.peek(Token![=]) {
            return Err(syn::Error::new_spanned(
                &path,
                format!(
                    "`#[{name}]` has no argument `{}`: it takes only the spec type, such as `#[{name}({example})]`; settings belong in the spec's config section",
                    quote::quote!(#path).to_string().replace(' ', "")
                ),
            ));
        }
        if !input.is_empty() {
            input.parse::<Token![,]>()?;
            if input.peek(syn::Ident) && input.peek2(Token![=]) {
                let key: syn::Ident = input.parse()?;
                return Err(syn::Error::new(
                    key.span(),
                    format!(
                        "`#[{name}]` has no argument `{key}`: it takes only the spec type, such as `#[{name}({example})]`; settings belong in the spec's config section"
                    ),
                ));
            }
            if !input.is_empty() {
                let rest: TokenStream = input.parse()?;
                return Err(syn::Error::new_spanned(
                    rest,
                    format!(
                        "`#[{name}]` takes exactly one spec; remove this (to combine mechanisms, add one attribute per spec)"
                    ),
                ));
            }
        }
        Ok(path)
    };
    parser.parse2(tokens)
}

/// Whether `text` reads as a duration (`2s`, `500ms`, `1h 30m`): digits
/// then letters, in one or more parts, not a config path.
fn is_duration(text: &str) -> bool {
    let parts: Vec<&str> = text.split_whitespace().collect();
    !parts.is_empty()
        && parts.iter().all(|part| {
            let digits = part.trim_end_matches(|c: char| c.is_ascii_alphabetic());
            let unit = &part[digits.len()..];
            !digits.is_empty()
                && !unit.is_empty()
                && digits.chars().all(|c| c.is_ascii_digit() || c == '.')
        })
}

const FALLBACK_EXAMPLE: &str = "#[fallback(method = \"cached(id)\")]";

/// The accepted `on = ..` values, as every message lists them (and README).
const ON_VALUES: &str = "`on = any` (every failure: the default), `on = resilience` (failures raised by a resilience attribute inside), `on = rejection` (breaker, rate or concurrency rejections), `on = timeout`";

/// Parses `method = "name(a, b)"` and the optional `on = ..` / `when = ..`.
pub(crate) fn parse_fallback(tokens: TokenStream, span: Span) -> syn::Result<FallbackArgs> {
    if tokens.is_empty() {
        return Err(syn::Error::new(
            span,
            format!("`#[fallback]` needs the fallback to call: write `{FALLBACK_EXAMPLE}`, naming a method and the arguments it gets"),
        ));
    }
    let parser = |input: ParseStream<'_>| -> syn::Result<FallbackArgs> {
        let mut method: Option<LitStr> = None;
        let mut on: Option<(syn::Ident, FallbackOn)> = None;
        while !input.is_empty() {
            if input.peek(LitStr) {
                let lit: LitStr = input.parse()?;
                return Err(syn::Error::new(
                    lit.span(),
                    format!(
                        "`#[fallback]` takes the fallback as `method = ..`: write `#[fallback(method = {})]`",
                        quote::quote!(#lit)
                    ),
                ));
            }
            let key: syn::Ident = input.parse().map_err(|e| {
                syn::Error::new(
                    e.span(),
                    format!(
                        "`#[fallback]` takes `key = value` arguments, such as `{FALLBACK_EXAMPLE}`"
                    ),
                )
            })?;
            input.parse::<Token![=]>().map_err(|e| {
                syn::Error::new(e.span(), format!("`{key}` takes a value: `{key} = ..`"))
            })?;
            match key.to_string().as_str() {
                "method" => {
                    if method.is_some() {
                        return Err(syn::Error::new(
                            key.span(),
                            "`method` is given more than once; keep one",
                        ));
                    }
                    method = Some(input.parse().map_err(|e| {
                        syn::Error::new(e.span(), format!("`method` takes a string naming the fallback and its arguments, such as `{FALLBACK_EXAMPLE}`"))
                    })?);
                }
                "on" | "when" => {
                    if let Some((first, _)) = &on {
                        return Err(syn::Error::new(
                            key.span(),
                            format!("`{key}` cannot be combined with `{first}`: give one of `on = ..` or `when = ..`"),
                        ));
                    }
                    let filter = if key == "when" {
                        FallbackOn::When(input.parse().map_err(|e| {
                            syn::Error::new(e.span(), "`when` takes the path of a fn(&E) -> bool, such as `when = is_transient`")
                        })?)
                    } else {
                        let value: syn::Ident = input.parse().map_err(|e| {
                            syn::Error::new(
                                e.span(),
                                format!("`on` takes a word; accepted: {ON_VALUES}"),
                            )
                        })?;
                        match value.to_string().as_str() {
                            "resilience" => FallbackOn::Resilience,
                            "rejection" => FallbackOn::Rejection,
                            "timeout" => FallbackOn::Timeout,
                            "any" => FallbackOn::Any,
                            other => {
                                return Err(syn::Error::new(
                                    value.span(),
                                    format!("unknown `on` value `{other}`; accepted: {ON_VALUES}"),
                                ))
                            }
                        }
                    };
                    on = Some((key, filter));
                }
                other => {
                    let near = crate::diag::did_you_mean(other, &["method", "on", "when"])
                        .map(|near| format!("did you mean `{near}`? "))
                        .unwrap_or_default();
                    return Err(syn::Error::new(
                        key.span(),
                        format!("`#[fallback]` has no argument `{other}`; {near}accepted: `method = \"name(args)\"`, and one of `on = ..` or `when = ..`"),
                    ));
                }
            }
            if !input.is_empty() {
                input.parse::<Token![,]>()?;
            }
        }
        let Some(method) = method else {
            return Err(syn::Error::new(
                span,
                format!("`#[fallback]` needs `method`: write `{FALLBACK_EXAMPLE}`"),
            ));
        };
        let (target, args) = parse_reference(&method)?;
        Ok(FallbackArgs {
            method,
            target,
            args,
            on: on.map_or(FallbackOn::Any, |(_, f)| f),
        })
    };
    parser.parse2(tokens)
}

/// `name(a, b)` inside the `method` string.
fn parse_reference(lit: &LitStr) -> syn::Result<(Path, Vec<syn::Ident>)> {
    let invalid = || {
        syn::Error::new(
            lit.span(),
            format!(
                "`{}` is not a fallback reference; write the fallback's name and, in parentheses, the names of the arguments it gets, such as `method = \"cached(id)\"` or `method = \"cached()\"`",
                lit.value()
            ),
        )
    };
    let parser = |input: ParseStream<'_>| -> syn::Result<(Path, Vec<syn::Ident>)> {
        let path = Path::parse_mod_style(input)?;
        let content;
        syn::parenthesized!(content in input);
        let args = content.parse_terminated(syn::Ident::parse_any, Token![,])?;
        Ok((path, args.into_iter().collect()))
    };
    let (mut path, args) = parser.parse_str(&lit.value()).map_err(|_| invalid())?;
    // Point every token at the user's string.
    for seg in &mut path.segments {
        seg.ident.set_span(lit.span());
    }
    let args = args
        .into_iter()
        .map(|mut a| {
            a.set_span(lit.span());
            a
        })
        .collect();
    Ok((path, args))
}
