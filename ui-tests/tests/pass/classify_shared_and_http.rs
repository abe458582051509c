//! One classifier type shared by a retry and a breaker spec, and
//! `classify = http` for a response type of the user's own.
use std::time::Duration;

use resilient_core::http::HttpResponse;
use resilient_core::{circuit_breakable, retryable, CircuitBreakerSpec, RetrySpec};
use resilient_core::{Classifier, Classify, Verdict};
use ui_tests::UiError;

/// What counts as a failed lookup, for retry and breaker alike.
pub struct Lookups;
impl Classifier for Lookups {}

impl Classify<u16, UiError> for Lookups {
    fn classify(outcome: &Result<u16, UiError>) -> Verdict {
        match outcome {
            Ok(429) => Verdict::RetryAfter(Duration::from_secs(1)),
            Ok(status) if *status >= 500 => Verdict::Failure,
            Ok(_) => Verdict::Success,
            Err(_) => Verdict::Failure,
        }
    }
}

#[derive(RetrySpec)]
#[spec("ui.retry.lookup", classify = Lookups)]
pub struct LookupRetry;

#[derive(CircuitBreakerSpec)]
#[spec("ui.circuitbreaker.lookup", classify = self::Lookups)]
pub struct LookupBreaker;

#[circuit_breakable(LookupBreaker)]
#[retryable(LookupRetry)]
pub async fn lookup(id: u16) -> Result<u16, UiError> {
    Ok(id)
}

/// A client's own response type, classified by `classify = http`.
pub struct Reply {
    pub status: u16,
    pub retry_after: Option<Vec<u8>>,
}

impl HttpResponse for Reply {
    fn status(&self) -> u16 {
        self.status
    }

    fn header(&self, name: &str) -> Option<&[u8]> {
        match name {
            "retry-after" => self.retry_after.as_deref(),
            _ => None,
        }
    }
}

#[derive(RetrySpec)]
#[spec("ui.retry.reply", classify = http)]
pub struct ReplyRetry;

#[derive(CircuitBreakerSpec)]
#[spec("ui.circuitbreaker.reply", classify = http)]
pub struct ReplyBreaker;

#[circuit_breakable(ReplyBreaker)]
#[retryable(ReplyRetry)]
pub async fn reply() -> Result<Reply, UiError> {
    Ok(Reply {
        status: 200,
        retry_after: None,
    })
}

fn main() {
    let _ = lookup(1);
    let _ = reply();
}
