//! A request through the tower layers allocates nothing on its way: the
//! five layers of a stack, each with a named response future, around a
//! service whose own future is ready at once or after one wait.

#![allow(clippy::expect_used)] // a test that panics on an unexpected outcome is the point

use resilient_core::layer::Layered;
use resilient_core::settings::Value;
use resilient_core::{
    BoxError, CircuitBreakerSpec, ConcurrencyLimitSpec, RateLimiterSpec, Registry, RetrySpec,
    TimeoutSpec,
};
use tower::{Service, ServiceBuilder, ServiceExt};

mod counting;
use counting::{allocations, Counting};

#[global_allocator]
static GLOBAL: Counting = Counting;

#[derive(RetrySpec)]
#[spec("alloc.retry")]
struct Retry;

#[derive(CircuitBreakerSpec)]
#[spec("alloc.breaker")]
struct Breaker;

#[derive(ConcurrencyLimitSpec)]
#[spec("alloc.concurrency")]
struct Concurrency;

#[derive(RateLimiterSpec)]
#[spec("alloc.rate")]
struct Rate;

#[derive(TimeoutSpec)]
#[spec("alloc.timeout")]
struct Timeout;

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
            ("concurrency", table([("limit", Value::Int(4))])),
            (
                "rate",
                table([
                    ("type", Value::Str("token_bucket".into())),
                    ("limit_for_period", Value::Int(1_000_000)),
                    ("limit_refresh_period", Value::Str("1ms".into())),
                ]),
            ),
            ("timeout", table([("duration", Value::Str("1s".into()))])),
        ]),
    )]);
    Registry::builder()
        .spec::<Retry>()
        .spec::<Breaker>()
        .spec::<Concurrency>()
        .spec::<Rate>()
        .spec::<Timeout>()
        .build(&root)
        .expect("valid")
}

/// Answers `x + 1`; when `x` is odd, after one wait (the timeout's timer
/// is then armed).
async fn answer(x: u64) -> Result<u64, BoxError> {
    if x % 2 == 1 {
        tokio::task::yield_now().await;
    }
    Ok(x + 1)
}

#[test]
fn requests_through_five_layers_allocate_nothing() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let r = registry();
    let allocated = rt.block_on(r.scope(async {
        let mut stack = ServiceBuilder::new()
            .layer(Retry::layer())
            .layer(Breaker::layer())
            .layer(Concurrency::layer())
            .layer(Rate::layer())
            .layer(Timeout::layer())
            .service(tower::service_fn(answer));
        // Warm up: thread-locals and the timer wheel may allocate once.
        for x in 0..2 {
            let _ = stack.ready().await.expect("ready").call(x).await;
        }
        let before = allocations();
        for x in 0..1_000 {
            let out = stack.ready().await.expect("ready").call(x).await;
            assert_eq!(out.expect("ok"), x + 1);
        }
        allocations() - before
    }));
    assert_eq!(allocated, 0, "{allocated} allocations in 1000 requests");
}

#[test]
fn requests_through_a_five_spec_stack_layer_allocate_nothing() {
    use resilient_core::layer::StackLayer;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let r = registry();
    let allocated = rt.block_on(r.scope(async {
        let stack = StackLayer::new()
            .spec::<Retry>()
            .spec::<Breaker>()
            .spec::<Concurrency>()
            .spec::<Rate>()
            .spec::<Timeout>();
        let mut svc = ServiceBuilder::new()
            .layer(stack)
            .service(tower::service_fn(answer));
        // Warm up: thread-locals and the timer wheel may allocate once.
        for x in 0..2 {
            let _ = svc.ready().await.expect("ready").call(x).await;
        }
        let before = allocations();
        for x in 0..1_000 {
            let out = svc.ready().await.expect("ready").call(x).await;
            assert_eq!(out.expect("ok"), x + 1);
        }
        allocations() - before
    }));
    assert_eq!(allocated, 0, "{allocated} allocations in 1000 requests");
}
