//! Diagnostics: collecting spanned errors into one, and reading `key = value`
//! arguments with darling while keeping the messages ours (`meta`).

pub(crate) mod meta;

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

    /// `last`'s value if nothing went wrong, else every error, `last`'s at
    /// the end.
    pub(crate) fn finish_with<T>(self, last: syn::Result<T>) -> syn::Result<T> {
        match last {
            Ok(value) => self.finish().map(|()| value),
            Err(e) => match self.0 {
                Some(mut all) => {
                    all.combine(e);
                    Err(all)
                }
                None => Err(e),
            },
        }
    }
}

/// The original item followed by the errors, so that one mistake gives one
/// error and the rest of the crate still sees the item.
pub(crate) fn with_item(item: TokenStream, e: syn::Error) -> TokenStream {
    let errors = e.to_compile_error();
    quote::quote! { #item #errors }
}

/// The candidate nearest to `word`, if it is close enough to be a typo:
/// at most a third of its letters differ (one for a short word).
pub(crate) fn did_you_mean<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).max(1);
    candidates
        .iter()
        .map(|c| (edit_distance(word, c), *c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Levenshtein distance, with a swap of neighbours counting once.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut rows = vec![(0..=b.len()).collect::<Vec<_>>()];
    for i in 1..=a.len() {
        let mut row = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            row[j] = (rows[i - 1][j] + 1)
                .min(row[j - 1] + 1)
                .min(rows[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                row[j] = row[j].min(rows[i - 2][j - 2] + 1);
            }
        }
        rows.push(row);
    }
    rows[a.len()][b.len()]
}
