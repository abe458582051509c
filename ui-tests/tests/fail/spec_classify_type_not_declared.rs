//! A classifier type shared by specs (`classify = Statuses`) that implements
//! `Classify` without declaring itself a `Classifier`.
use resilient_core::{Classify, RetrySpec, Verdict};
use ui_tests::UiError;

pub struct Statuses;

impl Classify<u16, UiError> for Statuses {
    fn classify(outcome: &Result<u16, UiError>) -> Verdict {
        match outcome {
            Ok(status) if *status >= 500 => Verdict::Failure,
            Ok(_) => Verdict::Success,
            Err(_) => Verdict::Failure,
        }
    }
}

#[derive(RetrySpec)]
#[spec("ui.retry.http", classify = Statuses)]
pub struct HttpRetry;

fn main() {}
