//! `classify = Statuses` names a type that does not exist.
use resilient_core::RetrySpec;

#[derive(RetrySpec)]
#[spec("ui.retry.http", classify = Statuses)]
pub struct HttpRetry;

fn main() {}
