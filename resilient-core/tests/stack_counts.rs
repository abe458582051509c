//! One way of counting: one mixed workload (successes, failures, timeouts,
//! a rejection by each of a breaker, a limit and a rate limiter, retries
//! that succeed and retries that give up) through the same five specs
//! reached by each door (attributes on an `async fn`, the stack as a tower
//! layer and as reqwest middleware, the single-spec layers and
//! middleware) gives the same counts per spec and outcome, the same events,
//! the same answers and the same upstream hits. On tokio's paused clock.

#![allow(clippy::expect_used, clippy::unwrap_used)]
// a test that panics on an unexpected outcome is the point
// A door's call is spawned: its future owns what it needs, where an `async fn`
// would borrow the door.
#![allow(clippy::manual_async_fn)]

mod support;
use support::capture::Meters;
use support::*;

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use resilient_core::layer::middleware::Middlewares;
use resilient_core::layer::{LayerError, Layered, StackLayer};
use resilient_core::{
    circuit_breakable, concurrency_limit, rate_limited, retryable, timeout, CircuitBreakerSpec,
    ConcurrencyLimitSpec, Error, RateLimiterSpec, Registry, RetrySpec, Spec, TimeoutSpec,
};
use tokio::sync::Notify;
use tower::{Layer, ServiceExt};

#[derive(RateLimiterSpec)]
#[spec("counts.rate")]
struct Q;

#[derive(RetrySpec)]
#[spec("counts.retry")]
struct R;

#[derive(CircuitBreakerSpec)]
#[spec("counts.breaker")]
struct B;

#[derive(ConcurrencyLimitSpec)]
#[spec("counts.limit")]
struct L;

#[derive(TimeoutSpec)]
#[spec("counts.timeout")]
struct T;

/// What the upstream does when hit.
#[derive(Debug, Clone, Copy)]
enum Hit {
    Ok,
    Fail,
    /// Answers after 1 s (the timeout is 100 ms).
    Slow,
    /// Answers when the gate opens.
    Hold,
}

#[derive(Debug, thiserror::Error)]
enum ApiError {
    #[error("upstream failed")]
    Upstream,
    #[error(transparent)]
    Resilience(#[from] Error),
}

impl LayerError for ApiError {
    fn resilience(&self) -> Option<&Error> {
        match self {
            ApiError::Resilience(e) => Some(e),
            ApiError::Upstream => None,
        }
    }
}

/// The upstream's failure, as the middleware's last middleware gives it.
#[derive(Debug, thiserror::Error)]
#[error("upstream failed")]
struct Down;

/// A scripted upstream: each hit takes the next behaviour (then `Ok`).
#[derive(Clone, Default)]
struct Upstream {
    script: Arc<Mutex<VecDeque<Hit>>>,
    gate: Arc<Notify>,
    hits: Arc<AtomicUsize>,
}

impl Upstream {
    fn script(&self, hits: &[Hit]) {
        self.script.lock().unwrap().extend(hits.iter().copied());
    }

    async fn hit(&self) -> Result<u32, ApiError> {
        self.hits.fetch_add(1, Ordering::SeqCst);
        let hit = self.script.lock().unwrap().pop_front().unwrap_or(Hit::Ok);
        match hit {
            Hit::Ok => Ok(1),
            Hit::Fail => Err(ApiError::Upstream),
            Hit::Slow => {
                tokio::time::sleep(Duration::from_secs(1)).await;
                Ok(1)
            }
            Hit::Hold => {
                self.gate.notified().await;
                Ok(1)
            }
        }
    }
}

#[rate_limited(Q)]
#[retryable(R)]
#[circuit_breakable(B)]
#[concurrency_limit(L)]
#[timeout(T)]
async fn annotated(up: Upstream) -> Result<u32, ApiError> {
    up.hit().await
}

/// The registry of one door's run: the five specs, metrics on, counted by
/// `meters`. The rate limiter lets 7 calls through in the run (every call
/// but the last); retry: 1 retry 10 ms later; breaker never opens on its
/// own; 1 place; timeout 100 ms.
fn registry(meters: &Meters) -> Registry {
    metrics::with_local_recorder(meters, || {
        build(
            Registry::builder()
                .spec::<Q>()
                .spec::<R>()
                .spec::<B>()
                .spec::<L>()
                .spec::<T>(),
            vec![
                (
                    Q::PATH,
                    metered(table([
                        ("limit_for_period", int(7)),
                        ("limit_refresh_period", s("1h")),
                    ])),
                ),
                (
                    R::PATH,
                    metered(table([("attempts", int(1)), ("delay", s("10ms"))])),
                ),
                (B::PATH, metered(breaker_section(50, 100, "1h", 100))),
                (L::PATH, metered(table([("limit", int(1))]))),
                (T::PATH, metered(table([("duration", s("100ms"))]))),
            ],
        )
    })
}

/// A door: one call through the five specs to `up`, as `Result<u32, String>`.
trait Door: Clone + Send + 'static {
    fn call(&self, up: Upstream) -> impl Future<Output = Result<u32, String>> + Send + 'static;
}

