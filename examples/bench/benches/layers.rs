//! The specs as tower layers (`resilient_core::layer`, feature `tower`)
//! beside tower's own layers and tower-resilience's, on a tokio
//! current-thread runtime with the registry installed, nothing failing.
//! Every stack is built once by `ServiceBuilder` over a `tower::service_fn`
//! of the bench's op, and owned by the bench: each call makes it ready and
//! calls it (`svc.ready().await?.call(()).await`), as the one owner of a
//! service does. The four-layer stacks are also called as a service shared
//! between callers is, a clone per call (`svc.clone().oneshot(())`), the
//! way the "stack success path" group calls tower-resilience's stack. The
//! same four specs as one `StackLayer` are called both ways beside them.

use std::hint::black_box;
use std::time::Instant;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion};
use resilient_core::layer::{Layered, StackLayer};
use resilient_core::{CircuitBreakerSpec, ConcurrencyLimitSpec, RetrySpec, TimeoutSpec};
use tokio::runtime::Runtime;
use tower::{Service, ServiceBuilder, ServiceExt as _};

use super::{
    current_thread, four_attributes, hand, install, op, peer_stacks, ATTEMPTS, LIMIT, OPEN_WAIT,
    RETRY_DELAY, TIMEOUT,
};

/// The specs of the layers, registered with the settings of the stack
/// group's specs (see `registry()`); their own instances, apart from the
/// attributes'.
#[derive(RetrySpec)]
#[spec("bench.layer_retry")]
pub struct LayerRetry;

#[derive(CircuitBreakerSpec)]
#[spec("bench.layer_breaker")]
pub struct LayerBreaker;

#[derive(ConcurrencyLimitSpec)]
#[spec("bench.layer_limit")]
pub struct LayerLimit;

#[derive(TimeoutSpec)]
#[spec("bench.layer_timeout")]
pub struct LayerTimeout;

/// tower's retry policy with the spec's settings: any error is retried, up
/// to `ATTEMPTS - 1` times, `RETRY_DELAY` apart; the count is the request's
/// (tower clones the policy for each request).
#[derive(Clone, Copy)]
struct Retries {
    left: u32,
}

impl Retries {
    const fn new() -> Self {
        Self { left: ATTEMPTS - 1 }
    }
}

impl<Req: Clone, Res, E> tower::retry::Policy<Req, Res, E> for Retries {
    type Future = tokio::time::Sleep;

    fn retry(&mut self, _: &mut Req, result: &mut Result<Res, E>) -> Option<Self::Future> {
        if result.is_ok() || self.left == 0 {
            return None;
        }
        self.left -= 1;
        Some(tokio::time::sleep(RETRY_DELAY))
    }

    fn clone_request(&mut self, req: &Req) -> Option<Req> {
        Some(req.clone())
    }
}

/// One call as the service's owner makes it:
/// `svc.ready().await?.call(()).await`; whether it succeeded.
async fn ready_call<S: Service<()>>(svc: &mut S) -> bool {
    match svc.ready().await {
        Ok(ready) => ready.call(()).await.is_ok(),
        Err(_) => false,
    }
}

/// `name`: `svc` checked to succeed once, then timed, `ready_call` per
/// iteration on the one service (a loop in one `block_on`, as criterion's
/// async `iter` runs).
fn bench_ready_call<S: Service<()>>(
    g: &mut BenchmarkGroup<'_, WallTime>,
    rt: &Runtime,
    name: &str,
    mut svc: S,
) {
    assert!(
        rt.block_on(ready_call(&mut svc)),
        "{name}: the first call failed"
    );
    g.bench_function(name, |bench| {
        bench.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    black_box(ready_call(&mut svc).await);
                }
                start.elapsed()
            })
        });
    });
}

