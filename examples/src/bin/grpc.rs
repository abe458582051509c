//! gRPC with tonic: a greeter server on loopback behind a concurrency
//! limit that answers `UNAVAILABLE` when full, and a client fn annotated
//! with a breaker and a retry, both `classify = grpc`. The server fails
//! twice with `UNAVAILABLE` (retried: 3 hits), then once with
//! `INVALID_ARGUMENT` (the caller's error: 1 hit, not retried, not counted
//! by the breaker), then with `UNAVAILABLE` and `grpc-retry-pushback-ms:
//! -1` (the server says stop: 1 hit).
//!
//! Run with `cargo run -p examples --features grpc --bin grpc`.

use examples::grpc::{bind, serve, Greeter, GreeterClient, HelloRequest};
use resilient_core::layer::{Layered, RespondLayer};
use resilient_core::prelude::*;
use resilient_core::Registry;
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;
use tonic::Status;

/// `UNAVAILABLE` is retried, after the server's pushback when it sends one.
#[derive(RetrySpec)]
#[spec("resilient.retry.greeter", classify = grpc)]
pub struct GreeterRetry;

/// Counts the server's failures, not the caller's errors.
#[derive(CircuitBreakerSpec)]
#[spec("resilient.circuitbreaker.greeter", classify = grpc)]
pub struct GreeterBreaker;

/// The server takes 16 calls at once, and answers `UNAVAILABLE` beyond.
#[derive(ConcurrencyLimitSpec)]
#[spec("resilient.concurrency.greeter_server")]
pub struct GreeterLimit;

const CONFIG: &str = r#"
[resilient.retry.greeter]
attempts = 3
delay = "10ms"

[resilient.circuitbreaker.greeter]
failure_rate_threshold = 50
minimum_required_calls = 10
wait_duration_in_open_state = "30s"
permitted_calls_in_half_open_state = 1
count_based = { window_size = 20 }

[resilient.concurrency.greeter_server]
limit = 16
"#;

/// One greeting: the breaker sees the call, the retry each attempt.
#[circuit_breakable(GreeterBreaker)]
#[retryable(GreeterRetry)]
async fn greet(client: &GreeterClient<Channel>, name: &str) -> Result<String, Status> {
    let mut client = client.clone();
    let reply = client
        .say_hello(HelloRequest {
            name: name.to_owned(),
        })
        .await?;
    Ok(reply.into_inner().message)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let settings = config::Config::builder()
        .add_source(config::File::from_str(CONFIG, config::FileFormat::Toml))
        .build()?;
    let registry = resilient_config::build(
        Registry::builder()
            .spec::<GreeterRetry>()
            .spec::<GreeterBreaker>()
            .spec::<GreeterLimit>(),
        &settings,
    )?;
    let _registry = registry.set_default();

    let greeter = Greeter::new();
    let (listener, addr) = bind().await?;
    serve(
        tonic::transport::Server::builder()
            .layer(RespondLayer::grpc(GreeterLimit::layer()))
            .add_service(greeter.clone()),
        listener,
    );
    let client = GreeterClient::connect_lazy(addr)?;

    greeter.fail_with([Status::unavailable("down"), Status::unavailable("down")]);
    let answer = greet(&client, "rex").await;
    println!("{:?} after {} hits", answer, greeter.hits());

    greeter.fail_with([Status::invalid_argument("no name")]);
    let answer = greet(&client, "").await.map_err(|s| s.code());
    println!("{:?} after {} hits", answer, greeter.hits());

    let mut stop = Status::unavailable("draining");
    stop.metadata_mut()
        .insert("grpc-retry-pushback-ms", MetadataValue::from_static("-1"));
    greeter.fail_with([stop]);
    let answer = greet(&client, "rex").await.map_err(|s| s.code());
    println!("{:?} after {} hits", answer, greeter.hits());

    let window = registry.sync_scope(GreeterBreaker::get)?.metrics().window;
    println!(
        "breaker: {} calls counted, {} failed",
        window.total, window.failures
    );
    Ok(())
}
