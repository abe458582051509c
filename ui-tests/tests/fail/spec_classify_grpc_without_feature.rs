//! `classify = grpc` in a build without the `grpc` feature of resilient-core.
use resilient_core::RetrySpec;

#[derive(RetrySpec)]
#[spec("ui.retry.grpc", classify = grpc)]
pub struct GrpcRetry;

fn main() {}