#[derive(Clone)]
struct Attributes;

impl Door for Attributes {
    fn call(&self, up: Upstream) -> impl Future<Output = Result<u32, String>> + Send + 'static {
        async move { annotated(up).await.map_err(|e| e.to_string()) }
    }
}

#[derive(Clone)]
struct Tower;

impl Door for Tower {
    fn call(&self, up: Upstream) -> impl Future<Output = Result<u32, String>> + Send + 'static {
        async move {
            let svc = StackLayer::new()
                .spec::<Q>()
                .spec::<R>()
                .spec::<B>()
                .spec::<L>()
                .spec::<T>()
                .layer(tower::service_fn(move |()| {
                    let up = up.clone();
                    async move { up.hit().await }
                }));
            svc.oneshot(()).await.map_err(|e| e.to_string())
        }
    }
}

/// The single-spec layers, one per spec, in `ServiceBuilder`.
#[derive(Clone)]
struct Layers;

impl Door for Layers {
    fn call(&self, up: Upstream) -> impl Future<Output = Result<u32, String>> + Send + 'static {
        async move {
            let svc = tower::ServiceBuilder::new()
                .layer(Q::layer())
                .layer(R::layer())
                .layer(B::layer())
                .layer(L::layer())
                .layer(T::layer())
                .service(tower::service_fn(move |()| {
                    let up = up.clone();
                    async move { up.hit().await }
                }));
            svc.oneshot(()).await.map_err(|e| e.to_string())
        }
    }
}

/// The middleware's last middleware: the upstream, sending nothing.
struct Answer(Upstream);

#[async_trait::async_trait]
impl reqwest_middleware::Middleware for Answer {
    async fn handle(
        &self,
        _: reqwest::Request,
        _: &mut http::Extensions,
        _: reqwest_middleware::Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        match self.0.hit().await {
            Ok(_) => Ok(reqwest::Response::from(http::Response::new(
                Vec::<u8>::new(),
            ))),
            Err(_) => Err(reqwest_middleware::Error::middleware(Down)),
        }
    }
}

/// The stack as one middleware (`true`), or the single-spec middleware,
/// one per spec.
#[derive(Clone)]
struct Middleware(bool);

impl Door for Middleware {
    fn call(&self, up: Upstream) -> impl Future<Output = Result<u32, String>> + Send + 'static {
        let stacked = self.0;
        async move {
            let builder = reqwest_middleware::ClientBuilder::new(reqwest::Client::new());
            let builder = if stacked {
                builder.with(
                    StackLayer::<_, reqwest::Request>::new()
                        .spec::<Q>()
                        .spec::<R>()
                        .spec::<B>()
                        .spec::<L>()
                        .spec::<T>(),
                )
            } else {
                builder
                    .with(Q::middleware())
                    .with(R::middleware())
                    .with(B::middleware())
                    .with(L::middleware())
                    .with(T::middleware())
            };
            let client = builder.with(Answer(up)).build();
            let out = client.get("http://pets.example/1").send().await;
            match out {
                Ok(_) => Ok(1),
                Err(e) => Err(match resilient_core::Error::try_from(e) {
                    Ok(rejected) => rejected.to_string(),
                    Err(other) => match other {
                        reqwest_middleware::Error::Middleware(e) => e.to_string(),
                        reqwest_middleware::Error::Reqwest(e) => e.to_string(),
                    },
                }),
            }
        }
    }
}

