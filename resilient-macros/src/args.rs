//! The argument of a resilience attribute: one spec type, `#[retryable(PetRetry)]`.

use darling::ast::NestedMeta;
use darling::FromMeta;
use proc_macro2::{Span, TokenStream};
use syn::ext::IdentExt;
use syn::parse::{ParseStream, Parser};
use syn::{LitStr, Path, Token};

use crate::diag::{meta, Errors};
use crate::model::{FallbackArgs, FallbackOn, Func, Kind, LayerArgs};

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
///
/// Read by hand, not with darling: the spec is a positional type, not a
/// `key = value` item, and its messages read what stands in its place (a
/// number, a duration string, a call, a `key = value`) to say where that
/// setting goes instead; darling's `FromMeta` would see only a word or an
/// unexpected literal.
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
            (Kind::Chaos, _) => ("a value", "error_rate = 0.1".to_owned(), String::new()),
            (Kind::Hedging, _) => ("a value", "delay = \"100ms\"".to_owned(), String::new()),
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
        if input.peek(Token![=]) && path.is_ident("key") {
            return Err(if kind.keyed() {
                key_without_spec(kind, &path)
            } else {
                takes_no_key(kind, syn::spanned::Spanned::span(&path))
            });
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
                if key == "key" {
                    return Err(takes_no_key(kind, key.span()));
                }
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

/// `key = ..` written first, where the spec goes.
fn key_without_spec(kind: Kind, key: &Path) -> syn::Error {
    let (name, example) = (kind.attr_name(), kind.example_spec());
    syn::Error::new_spanned(
        key,
        format!("`#[{name}]` takes the spec first, then the key: write `#[{name}({example}, key = ..)]`"),
    )
}

/// `key = ..` on an attribute with one instance per spec.
fn takes_no_key(kind: Kind, span: Span) -> syn::Error {
    syn::Error::new(
        span,
        format!(
            "`#[{}]` takes no `key`: one instance per key is for `#[circuit_breakable]`, `#[rate_limited]` and `#[concurrency_limit]`; a {} spec has one instance",
            kind.attr_name(),
            kind.derive_name().trim_end_matches("Spec").to_lowercase()
        ),
    )
}

const KEY_TAKES: &str = "`key` takes an expression over the fn's arguments whose value picks the instance, such as `key = host` or `key = req.tenant_id`";

/// How a keyed attribute words a slip after its spec: `key` without a
/// value, or a word where `key = ..` goes.
const KEYED_SYNTAX: meta::Syntax = meta::Syntax {
    strings: false,
    no_key: |e| {
        syn::Error::new(
            e.span(),
            format!("expected `key = ..` after the spec: {KEY_TAKES}"),
        )
    },
    no_eq: |word, _| {
        if word == "key" {
            return syn::Error::new(word.span(), KEY_TAKES);
        }
        syn::Error::new(
            word.span(),
            format!(
                "expected `key = ..` after the spec, not `{word}`: write `key = {word}` for one instance per value of `{word}`, or remove it"
            ),
        )
    },
    no_value: |word, e| {
        if word == "key" {
            return syn::Error::new(word.span(), KEY_TAKES);
        }
        e
    },
};

/// `name = value` after a keyed attribute's spec, where only `key = ..`
/// goes: a misspelt `key`, a bound of the keyed instances (`max_keys`,
/// whose place is the config's `keys` table), or any other setting.
fn not_a_keyed_option(kind: Kind, name: &syn::Ident, value: &syn::Expr) -> syn::Error {
    let attr = kind.attr_name();
    let path = kind.example_path();
    let written = match meta::ungroup(value) {
        v @ (syn::Expr::Lit(_) | syn::Expr::Path(_)) => {
            quote::quote!(#v).to_string().replace(' ', "")
        }
        _ => "..".to_owned(),
    };
    let text = name.to_string();
    let bound = ["keys_", "key_"]
        .iter()
        .find_map(|p| text.strip_prefix(p))
        .or_else(|| ["_keys", "_key"].iter().find_map(|p| text.strip_suffix(p)))
        .unwrap_or(&text);
    let bounds = "the bounds of the keyed instances go in the spec's config section";
    let message = if ["max", "idle_timeout", "label_metrics"].contains(&bound) {
        format!(
            "`#[{attr}]` takes only `key = ..` after the spec, not `{name}`: {bounds}, as `keys = {{ {bound} = {written} }}` under `[{path}]`"
        )
    } else if text == "keys" {
        format!(
            "`#[{attr}]` takes only `key = ..` after the spec, not `keys`: for one instance per value, write `key = {written}`; {bounds}, as `keys = {{ max = 1000 }}` under `[{path}]`"
        )
    } else if crate::diag::did_you_mean(&text, &["key"]).is_some() {
        format!(
            "`#[{attr}]` has no argument `{name}`; did you mean `key = {written}`? After the spec it takes only `key = ..`"
        )
    } else {
        format!(
            "`#[{attr}]` takes only `key = ..` after the spec, not `{name}`: settings go in the spec's config section, such as `{name} = ..` under `[{path}]`"
        )
    };
    syn::Error::new(name.span(), message)
}

/// A literal where the key expression goes (`key = "host"`, `key = 7`):
/// the same value for every call, so that every call would share one
/// instance, which is what no `key` does. Quoted, it is most likely the
/// name of an argument, written as `#[fallback(method = "..")]` is; the
/// message names the unquoted form.
fn constant_key(kind: Kind, value: &syn::Expr) -> Option<syn::Error> {
    let mut inner = meta::ungroup(value);
    loop {
        inner = match inner {
            syn::Expr::Paren(p) => &p.expr,
            syn::Expr::Unary(u) if matches!(u.op, syn::UnOp::Neg(_)) => &u.expr,
            syn::Expr::Group(g) => &g.expr,
            _ => break,
        };
    }
    let syn::Expr::Lit(lit) = inner else {
        return None;
    };
    let one = kind.instance_name();
    let written = quote::quote!(#value).to_string();
    let takes = "`key` takes an expression over the fn's arguments, read at each call";
    let remove = format!("for one {one} shared by every call, remove `key`");
    let message = match &lit.lit {
        syn::Lit::Str(s) => {
            let text = s.value();
            // What the string holds, if it reads as an expression over
            // the arguments (`host`, `req.tenant_id`), not as a value.
            let fix = syn::parse_str::<syn::Expr>(&text)
                .ok()
                .filter(|e| !matches!(meta::ungroup(e), syn::Expr::Lit(_)))
                .map_or_else(
                    || format!("{takes}, such as `key = host`, not a string"),
                    |_| format!("{takes}: write `key = {}`, unquoted", text.trim()),
                );
            format!(
                "`key = {written}` is a string, the same for every call: every call would share one {one}, as without `key`. {fix} ({remove})"
            )
        }
        _ => format!(
            "`key = {written}` is a constant, the same for every call: every call would share one {one}, as without `key`. {takes}, such as `key = host`; {remove}"
        ),
    };
    Some(syn::Error::new_spanned(value, message))
}

/// Parses `#[circuit_breakable(Spec)]` or `#[circuit_breakable(Spec, key =
/// expr)]` (and the same for the limits): the spec as every attribute reads
/// it, then `key` with any expression. By hand: darling's `FromMeta` reads
/// a value's type from the item, and `key` takes the user's expression as
/// it is, to type-check where it stands.
pub(crate) fn parse_keyed(kind: Kind, tokens: TokenStream, span: Span) -> syn::Result<LayerArgs> {
    let mut spec_tokens = TokenStream::new();
    let mut rest = tokens.into_iter();
    for tt in rest.by_ref() {
        if matches!(&tt, proc_macro2::TokenTree::Punct(p) if p.as_char() == ',') {
            break;
        }
        spec_tokens.extend([tt]);
    }
    let spec = parse_spec(kind, spec_tokens, span)?;
    let rest: TokenStream = rest.collect();
    let name = kind.attr_name();
    let parser = |input: ParseStream<'_>| {
        // A second spec, as in `#[rate_limited(ARate, BRate)]`.
        let second = input.fork().parse::<Path>().ok();
        if second.is_some_and(|p| {
            p.segments
                .iter()
                .any(|s| s.ident.to_string().starts_with(char::is_uppercase))
        }) && !input.peek2(Token![=])
        {
            return Err(syn::Error::new_spanned(
                input.parse::<TokenStream>()?,
                format!(
                    "`#[{name}]` takes exactly one spec; remove this (to combine mechanisms, add one attribute per spec)"
                ),
            ));
        }
        meta::parse_items(input, &KEYED_SYNTAX)
    };
    let items = parser.parse2(rest)?;
    let mut errors = Errors::default();
    let mut key = None;
    for item in items {
        match (meta::key(&item), &item) {
            (Some(k), NestedMeta::Meta(syn::Meta::NameValue(nv))) if k == "key" => {
                if key.is_some() {
                    errors.push(syn::Error::new(
                        k.span(),
                        "`key` is given more than once; keep one",
                    ));
                } else if let Some(e) = constant_key(kind, &nv.value) {
                    errors.push(e);
                } else {
                    key = Some(nv.value.clone());
                }
            }
            (Some(k), NestedMeta::Meta(syn::Meta::NameValue(nv))) => {
                errors.push(not_a_keyed_option(kind, k, &nv.value));
            }
            (Some(_) | None, _) => errors.push(syn::Error::new(span, KEY_TAKES)),
        }
    }
    errors.finish()?;
    Ok(match key {
        Some(key) => LayerArgs::Keyed { spec, key },
        None => LayerArgs::Spec(spec),
    })
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

/// The accepted `on = ..` values, as every message lists them (and the guide).
const ON_VALUES: &str = "`on = any` (every failure: the default), `on = resilience` (failures raised by a resilience attribute inside), `on = rejection` (breaker, rate, concurrency or throttling rejections), `on = timeout`";

/// What `#[fallback(..)]` says, read by darling from the known keys only
/// (see [`check_fallback_keys`]); each value type answers a wrong value.
#[derive(FromMeta)]
struct FallbackMeta {
    /// Optional to darling, so that a misspelt `method` is one error (the
    /// key), not two (the key, then darling's missing field): the caller
    /// says that `method` is needed, once everything else is right.
    method: Option<MethodRef>,
    on: Option<FallbackOn>,
    when: Option<WhenFilter>,
}

/// `method = "name(a, b)"`: the string, and the reference written in it.
struct MethodRef {
    lit: LitStr,
    target: Path,
    args: Vec<syn::Ident>,
}

fn method_takes() -> String {
    format!("`method` takes a string naming the fallback and its arguments, such as `{FALLBACK_EXAMPLE}`")
}

fn on_takes() -> String {
    format!("`on` takes a word; accepted: {ON_VALUES}")
}

const WHEN_TAKES: &str = "`when` takes the path of a fn(&E) -> bool, such as `when = is_transient`";

impl FromMeta for MethodRef {
    fn from_expr(expr: &syn::Expr) -> darling::Result<Self> {
        match meta::ungroup(expr) {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(lit),
                ..
            }) => {
                let (target, args) = parse_reference(lit)?;
                Ok(Self {
                    lit: lit.clone(),
                    target,
                    args,
                })
            }
            _ => Err(darling::Error::custom(method_takes()).with_span(expr)),
        }
    }
}

impl FromMeta for FallbackOn {
    fn from_expr(expr: &syn::Expr) -> darling::Result<Self> {
        let Some(word) = meta::word(expr) else {
            return Err(darling::Error::custom(on_takes()).with_span(expr));
        };
        match word.to_string().as_str() {
            "resilience" => Ok(FallbackOn::Resilience),
            "rejection" => Ok(FallbackOn::Rejection),
            "timeout" => Ok(FallbackOn::Timeout),
            "any" => Ok(FallbackOn::Any),
            other => Err(darling::Error::custom(format!(
                "unknown `on` value `{other}`; accepted: {ON_VALUES}"
            ))
            .with_span(word)),
        }
    }
}

/// `when = is_transient`: the filter's path.
struct WhenFilter(Path);

impl FromMeta for WhenFilter {
    fn from_expr(expr: &syn::Expr) -> darling::Result<Self> {
        match meta::ungroup(expr) {
            syn::Expr::Path(p) if p.qself.is_none() => Ok(Self(p.path.clone())),
            _ => Err(darling::Error::custom(WHEN_TAKES).with_span(expr)),
        }
    }
}

/// How `#[fallback]` words a slip in the syntax of its arguments.
const FALLBACK_SYNTAX: meta::Syntax = meta::Syntax {
    strings: true,
    no_key: |e| {
        syn::Error::new(
            e.span(),
            format!("`#[fallback]` takes `key = value` arguments, such as `{FALLBACK_EXAMPLE}`"),
        )
    },
    no_eq: |key, e| syn::Error::new(e.span(), format!("`{key}` takes a value: `{key} = ..`")),
    no_value: |key, e| match key.to_string().as_str() {
        "method" => syn::Error::new(e.span(), method_takes()),
        "on" => syn::Error::new(e.span(), on_takes()),
        "when" => syn::Error::new(e.span(), WHEN_TAKES),
        _ => unknown_fallback_key(key),
    },
};

fn unknown_fallback_key(key: &syn::Ident) -> syn::Error {
    let key_name = key.to_string();
    let near = crate::diag::did_you_mean(&key_name, &["method", "on", "when"])
        .map(|near| format!("did you mean `{near}`? "))
        .unwrap_or_default();
    syn::Error::new(
        key.span(),
        format!("`#[fallback]` has no argument `{key_name}`; {near}accepted: `method = \"name(args)\"`, and one of `on = ..` or `when = ..`"),
    )
}

/// Answers what darling should not see: a lone string, an unknown key, a
/// key given twice, `on` with `when`; returns the items darling reads.
fn check_fallback_keys(items: &[NestedMeta], errors: &mut Errors) -> Vec<NestedMeta> {
    let mut known = Vec::new();
    let mut method_given = false;
    let mut filter: Option<&syn::Ident> = None;
    for item in items {
        let Some(key) = meta::key(item) else {
            if let NestedMeta::Lit(lit) = item {
                errors.push(syn::Error::new(
                    lit.span(),
                    format!(
                        "`#[fallback]` takes the fallback as `method = ..`: write `#[fallback(method = {})]`",
                        quote::quote!(#lit)
                    ),
                ));
            }
            continue;
        };
        match key.to_string().as_str() {
            "method" if method_given => errors.push(syn::Error::new(
                key.span(),
                "`method` is given more than once; keep one",
            )),
            "method" => {
                method_given = true;
                known.push(item.clone());
            }
            "on" | "when" => match filter {
                Some(first) if first == key => errors.push(syn::Error::new(
                    key.span(),
                    format!("`{key}` is given more than once; keep one"),
                )),
                Some(first) => errors.push(syn::Error::new(
                    key.span(),
                    format!("`{key}` cannot be combined with `{first}`: give one of `on = ..` or `when = ..`"),
                )),
                None => {
                    filter = Some(key);
                    known.push(item.clone());
                }
            },
            _ => errors.push(unknown_fallback_key(key)),
        }
    }
    known
}

/// Parses `method = "name(a, b)"` and the optional `on = ..` / `when = ..`.
pub(crate) fn parse_fallback(tokens: TokenStream, span: Span) -> syn::Result<FallbackArgs> {
    if tokens.is_empty() {
        return Err(syn::Error::new(
            span,
            format!("`#[fallback]` needs the fallback to call: write `{FALLBACK_EXAMPLE}`, naming a method and the arguments it gets"),
        ));
    }
    let items =
        (|input: ParseStream<'_>| meta::parse_items(input, &FALLBACK_SYNTAX)).parse2(tokens)?;
    let mut errors = Errors::default();
    let known = check_fallback_keys(&items, &mut errors);
    let on_written = known.iter().find_map(|item| match item {
        NestedMeta::Meta(meta) if meta.path().is_ident("on") => Some(quote::quote!(#meta)),
        _ => None,
    });
    let parsed = FallbackMeta::from_list(&known).map_err(syn::Error::from);
    let FallbackMeta { method, on, when } = errors.finish_with(parsed)?;
    let Some(method) = method else {
        return Err(syn::Error::new(
            span,
            format!("`#[fallback]` needs `method`: write `{FALLBACK_EXAMPLE}`"),
        ));
    };
    Ok(FallbackArgs {
        method: method.lit,
        target: method.target,
        args: method.args,
        on: match when {
            Some(WhenFilter(path)) => FallbackOn::When(path),
            None => on.unwrap_or(FallbackOn::Any),
        },
        on_written,
    })
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

/// What may follow the spec in `#[chaos(PetChaos, ..)]`.
#[derive(FromMeta)]
struct ChaosMeta {
    outcome: Option<OutcomeFn>,
}

/// `outcome = unavailable`: the path of a fn with no arguments that
/// returns the annotated fn's output.
struct OutcomeFn(Path);

const OUTCOME_TAKES: &str = "`outcome` takes the path of a fn with no arguments that returns the annotated fn's output, such as `outcome = unavailable`";

impl FromMeta for OutcomeFn {
    fn from_expr(expr: &syn::Expr) -> darling::Result<Self> {
        match meta::ungroup(expr) {
            syn::Expr::Path(p) if p.qself.is_none() => Ok(Self(p.path.clone())),
            _ => Err(darling::Error::custom(OUTCOME_TAKES).with_span(expr)),
        }
    }
}

/// Parses `#[chaos(Spec)]` or `#[chaos(Spec, outcome = path)]`: the spec
/// as every attribute reads it, then the options with darling. The keys are
/// checked first, with the sentence that settings go in the config section.
pub(crate) fn parse_chaos(tokens: TokenStream, span: Span) -> syn::Result<LayerArgs> {
    let mut spec_tokens = TokenStream::new();
    let mut rest = tokens.into_iter();
    for tt in rest.by_ref() {
        if matches!(&tt, proc_macro2::TokenTree::Punct(p) if p.as_char() == ',') {
            break;
        }
        spec_tokens.extend([tt]);
    }
    let spec = parse_spec(Kind::Chaos, spec_tokens, span)?;
    let rest: TokenStream = rest.collect();
    let items =
        (|input: ParseStream<'_>| meta::parse_items(input, &meta::Syntax::SYN)).parse2(rest)?;
    let mut errors = Errors::default();
    let mut known = Vec::new();
    for item in items {
        match meta::key(&item) {
            Some(key) if key == "outcome" && known.is_empty() => known.push(item),
            Some(key) if key == "outcome" => errors.push(syn::Error::new(
                key.span(),
                "`outcome` is given more than once; keep one",
            )),
            Some(key) if key == "key" => errors.push(takes_no_key(Kind::Chaos, key.span())),
            Some(key) => errors.push(syn::Error::new(
                key.span(),
                format!(
                    "`#[chaos]` takes only `outcome = ..` after the spec, not `{key}`: rates, latency and the seed go in the spec's config section, such as `{key} = ..` under `[resilient.chaos.pet]`"
                ),
            )),
            None => errors.push(syn::Error::new(span, OUTCOME_TAKES)),
        }
    }
    errors.finish()?;
    let options = ChaosMeta::from_list(&known).map_err(syn::Error::from)?;
    Ok(LayerArgs::Chaos {
        spec,
        outcome: options.outcome.map(|o| o.0),
    })
}
