//! `impl Classify for` a spec declared without `classify = custom`: the spec
//! is classified by the default classifier, so the impl would never be used.
use resilient_core::{Classify, RetrySpec, Verdict};
use ui_tests::UiError;

#[derive(RetrySpec)]
#[spec("ui.retry.http")]
pub struct HttpRetry;

impl Classify<u16, UiError> for HttpRetry {
    fn classify(outcome: &Result<u16, UiError>) -> Verdict {
        match outcome {
            Ok(status) if *status >= 500 => Verdict::Failure,
            Ok(_) => Verdict::Success,
            Err(_) => Verdict::Failure,
        }
    }
}

fn main() {}
