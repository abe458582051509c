//! The argument of a resilience attribute: one spec type, `#[retryable(PetRetry)]`.

use proc_macro2::{Span, TokenStream};
use syn::parse::{ParseStream, Parser};
use syn::{LitStr, Path, Token};

use crate::chain::Kind;

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
    let parser = |input: ParseStream<'_>| -> syn::Result<Path> {
        if input.peek(LitStr) {
            let lit: LitStr = input.parse()?;
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
