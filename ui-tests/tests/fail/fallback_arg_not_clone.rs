//! A non-`Clone` argument named in `method`: said to be not `Clone`, at the
//! string, with no edit of the string suggested.
use resilient_core::fallback;
use ui_tests::UiError;

pub struct Query {
    pub id: u64,
}

#[fallback(method = "cached(q)")]
pub async fn find(q: Query) -> Result<u64, UiError> {
    Ok(q.id)
}

fn cached(q: Query) -> Result<u64, UiError> {
    Ok(q.id)
}

fn main() {}
