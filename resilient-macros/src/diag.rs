//! Diagnostics: collecting spanned errors into one.

use proc_macro2::TokenStream;

/// Collects errors so that one pass reports every mistake.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, e: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(e),
            None => self.0 = Some(e),
        }
    }

    pub(crate) fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}

/// The original item followed by the errors, so that one mistake gives one
/// error and the rest of the crate still sees the item.
pub(crate) fn with_item(item: TokenStream, e: syn::Error) -> TokenStream {
    let errors = e.to_compile_error();
    quote::quote! { #item #errors }
}
