//! Specs handed to the attributes through a `macro_rules!` argument carry the
//! macro caller's hygiene, the attributes the macro's: the names one layer
//! shares with another (the timeout's timer, bounding the awaits of the
//! layers inside it) must resolve whatever spans the specs have.
use resilient_core::{
    concurrency_limit, fallback, retryable, timeout, ConcurrencyLimitSpec, TimeoutSpec,
};
use ui_tests::{UiError, UiRetry};

#[derive(TimeoutSpec)]
#[spec("ui.macro_rules.timeout")]
pub struct Limit;

#[derive(ConcurrencyLimitSpec)]
#[spec("ui.macro_rules.limit")]
pub struct Places;

macro_rules! resilient_fn {
    ($name:ident, $timeout:ty, $retry:ty, $limit:ty) => {
        #[fallback(method = "cached(id)")]
        #[timeout($timeout)]
        #[retryable($retry)]
        #[concurrency_limit($limit)]
        pub async fn $name(id: u32) -> Result<u32, UiError> {
            dependency().await;
            Ok(id)
        }
    };
}

macro_rules! timeout_inside {
    ($name:ident, $timeout:ty, $retry:ty) => {
        #[retryable($retry)]
        #[timeout($timeout)]
        pub async fn $name(id: u32) -> Result<u32, UiError> {
            dependency().await;
            Ok(id)
        }
    };
}

async fn dependency() {}

fn cached(id: u32) -> Result<u32, UiError> {
    Ok(id)
}

resilient_fn!(find, Limit, UiRetry, Places);
timeout_inside!(find_each, Limit, UiRetry);

fn assert_send<T: Send>(_: T) {}

fn main() {
    assert_send(find(1));
    assert_send(find_each(1));
}
