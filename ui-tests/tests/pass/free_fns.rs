//! Free fns of every argument shape keep their signatures under `#[retryable]`.
#![deny(warnings)]

use std::fmt::Display;
use ui_tests::{UiError, UiRetry};
use resilient_core::retryable;

#[derive(Clone, Debug)]
pub struct Query {
    pub id: u64,
}

/// Owned, borrowed, `mut`, pattern and wildcard arguments.
#[retryable(UiRetry)]
pub async fn shapes(
    name: String,
    tag: &str,
    mut count: u32,
    (a, b): (u8, u8),
    Query { id }: Query,
    _: u16,
) -> Result<String, UiError> {
    count += 1;
    Ok(format!("{name} {tag} {count} {a} {b} {id}"))
}

/// Generics, `where` clauses, `impl Trait` and lifetimes.
#[retryable(UiRetry)]
pub async fn generic<'a, T>(value: T, label: &'a str, extra: impl Display + Clone) -> Result<&'a str, UiError>
where
    T: Clone + Display + Send,
{
    let _ = format!("{value}{extra}");
    Ok(label)
}

/// `?` and `return` in the body infer through the wrapper.
#[retryable(UiRetry)]
async fn question_mark(input: &str) -> Result<u32, UiError> {
    if input.is_empty() {
        return Err(UiError::Failed);
    }
    let n: u32 = input.parse().map_err(|_| UiError::Failed)?;
    Ok(n)
}

/// A path to the attribute and to the spec, and an alias of `Result`.
pub type UiResult<T> = Result<T, UiError>;

#[resilient_core::retryable(ui_tests::UiRetry)]
#[expect(clippy::unused_async)]
pub async fn paths() -> UiResult<()> {
    Ok(())
}

#[retryable(UiRetry)]
#[expect(dead_code)]
async fn never_called() -> Result<(), UiError> {
    Ok(())
}

fn main() {
    let _ = question_mark("1");
}