/// What one door's run counted: per spec and outcome, the events, the
/// answers and the upstream's hits.
#[derive(Debug, PartialEq)]
struct Counted {
    calls: BTreeMap<(String, &'static str), u64>,
    events: Vec<String>,
    answers: Vec<Result<u32, String>>,
    hits: usize,
}

const OUTCOMES: [&str; 6] = [
    "success",
    "failure",
    "ignored",
    "rejected",
    "timed_out",
    "cancelled",
];

/// The workload through `door`.
async fn run<D: Door>(door: D) -> Counted {
    let meters = Meters::default();
    let r = registry(&meters);
    // The rarer outcomes (`ignored`, `cancelled`) are registered when they
    // first happen, with the recorder in use then: this one, while the
    // calls run.
    let _recorder = metrics::set_default_local_recorder(&meters);
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&events);
    let _subscription = r.subscribe(move |e| seen.lock().unwrap().push(format!("{e:?}")));
    let _registry = r.set_default();
    let breaker = B::get().unwrap();
    let up = Upstream::default();
    let mut answers = Vec::new();
    // A success; a failure retried once; a failure the retry gives up on;
    // a timeout retried.
    for script in [
        &[Hit::Ok][..],
        &[Hit::Fail, Hit::Ok],
        &[Hit::Fail, Hit::Fail],
        &[Hit::Slow, Hit::Ok],
    ] {
        up.script(script);
        answers.push(door.call(up.clone()).await);
    }
    // The breaker forced open: rejected, and not retried.
    breaker.force_open();
    answers.push(door.call(up.clone()).await);
    breaker.reset();
    // The limit full: the second call's attempts are rejected and the
    // retry gives up; then the first answers.
    up.script(&[Hit::Hold]);
    let first = tokio::spawn(door.call(up.clone()));
    while up.hits.load(Ordering::SeqCst) < 8 {
        tokio::task::yield_now().await;
    }
    answers.push(door.call(up.clone()).await);
    up.gate.notify_one();
    answers.push(first.await.unwrap());
    // The rate limiter's 7 permits are spent: rejected outermost.
    answers.push(door.call(up.clone()).await);

    let mut calls = BTreeMap::new();
    for (name, path, kind) in [
        (Q::NAME, Q::PATH, Q::KIND.label()),
        (R::NAME, R::PATH, R::KIND.label()),
        (B::NAME, B::PATH, B::KIND.label()),
        (L::NAME, L::PATH, L::KIND.label()),
        (T::NAME, T::PATH, T::KIND.label()),
    ] {
        for outcome in OUTCOMES {
            let n = meters.calls((name, path, kind), outcome);
            if n > 0 {
                calls.insert((name.to_owned(), outcome), n);
            }
        }
    }
    let events = events.lock().unwrap().clone();
    Counted {
        calls,
        events,
        answers,
        hits: up.hits.load(Ordering::SeqCst),
    }
}

#[tokio::test(start_paused = true)]
async fn one_workload_counts_the_same_through_attributes_stacks_layers_and_middleware() {
    let attributes = run(Attributes).await;
    // The reference, as the attribute chain counts it.
    let calls = |spec: &str, outcome| attributes.calls.get(&(spec.to_owned(), outcome)).copied();
    assert_eq!(attributes.hits, 8, "{attributes:#?}");
    assert_eq!(calls("Q", "rejected"), Some(1), "{attributes:#?}");
    assert_eq!(calls("B", "rejected"), Some(1), "{attributes:#?}");
    assert_eq!(calls("L", "rejected"), Some(2), "{attributes:#?}");
    assert_eq!(calls("T", "timed_out"), Some(1), "{attributes:#?}");
    assert_eq!(
        calls("R", "ignored"),
        Some(1),
        "the open breaker: {attributes:#?}"
    );

    let tower = run(Tower).await;
    assert_eq!(tower, attributes, "the stack layer");
    let middleware = run(Middleware(true)).await;
    assert_eq!(middleware, attributes, "the stack middleware");
    let layers = run(Layers).await;
    assert_eq!(layers, attributes, "the single-spec layers");
    let middlewares = run(Middleware(false)).await;
    assert_eq!(middlewares, attributes, "the single-spec middleware");
}
