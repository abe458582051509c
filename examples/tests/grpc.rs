//! `classify = grpc` and the layers against a real tonic server on
//! 127.0.0.1 that counts the requests its handler receives and when (on
//! tokio's paused clock): `UNAVAILABLE` is retried, the caller's errors and
//! `DEADLINE_EXCEEDED` are not, `grpc-retry-pushback-ms` sets the wait or
//! stops the retry, and a server's full limit answers a gRPC status that
//! the client's classification reads.

use std::error::Error as _;
use std::net::SocketAddr;
use std::time::Duration;

use examples::grpc::{bind, channel, serve, Greeter, GreeterClient, HelloRequest};
use resilient_core::layer::{Layered, RespondLayer};
use resilient_core::{
    circuit_breakable, retryable, BoxError, CircuitBreakerSpec, ConcurrencyLimitSpec, Error,
    RateLimiterSpec, Registry, RetrySpec,
};
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;
use tonic::{Code, Status};

type TestResult = Result<(), Box<dyn std::error::Error>>;

#[derive(RetrySpec)]
#[spec("resilient.retry.greeter", classify = grpc)]
struct GreeterRetry;

#[derive(CircuitBreakerSpec)]
#[spec("resilient.circuitbreaker.greeter", classify = grpc)]
struct GreeterBreaker;

/// The server's limit: one call in flight.
#[derive(ConcurrencyLimitSpec)]
#[spec("resilient.concurrency.greeter_server")]
struct ServerLimit;

/// The server's rate: one call per second.
#[derive(RateLimiterSpec)]
#[spec("resilient.ratelimiter.greeter_server")]
struct ServerRate;

/// The client's call: the breaker sees one outcome per call, the retry
/// one per attempt.
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

fn registry(retry: &str) -> Result<Registry, Box<dyn std::error::Error>> {
    let toml = format!(
        "[resilient.retry.greeter]\n{retry}\n\
         [resilient.circuitbreaker.greeter]\n\
         failure_rate_threshold = 50\nminimum_required_calls = 3\n\
         wait_duration_in_open_state = \"30s\"\npermitted_calls_in_half_open_state = 1\n\
         count_based = {{ window_size = 10 }}\n\
         [resilient.concurrency.greeter_server]\nlimit = 1\n\
         [resilient.ratelimiter.greeter_server]\nlimit_for_period = 1\nlimit_refresh_period = \"1s\"\n"
    );
    let settings = config::Config::builder()
        .add_source(config::File::from_str(&toml, config::FileFormat::Toml))
        .build()?;
    Ok(resilient_config::build(
        Registry::builder()
            .spec::<GreeterRetry>()
            .spec::<GreeterBreaker>()
            .spec::<ServerLimit>()
            .spec::<ServerRate>(),
        &settings,
    )?)
}

/// A greeter served on loopback without layers.
async fn plain_server() -> Result<(Greeter, SocketAddr), Box<dyn std::error::Error>> {
    let greeter = Greeter::new();
    let (listener, addr) = bind().await?;
    serve(
        tonic::transport::Server::builder().add_service(greeter.clone()),
        listener,
    );
    Ok((greeter, addr))
}

/// `UNAVAILABLE` with the pushback `value`.
fn pushback(value: &'static str) -> Status {
    let mut status = Status::unavailable("draining");
    status
        .metadata_mut()
        .insert("grpc-retry-pushback-ms", MetadataValue::from_static(value));
    status
}

/// The breaker's window: (calls, failures).
fn window(registry: &Registry) -> Result<(u64, u64), Error> {
    let window = registry.sync_scope(GreeterBreaker::get)?.metrics().window;
    Ok((window.total, window.failures))
}

