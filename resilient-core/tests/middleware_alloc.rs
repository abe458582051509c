//! A request through a stack of specs as reqwest middleware allocates
//! nothing of the stack's own on its way: beside a client whose only
//! middleware answers at once, a stack of breaker, limit and timeout adds
//! one allocation per request, the boxed future reqwest-middleware gives
//! every middleware (`Middleware::handle`), and a retry in it adds the copy
//! of the request each attempt sends (`Request::try_clone`), no more.

#![allow(clippy::expect_used)] // a test that panics on an unexpected outcome is the point

use resilient_core::layer::StackLayer;
use resilient_core::settings::Value;
use resilient_core::{CircuitBreakerSpec, ConcurrencyLimitSpec, Registry, RetrySpec, TimeoutSpec};

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
            ("timeout", table([("duration", Value::Str("1s".into()))])),
        ]),
    )]);
    Registry::builder()
        .spec::<Retry>()
        .spec::<Breaker>()
        .spec::<Concurrency>()
        .spec::<Timeout>()
        .build(&root)
        .expect("valid")
}

/// Answers every request with an empty 200, sending nothing.
struct Answer;

#[async_trait::async_trait]
impl reqwest_middleware::Middleware for Answer {
    async fn handle(
        &self,
        _: reqwest::Request,
        _: &mut http::Extensions,
        _: reqwest_middleware::Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        Ok(reqwest::Response::from(http::Response::new(
            Vec::<u8>::new(),
        )))
    }
}

/// Allocations per request through `client` (the request's own copy made
/// by the caller included), over 1000 requests after two to warm up.
fn per_request(
    rt: &tokio::runtime::Runtime,
    r: &Registry,
    client: &reqwest_middleware::ClientWithMiddleware,
) -> usize {
    let request = client
        .get("http://pets.example/7")
        .build()
        .expect("a request");
    rt.block_on(r.scope(async {
        let call = || async {
            let copy = request.try_clone().expect("a request without a body");
            let status = client.execute(copy).await.expect("answered").status();
            assert_eq!(status, 200);
        };
        for _ in 0..2 {
            call().await;
        }
        let before = allocations();
        for _ in 0..1_000 {
            call().await;
        }
        (allocations() - before) / 1_000
    }))
}

#[test]
fn a_stack_middleware_allocates_only_reqwest_middleware_s_box_and_a_retry_s_copy() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let r = registry();
    let builder = || reqwest_middleware::ClientBuilder::new(reqwest::Client::new());
    let bare = per_request(&rt, &r, &builder().with(Answer).build());
    let three = builder()
        .with(
            StackLayer::<_, reqwest::Request>::new()
                .spec::<Breaker>()
                .spec::<Concurrency>()
                .spec::<Timeout>(),
        )
        .with(Answer)
        .build();
    let four = builder()
        .with(
            StackLayer::<_, reqwest::Request>::new()
                .spec::<Retry>()
                .spec::<Breaker>()
                .spec::<Concurrency>()
                .spec::<Timeout>(),
        )
        .with(Answer)
        .build();
    // What one copy of the request allocates.
    let request = reqwest::Client::new()
        .get("http://pets.example/7")
        .build()
        .expect("a request");
    let before = allocations();
    let copy = request.try_clone();
    let copy_allocations = allocations() - before;
    drop(copy);
    assert_eq!(
        per_request(&rt, &r, &three),
        bare + 1,
        "breaker, limit and timeout: the one boxed future of the middleware"
    );
    assert_eq!(
        per_request(&rt, &r, &four),
        bare + 1 + copy_allocations,
        "with a retry: and the copy of the request the attempt sends"
    );
}
