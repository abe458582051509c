//! A successful call classified with `classify = grpc` allocates nothing:
//! through the attributes (a fn returning `Result<tonic::Response<T>,
//! tonic::Status>`), and through a breaker layer on a gRPC server's stack
//! (`RespondLayer::grpc`), whose classification reads the response's
//! headers.

#![allow(clippy::expect_used)] // a test that panics on an unexpected outcome is the point

use std::convert::Infallible;

use resilient_core::layer::{Layered, RespondLayer};
use resilient_core::settings::Value;
use resilient_core::{circuit_breakable, retryable, CircuitBreakerSpec, Registry, RetrySpec};
use tower::{Layer, Service, ServiceExt};

mod counting;
use counting::{allocations, Counting};

#[global_allocator]
static GLOBAL: Counting = Counting;

#[derive(RetrySpec)]
#[spec("alloc.retry", classify = grpc)]
struct Retry;

#[derive(CircuitBreakerSpec)]
#[spec("alloc.breaker", classify = grpc)]
struct Breaker;

fn table<const N: usize>(pairs: [(&str, Value); N]) -> Value {
    Value::Table(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

fn registry() -> Registry {
    let root = table([(
        "alloc",
        table([
            (
                "retry",
                table([
                    ("delay", Value::Str("1ms".into())),
                    ("attempts", Value::Int(3)),
                ]),
            ),
            (
                "breaker",
                table([
                    ("failure_rate_threshold", Value::Int(50)),
                    ("minimum_required_calls", Value::Int(10)),
                    ("wait_duration_in_open_state", Value::Str("1s".into())),
                    ("permitted_calls_in_half_open_state", Value::Int(1)),
                    ("count_based", table([("window_size", Value::Int(100))])),
                ]),
            ),
        ]),
    )]);
    Registry::builder()
        .spec::<Retry>()
        .spec::<Breaker>()
        .build(&root)
        .expect("valid")
}

#[circuit_breakable(Breaker)]
#[retryable(Retry)]
async fn greet(x: u64) -> Result<tonic::Response<u64>, tonic::Status> {
    Ok(tonic::Response::new(x + 1))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime")
}

#[test]
fn annotated_grpc_calls_allocate_nothing() {
    let r = registry();
    let allocated = runtime().block_on(r.scope(async {
        // Warm up: thread-locals may allocate once.
        for x in 0..2 {
            let _ = greet(x).await;
        }
        let before = allocations();
        for x in 0..1_000 {
            let out = greet(x).await.expect("ok");
            assert_eq!(out.into_inner(), x + 1);
        }
        allocations() - before
    }));
    assert_eq!(allocated, 0, "{allocated} allocations in 1000 calls");
    let window = r
        .sync_scope(Breaker::get)
        .expect("breaker")
        .metrics()
        .window;
    assert_eq!(
        (window.total, window.failures),
        (100, 0),
        "a full window of successes"
    );
}

#[test]
fn requests_through_a_grpc_server_layer_allocate_nothing() {
    let r = registry();
    let allocated = runtime().block_on(r.scope(async {
        let mut svc =
            RespondLayer::grpc(Breaker::layer()).layer(tower::service_fn(|x: u64| async move {
                Ok::<_, Infallible>(http::Response::new(x + 1))
            }));
        for x in 0..2 {
            let _ = svc.ready().await.expect("ready").call(x).await;
        }
        let before = allocations();
        for x in 0..1_000 {
            let out = svc.ready().await.expect("ready").call(x).await;
            assert_eq!(out.expect("ok").into_body(), x + 1);
        }
        allocations() - before
    }));
    assert_eq!(allocated, 0, "{allocated} allocations in 1000 requests");
    let window = r
        .sync_scope(Breaker::get)
        .expect("breaker")
        .metrics()
        .window;
    assert_eq!(
        (window.total, window.failures),
        (100, 0),
        "a full window of successes"
    );
}