#[tokio::test(start_paused = true)]
async fn unavailable_twice_then_ok_takes_three_hits() -> TestResult {
    let r = registry("delay = \"10ms\"\nattempts = 5")?;
    let _registry = r.set_default();
    let (server, addr) = plain_server().await?;
    server.fail_with([Status::unavailable("down"), Status::unavailable("down")]);
    let client = GreeterClient::connect_lazy(addr)?;

    assert_eq!(greet(&client, "rex").await?, "hello rex");

    assert_eq!(server.hits(), 3);
    assert_eq!(server.gaps(), [Duration::from_millis(10); 2]);
    assert_eq!(window(&r)?, (1, 0), "one call, a success");
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_callers_error_is_one_hit_and_counted_neither_way() -> TestResult {
    let r = registry("delay = \"10ms\"\nattempts = 5")?;
    let _registry = r.set_default();
    let (server, addr) = plain_server().await?;
    server.fail_with([Status::invalid_argument("no name")]);
    let client = GreeterClient::connect_lazy(addr)?;

    let status = greet(&client, "").await.err().ok_or("expected an error")?;

    assert_eq!(server.hits(), 1);
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.source().is_none(), "the server's status, unchanged");
    assert_eq!(window(&r)?, (0, 0));
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn deadline_exceeded_is_one_hit_and_a_breaker_failure() -> TestResult {
    let r = registry("delay = \"10ms\"\nattempts = 5")?;
    let _registry = r.set_default();
    let (server, addr) = plain_server().await?;
    server.fail_with([Status::deadline_exceeded("too slow")]);
    let client = GreeterClient::connect_lazy(addr)?;

    let status = greet(&client, "rex")
        .await
        .err()
        .ok_or("expected an error")?;

    assert_eq!(server.hits(), 1);
    assert_eq!(status.code(), Code::DeadlineExceeded);
    assert!(status.source().is_none(), "the server's status, unchanged");
    assert_eq!(window(&r)?, (1, 1));
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn negative_pushback_stops_after_one_hit() -> TestResult {
    let r = registry("delay = \"10ms\"\nattempts = 5")?;
    let _registry = r.set_default();
    let (server, addr) = plain_server().await?;
    server.fail_with([pushback("-1")]);
    let client = GreeterClient::connect_lazy(addr)?;

    let status = greet(&client, "rex")
        .await
        .err()
        .ok_or("expected an error")?;

    assert_eq!(server.hits(), 1);
    assert_eq!(status.code(), Code::Unavailable);
    assert!(status.source().is_none(), "the server's status, unchanged");
    assert_eq!(window(&r)?, (1, 1), "still a failure of the server");
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn pushback_sets_the_wait_before_the_next_attempt() -> TestResult {
    let r = registry("delay = \"10ms\"\nattempts = 5")?;
    let _registry = r.set_default();
    let (server, addr) = plain_server().await?;
    server.fail_with([pushback("50"), Status::resource_exhausted("quota")]);
    let client = GreeterClient::connect_lazy(addr)?;

    // 50 ms (the pushback), then RESOURCE_EXHAUSTED without one: not
    // retried.
    let status = greet(&client, "rex")
        .await
        .err()
        .ok_or("expected an error")?;
    assert_eq!(server.hits(), 2);
    assert_eq!(server.gaps(), [Duration::from_millis(50)]);
    assert_eq!(status.code(), Code::ResourceExhausted);

    // With a pushback, RESOURCE_EXHAUSTED is retried after it.
    let mut exhausted = Status::resource_exhausted("quota");
    exhausted
        .metadata_mut()
        .insert("grpc-retry-pushback-ms", MetadataValue::from_static("30"));
    server.fail_with([exhausted]);
    assert_eq!(greet(&client, "rex").await?, "hello rex");
    assert_eq!(server.hits(), 4);
    assert_eq!(server.gaps()[2], Duration::from_millis(30));
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn retry_giving_up_reaches_the_caller_as_unavailable_with_its_error() -> TestResult {
    let r = registry("delay = \"10ms\"\nattempts = 2")?;
    let _registry = r.set_default();
    let (server, addr) = plain_server().await?;
    server.fail_with((0..3).map(|_| Status::unavailable("down")));
    let client = GreeterClient::connect_lazy(addr)?;

    let status = greet(&client, "rex")
        .await
        .err()
        .ok_or("expected an error")?;

    assert_eq!(server.hits(), 3);
    assert_eq!(status.code(), Code::Unavailable);
    let gave_up = status.source().and_then(|e| e.downcast_ref::<Error>());
    assert!(
        matches!(gave_up, Some(Error::RetryExhausted(_))),
        "{status:?}"
    );
    Ok(())
}

/// A server whose every call passes `layers` (answering as gRPC).
async fn layered_server<L>(layers: L) -> Result<(Greeter, SocketAddr), Box<dyn std::error::Error>>
where
    RespondLayer<L, resilient_core::layer::GrpcAnswers>: tower::Layer<tonic::service::Routes>,
    L: Clone + Send + Sync + 'static,
    <RespondLayer<L, resilient_core::layer::GrpcAnswers> as tower::Layer<
        tonic::service::Routes,
    >>::Service: tower::Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + 'static,
    <<RespondLayer<L, resilient_core::layer::GrpcAnswers> as tower::Layer<
        tonic::service::Routes,
    >>::Service as tower::Service<http::Request<tonic::body::Body>>>::Future: Send,
{
    let greeter = Greeter::new();
    let (listener, addr) = bind().await?;
    serve(
        tonic::transport::Server::builder()
            .layer(RespondLayer::grpc(layers))
            .add_service(greeter.clone()),
        listener,
    );
    Ok((greeter, addr))
}

#[tokio::test(start_paused = true)]
async fn a_full_server_limit_answers_unavailable_without_a_hit() -> TestResult {
    let r = registry("delay = \"10ms\"\nattempts = 2")?;
    let _registry = r.set_default();
    let (server, addr) = layered_server(ServerLimit::layer()).await?;
    let gate = server.hold();
    let mut first = GreeterClient::connect_lazy(addr)?;
    let held = tokio::spawn(async move {
        first
            .say_hello(HelloRequest {
                name: "first".to_owned(),
            })
            .await
    });
    while server.hits() < 1 {
        tokio::task::yield_now().await;
    }

    // A plain client sees the limit's answer: UNAVAILABLE, no pushback.
    let mut plain = GreeterClient::connect_lazy(addr)?;
    let refused = plain
        .say_hello(HelloRequest {
            name: "second".to_owned(),
        })
        .await
        .err()
        .ok_or("expected a refusal")?;
    assert_eq!(refused.code(), Code::Unavailable);
    assert!(refused.metadata().get("grpc-retry-pushback-ms").is_none());

    // The annotated fn retries it, and gives up: no request reached the
    // handler but the held one.
    let client = GreeterClient::connect_lazy(addr)?;
    let status = greet(&client, "third")
        .await
        .err()
        .ok_or("expected an error")?;
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(server.hits(), 1);

    gate.add_permits(1);
    assert_eq!(held.await??.into_inner().message, "hello first");
    assert_eq!(server.hits(), 1);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_server_rate_limit_tells_its_wait_and_the_client_waits_it() -> TestResult {
    let r = registry("delay = \"10ms\"\nattempts = 2")?;
    let _registry = r.set_default();
    let (server, addr) = layered_server(ServerRate::layer()).await?;
    let client = GreeterClient::connect_lazy(addr)?;

    assert_eq!(greet(&client, "one").await?, "hello one");
    // The second call within the second: RESOURCE_EXHAUSTED with the time
    // until the next permit as pushback, which the retry waits.
    let mut plain = client.clone();
    let refused = plain
        .say_hello(HelloRequest {
            name: "two".to_owned(),
        })
        .await
        .err()
        .ok_or("expected a refusal")?;
    assert_eq!(refused.code(), Code::ResourceExhausted);
    let wait = refused
        .metadata()
        .get("grpc-retry-pushback-ms")
        .ok_or("no pushback")?
        .to_str()?
        .parse::<u64>()?;
    assert!((1..=1000).contains(&wait), "{wait}");

    let before = tokio::time::Instant::now();
    assert_eq!(greet(&client, "three").await?, "hello three");
    assert!(before.elapsed() >= Duration::from_millis(wait), "waited");
    assert_eq!(server.hits(), 2, "one request refused twice, never handled");
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_breaker_on_the_channel_reads_trailers_only_statuses() -> TestResult {
    let r = registry("delay = \"10ms\"\nattempts = 0")?;
    let _registry = r.set_default();
    let (server, addr) = plain_server().await?;
    server.fail_with((0..3).map(|_| Status::unavailable("down")));
    let layered = tower::ServiceBuilder::new()
        .map_err(resilient_core::grpc::status_error)
        .layer(GreeterBreaker::layer())
        .map_err(BoxError::from)
        .service(channel(addr)?);
    let mut client = GreeterClient::new(layered);
    let hello = || HelloRequest {
        name: "rex".to_owned(),
    };

    for _ in 0..3 {
        let status = client.say_hello(hello()).await.err().ok_or("expected")?;
        assert_eq!(status.code(), Code::Unavailable);
    }
    assert_eq!(server.hits(), 3);
    let breaker = r.sync_scope(GreeterBreaker::get)?;
    assert_eq!(breaker.metrics().opened, 1, "3 failures of 3");

    // Open: refused without a request, as UNAVAILABLE with the rest of the
    // open wait as pushback.
    let refused = client.say_hello(hello()).await.err().ok_or("expected")?;
    assert_eq!(refused.code(), Code::Unavailable);
    assert_eq!(
        refused
            .metadata()
            .get("grpc-retry-pushback-ms")
            .map(|v| v.as_bytes()),
        Some(&b"30000"[..])
    );
    assert_eq!(server.hits(), 3);
    assert_eq!(breaker.metrics().rejected, 1);
    Ok(())
}

/// The `grpc` example prints what its annotated client saw: two
/// `UNAVAILABLE` retried (3 hits), `INVALID_ARGUMENT` once (1 hit), a
/// pushback of -1 once (1 hit); the breaker counted two calls, one failed.
#[test]
fn the_example_counts_its_hits() -> TestResult {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_grpc")).output()?;
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        String::from_utf8(output.stdout)?,
        "Ok(\"hello rex\") after 3 hits\n\
         Err(InvalidArgument) after 4 hits\n\
         Err(Unavailable) after 5 hits\n\
         breaker: 2 calls counted, 1 failed\n"
    );
    Ok(())
}