/// `name`: `svc` checked to succeed once, then timed, a clone of it called
/// once per iteration (`oneshot`).
fn bench_oneshot<S>(g: &mut BenchmarkGroup<'_, WallTime>, rt: &Runtime, name: &str, svc: S)
where
    S: Service<()> + Clone,
{
    assert!(
        rt.block_on(svc.clone().oneshot(())).is_ok(),
        "{name}: the first call failed"
    );
    g.bench_function(name, |bench| {
        bench.to_async(rt).iter(|| {
            let svc = svc.clone();
            async move { black_box(svc.oneshot(()).await.is_ok()) }
        });
    });
}

/// resilient's four layers, outermost first, as the attributes are written.
fn resilient_four() -> impl Service<(), Response = u32> + Clone {
    ServiceBuilder::new()
        .layer(LayerRetry::layer())
        .layer(LayerBreaker::layer())
        .layer(LayerLimit::layer())
        .layer(LayerTimeout::layer())
        .service(tower::service_fn(|()| op()))
}

/// The same four specs as one `StackLayer`, outermost first: one layer,
/// one response future.
pub fn resilient_stack() -> impl Service<(), Response = u32> + Clone {
    ServiceBuilder::new()
        .layer(
            StackLayer::new()
                .spec::<LayerRetry>()
                .spec::<LayerBreaker>()
                .spec::<LayerLimit>()
                .spec::<LayerTimeout>(),
        )
        .service(tower::service_fn(|()| op()))
}

/// Each layer alone beside its peer, then the four layers beside
/// tower-resilience's stack, the same four attributes on an async fn, the
/// hand-written reference and the bare op.
pub fn tower_layers(c: &mut Criterion) {
    install();
    let rt = current_thread();
    let hand = hand::Hand::new(ATTEMPTS, RETRY_DELAY, 5, OPEN_WAIT, LIMIT, TIMEOUT);
    assert!(
        rt.block_on(four_attributes()).is_ok(),
        "4 attributes: the first call failed"
    );
    assert!(
        rt.block_on(hand.call()).is_ok(),
        "hand-written: the first call failed"
    );
    let bare = || tower::service_fn(|()| op());
    let mut g = c.benchmark_group("tower layers");
    bench_ready_call(&mut g, &rt, "service_fn alone (baseline)", bare());

    bench_ready_call(
        &mut g,
        &rt,
        "timeout: resilient TimeoutLayer",
        ServiceBuilder::new()
            .layer(LayerTimeout::layer())
            .service(bare()),
    );
    bench_ready_call(
        &mut g,
        &rt,
        "timeout: tower TimeoutLayer",
        ServiceBuilder::new()
            .layer(tower::timeout::TimeoutLayer::new(TIMEOUT))
            .service(bare()),
    );

    bench_ready_call(
        &mut g,
        &rt,
        "concurrency limit: resilient ConcurrencyLimitLayer",
        ServiceBuilder::new()
            .layer(LayerLimit::layer())
            .service(bare()),
    );
    bench_ready_call(
        &mut g,
        &rt,
        "concurrency limit: tower ConcurrencyLimitLayer",
        ServiceBuilder::new()
            .layer(tower::limit::ConcurrencyLimitLayer::new(LIMIT))
            .service(bare()),
    );

    bench_ready_call(
        &mut g,
        &rt,
        "retry: resilient RetryLayer",
        ServiceBuilder::new()
            .layer(LayerRetry::layer())
            .service(bare()),
    );
    bench_ready_call(
        &mut g,
        &rt,
        "retry: tower RetryLayer",
        ServiceBuilder::new()
            .layer(tower::retry::RetryLayer::new(Retries::new()))
            .service(bare()),
    );

    bench_ready_call(
        &mut g,
        &rt,
        "breaker: resilient CircuitBreakerLayer",
        ServiceBuilder::new()
            .layer(LayerBreaker::layer())
            .service(bare()),
    );
    bench_ready_call(
        &mut g,
        &rt,
        "breaker: tower-resilience CircuitBreakerLayer",
        ServiceBuilder::new()
            .layer(peer_stacks::tower_resilience_breaker())
            .service(bare()),
    );

    bench_ready_call(&mut g, &rt, "4 layers: resilient", resilient_four());
    bench_ready_call(&mut g, &rt, "4 specs: resilient StackLayer", resilient_stack());
    bench_ready_call(
        &mut g,
        &rt,
        "4 layers: tower-resilience",
        peer_stacks::tower_resilience_stack(),
    );
    bench_oneshot(
        &mut g,
        &rt,
        "4 layers: resilient, clone + oneshot",
        resilient_four(),
    );
    bench_oneshot(
        &mut g,
        &rt,
        "4 specs: resilient StackLayer, clone + oneshot",
        resilient_stack(),
    );
    bench_oneshot(
        &mut g,
        &rt,
        "4 layers: tower-resilience, clone + oneshot",
        peer_stacks::tower_resilience_stack(),
    );
    g.bench_function("4 layers: resilient 4 attributes on an async fn", |bench| {
        bench
            .to_async(&rt)
            .iter(|| async { black_box(four_attributes().await.is_ok()) });
    });
    g.bench_function("4 layers: hand-written reference", |bench| {
        bench
            .to_async(&rt)
            .iter(|| async { black_box(hand.call().await.is_ok()) });
    });
    g.bench_function("op alone (baseline)", |bench| {
        bench
            .to_async(&rt)
            .iter(|| async { black_box(op().await.is_ok()) });
    });
    g.finish();
}
