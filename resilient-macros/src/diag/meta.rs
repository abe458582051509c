//! `key = value` arguments, read with darling: split into darling's items
//! here, then read by an attribute's `#[derive(FromMeta)]` struct, whose
//! value types (`impl FromMeta`) say what each key accepts.
//!
//! The attribute checks its keys first (unknown, given twice, not for this
//! kind), with its own words, and hands darling the known ones only: darling
//! would answer an unknown key with its own sentence, without ours (that a
//! setting belongs in the config section), and a misspelt one twice (the
//! key, then a missing field).

use darling::ast::NestedMeta;
use darling::FromMeta;
use syn::parse::ParseStream;
use syn::{Expr, Ident, LitStr, Meta, MetaNameValue, Token};

/// How an attribute words a slip in the syntax of its arguments. Each gets
/// syn's error, for where it points.
pub(crate) struct Syntax {
    /// Whether a lone string is an item, for the attribute to answer
    /// (`#[fallback("cached(id)")]`), rather than a slip.
    pub(crate) strings: bool,
    /// An argument that does not start with a key.
    pub(crate) no_key: fn(syn::Error) -> syn::Error,
    /// A key without `=`.
    pub(crate) no_eq: fn(&Ident, syn::Error) -> syn::Error,
    /// A key whose value is missing or not an expression.
    pub(crate) no_value: fn(&Ident, syn::Error) -> syn::Error,
}

impl Syntax {
    /// syn's own words for every slip.
    pub(crate) const SYN: Syntax = Syntax {
        strings: false,
        no_key: |e| e,
        no_eq: |_, e| e,
        no_value: |_, e| e,
    };
}

/// Splits `key = value, ..` into darling's items: each `key = value` as a
/// name-value meta, a lone string (where `syntax.strings`) as a literal.
///
/// Hand-written rather than darling's `NestedMeta::parse_meta_list`, which
/// reads the same items but reports a slip in their syntax in syn's bare
/// words ("expected `,`" for `method: ".."`, "expected an expression" for
/// `on = `), where the attribute's words name the key and what it takes.
pub(crate) fn parse_items(input: ParseStream<'_>, syntax: &Syntax) -> syn::Result<Vec<NestedMeta>> {
    let mut items = Vec::new();
    while !input.is_empty() {
        if syntax.strings && input.peek(LitStr) {
            items.push(NestedMeta::Lit(input.parse()?));
        } else {
            let key: Ident = input.parse().map_err(syntax.no_key)?;
            let eq_token = input
                .parse::<Token![=]>()
                .map_err(|e| (syntax.no_eq)(&key, e))?;
            let value: Expr = input.parse().map_err(|e| (syntax.no_value)(&key, e))?;
            items.push(NestedMeta::Meta(Meta::NameValue(MetaNameValue {
                path: key.into(),
                eq_token,
                value,
            })));
        }
        if !input.is_empty() {
            input.parse::<Token![,]>()?;
        }
    }
    Ok(items)
}

/// The key of a `key = value` item; `None` for a lone string.
pub(crate) fn key(item: &NestedMeta) -> Option<&Ident> {
    match item {
        NestedMeta::Meta(meta) => meta.path().get_ident(),
        NestedMeta::Lit(_) => None,
    }
}

/// The value as written, inside the invisible group a `macro_rules!` puts
/// around what it passes on (darling's own `from_expr` looks inside too).
/// A message about the value's form points at the value as given, group
/// and all: within a `macro_rules!`, at the `$value` that passed it on.
pub(crate) fn ungroup(mut expr: &Expr) -> &Expr {
    while let Expr::Group(group) = expr {
        expr = &group.expr;
    }
    expr
}

/// The value as one bare word (`custom`), if it is one.
pub(crate) fn word(expr: &Expr) -> Option<&Ident> {
    match ungroup(expr) {
        Expr::Path(p) if p.qself.is_none() => p.path.get_ident(),
        _ => None,
    }
}

/// A value read by `T`'s `FromMeta`, whose mistake is kept as a `syn::Error`
/// that underlines the whole value, for the caller to report.
///
/// Hand-written around darling's error: a `darling::Error` holds a single
/// span, and stable Rust cannot join spans, so a value of several tokens
/// (`exhausted = last-failure`) would be underlined at its first token
/// only; a `syn::Error` spans its first to its last token.
pub(crate) struct WholeValue<T>(pub(crate) Result<T, syn::Error>);

impl<T: FromMeta> FromMeta for WholeValue<T> {
    fn from_meta(item: &Meta) -> darling::Result<Self> {
        Ok(Self(T::from_meta(item).map_err(|e| match item {
            Meta::NameValue(nv) => syn::Error::new_spanned(&nv.value, e),
            _ => e.into(),
        })))
    }
}
