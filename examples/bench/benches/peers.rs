//! The success path of resilient beside the peer crates and a hand-written
//! reference, measured in one run so that the ratios compare like with like.
//!
//! Run with `cargo bench --manifest-path examples/bench/Cargo.toml`.

use std::hint::black_box;
use std::sync::{Barrier, Once};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use failsafe::CircuitBreaker as _;
use resilient_core::settings::Value;
use resilient_core::{
    circuit_breakable, concurrency_limit, retryable, timeout, CircuitBreakerSpec,
    ConcurrencyLimitSpec, Registry, RetrySpec, TimeoutSpec,
};

mod hand;
mod keyed;
mod layers;
mod middleware;
mod peer_stacks;
mod rate;
mod redis;
mod reload;
mod simulate;
mod streams;

#[derive(CircuitBreakerSpec)]
#[spec("bench.breaker")]
struct Breaker;

#[derive(RetrySpec)]
#[spec("bench.retry")]
struct Retry;

/// [`Retry`]'s settings with adaptive throttling (`throttle`, k = 2 over
/// 2 m): the "retry first-call success" group's figure beside it.
#[derive(RetrySpec)]
#[spec("bench.retry_throttle")]
struct RetryThrottle;

#[derive(TimeoutSpec)]
#[spec("bench.timeout")]
struct Timeout;

#[derive(ConcurrencyLimitSpec)]
#[spec("bench.limit")]
struct Limit;

/// The same cap as [`Limit`], `type = "adaptive"`: the limit starts there
/// and moves with latency (it stays there: the op never queues).
#[derive(ConcurrencyLimitSpec)]
#[spec("bench.adaptive_limit")]
struct AdaptiveLimit;

/// The breaker the contention group shares between tasks, one spec per
/// window kind.
#[derive(CircuitBreakerSpec)]
#[spec("bench.contended_ring")]
struct ContendedRing;

#[derive(CircuitBreakerSpec)]
#[spec("bench.contended_striped")]
struct ContendedStriped;

#[derive(Debug, thiserror::Error)]
#[error(transparent)]
struct Failed(#[from] resilient_core::Error);

/// The layers see their rejections in it (the tower layers group).
impl resilient_core::layer::LayerError for Failed {
    fn resilience(&self) -> Option<&resilient_core::Error> {
        Some(&self.0)
    }
}

/// The settings every stack below is given, resilient's and the peers':
/// retry 3 attempts 1ms apart, breaker opening at 50% failures over 100
/// calls (at least 10) for 1s, at most 64 calls in flight (reject when
/// full), timeout 1s.
const ATTEMPTS: u32 = 3;
const RETRY_DELAY: Duration = Duration::from_millis(1);
const LIMIT: usize = 64;
const TIMEOUT: Duration = Duration::from_secs(1);
const OPEN_WAIT: Duration = Duration::from_secs(1);

/// The wrapped op in every stack: it succeeds at once.
async fn op() -> Result<u32, Failed> {
    Ok(black_box(1))
}

#[retryable(Retry)]
#[circuit_breakable(Breaker)]
#[concurrency_limit(Limit)]
#[timeout(Timeout)]
async fn four_attributes() -> Result<u32, Failed> {
    Ok(black_box(1))
}

/// The stack group's layers on a blocking fn, in the same order, without
/// the timeout (a compile error on a plain fn: a thread cannot be stopped).
#[retryable(Retry)]
#[circuit_breakable(Breaker)]
#[concurrency_limit(Limit)]
fn three_attributes_blocking() -> Result<u32, Failed> {
    Ok(black_box(1))
}

/// The same three layers on an `async fn`: what the blocking fn's layers
/// cost beside the async ones'.
#[retryable(Retry)]
#[circuit_breakable(Breaker)]
#[concurrency_limit(Limit)]
async fn three_attributes() -> Result<u32, Failed> {
    Ok(black_box(1))
}

/// The blocking fn without any attribute: the floor.
fn op_blocking() -> Result<u32, Failed> {
    Ok(black_box(1))
}

#[retryable(Retry)]
async fn retry_only() -> Result<u32, Failed> {
    Ok(black_box(1))
}

#[circuit_breakable(Breaker)]
async fn breaker_only() -> Result<u32, Failed> {
    Ok(black_box(1))
}

#[concurrency_limit(Limit)]
async fn limit_only() -> Result<u32, Failed> {
    Ok(black_box(1))
}

#[timeout(Timeout)]
async fn timeout_only() -> Result<u32, Failed> {
    Ok(black_box(1))
}

#[concurrency_limit(AdaptiveLimit)]
async fn adaptive_limit_only() -> Result<u32, Failed> {
    Ok(black_box(1))
}

#[circuit_breakable(ContendedRing)]
async fn contended_ring() -> Result<u32, Failed> {
    Ok(black_box(1))
}

#[circuit_breakable(ContendedStriped)]
async fn contended_striped() -> Result<u32, Failed> {
    Ok(black_box(1))
}

fn table<const N: usize>(pairs: [(&str, Value); N]) -> Value {
    Value::Table(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

fn breaker_settings(kind: &str) -> Value {
    let window = if kind == "time_based" {
        (
            "time_based",
            table([("window_duration", Value::Str("10s".into()))]),
        )
    } else {
        ("count_based", table([("window_size", Value::Int(100))]))
    };
    table([
        ("type", Value::Str(kind.into())),
        ("failure_rate_threshold", Value::Int(50)),
        ("minimum_required_calls", Value::Int(10)),
        ("wait_duration_in_open_state", Value::Str("1s".into())),
        ("permitted_calls_in_half_open_state", Value::Int(1)),
        window,
    ])
}

/// Every spec of the bench; `kind` is `bench.breaker`'s window type.
fn registry(kind: &str) -> Registry {
    let retry = table([
        ("delay", Value::Str("1ms".into())),
        ("attempts", Value::Int(i128::from(ATTEMPTS))),
    ]);
    let root = table([(
        "bench",
        table([
            ("breaker", breaker_settings(kind)),
            ("retry", retry.clone()),
            (
                "retry_throttle",
                table([
                    ("delay", Value::Str("1ms".into())),
                    ("attempts", Value::Int(i128::from(ATTEMPTS))),
                    (
                        "throttle",
                        table([("k", Value::Float(2.0)), ("window", Value::Str("2m".into()))]),
                    ),
                ]),
            ),
            ("timeout", table([("duration", Value::Str("1s".into()))])),
            (
                "stream_timeout",
                table([
                    ("duration", Value::Str("1s".into())),
                    ("idle", Value::Str("1s".into())),
                ]),
            ),
            ("limit", table([("limit", Value::Int(LIMIT as i128))])),
            (
                "adaptive_limit",
                table([
                    ("type", Value::Str("adaptive".into())),
                    ("max", Value::Int(LIMIT as i128)),
                    ("initial", Value::Int(LIMIT as i128)),
                ]),
            ),
            ("contended_ring", breaker_settings("ring_buffer")),
            // The "rate limiter permit" group's: never a refusal.
            (
                "rate_window",
                table([
                    ("limit_for_period", Value::Int(1_048_575)),
                    ("limit_refresh_period", Value::Str("1ms".into())),
                ]),
            ),
            (
                "rate_bucket",
                table([
                    ("type", Value::Str("token_bucket".into())),
                    ("limit_for_period", Value::Int(1_000_000)),
                    ("limit_refresh_period", Value::Str("1ms".into())),
                ]),
            ),
            ("contended_striped", breaker_settings("striped_approx")),
            // The "tower layers" group's specs: the settings of the
            // stack group's.
            ("layer_retry", retry),
            ("layer_breaker", breaker_settings(kind)),
            ("layer_limit", table([("limit", Value::Int(LIMIT as i128))])),
            (
                "layer_timeout",
                table([("duration", Value::Str("1s".into()))]),
            ),
        ]),
    )]);
    match Registry::builder()
        .spec::<Breaker>()
        .spec::<Retry>()
        .spec::<RetryThrottle>()
        .spec::<Timeout>()
        .spec::<streams::StreamTimeout>()
        .spec::<Limit>()
        .spec::<AdaptiveLimit>()
        .spec::<ContendedRing>()
        .spec::<ContendedStriped>()
        .spec::<rate::RateWindow>()
        .spec::<rate::RateBucket>()
        .spec::<layers::LayerRetry>()
        .spec::<layers::LayerBreaker>()
        .spec::<layers::LayerLimit>()
        .spec::<layers::LayerTimeout>()
        .build(&root)
    {
        Ok(r) => r,
        Err(problems) => panic!("{problems:?}"),
    }
}

/// Installs the process's registry (default breaker type, `ring_buffer`)
/// once, as an application does at startup; annotated fns called outside
/// any scope use it.
fn install() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        if registry("ring_buffer").install().is_err() {
            panic!("a registry was installed before");
        }
    });
}

/// A multi-thread runtime with `workers` worker threads.
fn multi_thread(workers: usize) -> tokio::runtime::Runtime {
    match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_time()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("{e}"),
    }
}

/// "1 worker", "2 workers": how a group names its runtime.
fn on_workers(workers: usize) -> String {
    format!("{workers} worker{}", if workers == 1 { "" } else { "s" })
}

fn current_thread() -> tokio::runtime::Runtime {
    match tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("{e}"),
    }
}

fn breaker_success(c: &mut Criterion) {
    let mut g = c.benchmark_group("breaker closed success");
    for kind in [
        "striped_approx",
        "ring_buffer",
        "fixed_window",
        "time_based",
    ] {
        let r = registry(kind);
        let Ok(b) = r.sync_scope(Breaker::get) else {
            panic!("configured")
        };
        g.bench_function(format!("resilient {kind}"), |bench| {
            bench.iter(|| {
                if let Some(permit) = b.try_acquire() {
                    permit.success();
                }
            });
        });
    }
    let failsafe = failsafe::Config::new().build();
    g.bench_function("failsafe", |bench| {
        bench.iter(|| black_box(failsafe.call(|| Ok::<u32, ()>(black_box(1)))));
    });
    let recloser = recloser::Recloser::default();
    g.bench_function("recloser", |bench| {
        bench.iter(|| black_box(recloser.call(|| Ok::<u32, ()>(black_box(1)))));
    });
    g.finish();
}

/// `iters` calls of `call`, split over two threads that start together; the
/// wall time of the slower one.
fn two_threads(iters: u64, call: &(impl Fn() + Sync)) -> Duration {
    let start = Barrier::new(2);
    thread::scope(|scope| {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| {
                    start.wait();
                    let t = Instant::now();
                    for _ in 0..iters / 2 {
                        call();
                    }
                    t.elapsed()
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_default())
            .max()
            .unwrap_or_default()
    })
}

/// The same success path with two threads calling one shared breaker: the
/// figure is wall time per call, so a breaker that scales shows about half
/// its one-thread figure.
fn breaker_contended(c: &mut Criterion) {
    let mut g = c.benchmark_group("breaker closed success, 2 threads");
    for kind in ["striped_approx", "ring_buffer", "fixed_window"] {
        let r = registry(kind);
        let Ok(b) = r.sync_scope(Breaker::get) else {
            panic!("configured")
        };
        g.bench_function(format!("resilient {kind}"), |bench| {
            bench.iter_custom(|iters| {
                two_threads(iters, &|| {
                    if let Some(permit) = b.try_acquire() {
                        permit.success();
                    }
                })
            });
        });
    }
    let failsafe = failsafe::Config::new().build();
    g.bench_function("failsafe", |bench| {
        bench.iter_custom(|iters| {
            two_threads(iters, &|| {
                let _ = black_box(failsafe.call(|| Ok::<u32, ()>(black_box(1))));
            })
        });
    });
    let recloser = recloser::Recloser::default();
    g.bench_function("recloser", |bench| {
        bench.iter_custom(|iters| {
            two_threads(iters, &|| {
                let _ = black_box(recloser.call(|| Ok::<u32, ()>(black_box(1))));
            })
        });
    });
    g.finish();
}

/// A transition no longer clears the window: `reset()` costs the same at the
/// largest ring buffer as at a small one.
fn breaker_transition(c: &mut Criterion) {
    let mut g = c.benchmark_group("breaker reset");
    for size in [100, 4_194_304] {
        let breaker = table([
            ("type", Value::Str("ring_buffer".into())),
            ("failure_rate_threshold", Value::Int(50)),
            ("minimum_required_calls", Value::Int(10)),
            ("wait_duration_in_open_state", Value::Str("1s".into())),
            ("permitted_calls_in_half_open_state", Value::Int(1)),
            ("count_based", table([("window_size", Value::Int(size))])),
        ]);
        let root = table([("bench", table([("breaker", breaker)]))]);
        let Ok(r) = Registry::builder().spec::<Breaker>().build(&root) else {
            panic!("invalid settings")
        };
        let Ok(b) = r.sync_scope(Breaker::get) else {
            panic!("configured")
        };
        g.bench_function(format!("ring_buffer {size}, reset then a call"), |bench| {
            bench.iter(|| {
                b.reset();
                if let Some(permit) = b.try_acquire() {
                    permit.failure();
                }
            });
        });
    }
    g.finish();
}

fn retry_success(c: &mut Criterion) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("{e}"),
    };
    let r = registry("ring_buffer");
    let Ok(handle) = r.sync_scope(Retry::get) else {
        panic!("configured")
    };
    let mut g = c.benchmark_group("retry first-call success");
    g.bench_function("resilient", |bench| {
        bench.to_async(&rt).iter(|| {
            let handle = handle.clone();
            async move {
                black_box(
                    handle
                        .call(|| async { Ok::<u32, Failed>(black_box(1)) })
                        .await,
                )
            }
        });
    });
    let Ok(throttled) = r.sync_scope(RetryThrottle::get) else {
        panic!("configured")
    };
    g.bench_function("resilient, throttle", |bench| {
        bench.to_async(&rt).iter(|| {
            let handle = throttled.clone();
            async move {
                black_box(
                    handle
                        .call(|| async { Ok::<u32, Failed>(black_box(1)) })
                        .await,
                )
            }
        });
    });
    g.bench_function("backon", |bench| {
        use backon::Retryable;
        bench.to_async(&rt).iter(|| async {
            black_box(
                (|| async { Ok::<u32, std::io::Error>(black_box(1)) })
                    .retry(backon::ExponentialBuilder::default())
                    .await,
            )
        });
    });
    g.bench_function("no retry (baseline)", |bench| {
        bench
            .to_async(&rt)
            .iter(|| async { black_box(async { Ok::<u32, Failed>(black_box(1)) }.await) });
    });
    g.finish();
}

/// The four-attribute stack beside each attribute alone, the hand-written
/// reference and the peers' stacks, all around an op that succeeds at once,
/// on a tokio current-thread runtime.
fn stack_success(c: &mut Criterion) {
    install();
    let rt = current_thread();
    // Every stack must reach the op and succeed, or its figure means nothing.
    let hand = hand::Hand::new(ATTEMPTS, RETRY_DELAY, 5, OPEN_WAIT, LIMIT, TIMEOUT);
    let backon = peer_stacks::BackonStack::new();
    let scoped = registry("ring_buffer");
    let checks = [
        ("4 attributes", rt.block_on(four_attributes()).is_ok()),
        (
            "4 attributes, scoped",
            rt.block_on(scoped.scope(four_attributes())).is_ok(),
        ),
        ("#[retryable]", rt.block_on(retry_only()).is_ok()),
        ("#[circuit_breakable]", rt.block_on(breaker_only()).is_ok()),
        ("#[concurrency_limit]", rt.block_on(limit_only()).is_ok()),
        ("#[timeout]", rt.block_on(timeout_only()).is_ok()),
        ("hand-written", rt.block_on(hand.call()).is_ok()),
        ("backon stack", rt.block_on(backon.call()).is_ok()),
    ];
    for (name, ok) in checks {
        assert!(ok, "{name}: the first call failed");
    }
    let mut g = c.benchmark_group("stack success path");
    g.bench_function("op alone (baseline)", |bench| {
        bench
            .to_async(&rt)
            .iter(|| async { black_box(op().await.is_ok()) });
    });
    g.bench_function("resilient 4 attributes, installed registry", |bench| {
        bench
            .to_async(&rt)
            .iter(|| async { black_box(four_attributes().await.is_ok()) });
    });
    g.bench_function("resilient 4 attributes, scope per call", |bench| {
        bench
            .to_async(&rt)
            .iter(|| async { black_box(scoped.scope(four_attributes()).await.is_ok()) });
    });
    g.bench_function("resilient #[retryable] alone", |bench| {
        bench
            .to_async(&rt)
            .iter(|| async { black_box(retry_only().await.is_ok()) });
    });
    g.bench_function("resilient #[circuit_breakable] alone", |bench| {
        bench
            .to_async(&rt)
            .iter(|| async { black_box(breaker_only().await.is_ok()) });
    });
    g.bench_function("resilient #[concurrency_limit] alone", |bench| {
        bench
            .to_async(&rt)
            .iter(|| async { black_box(limit_only().await.is_ok()) });
    });
    g.bench_function("resilient #[timeout] alone", |bench| {
        bench
            .to_async(&rt)
            .iter(|| async { black_box(timeout_only().await.is_ok()) });
    });
    // The same four specs through their handles, nested as code without
    // the attributes writes them.
    let (Ok(rh), Ok(bh), Ok(lh), Ok(th)) =
        (Retry::get(), Breaker::get(), Limit::get(), Timeout::get())
    else {
        panic!("the handles of the installed specs")
    };
    assert!(
        rt.block_on(rh.call(|| bh.call(|| lh.call(|| th.call(op)))))
            .is_ok(),
        "handles: the first call failed"
    );
    g.bench_function("resilient 4 handles, nested calls", |bench| {
        bench.to_async(&rt).iter(|| async {
            black_box(
                rh.call(|| bh.call(|| lh.call(|| th.call(op))))
                    .await
                    .is_ok(),
            )
        });
    });
    g.bench_function("hand-written reference", |bench| {
        bench
            .to_async(&rt)
            .iter(|| async { black_box(hand.call().await.is_ok()) });
    });
    g.bench_function("backon + recloser + Semaphore + timeout", |bench| {
        bench
            .to_async(&rt)
            .iter(|| async { black_box(backon.call().await.is_ok()) });
    });
    peer_stacks::bench_tower_resilience(&mut g, &rt, "tower-resilience stack");
    // The layers group's four specs as one `StackLayer`, called as the
    // tower-resilience stack is: a clone per call, `oneshot`.
    use tower::ServiceExt as _;
    let stack = layers::resilient_stack();
    assert!(
        rt.block_on(stack.clone().oneshot(())).is_ok(),
        "StackLayer: the first call failed"
    );
    g.bench_function("resilient StackLayer (4 specs), clone + oneshot", |bench| {
        bench.to_async(&rt).iter(|| {
            let stack = stack.clone();
            async move { black_box(stack.oneshot(()).await.is_ok()) }
        });
    });
    peer_stacks::bench_seatbelt(&mut g, &rt, "seatbelt stack + Semaphore", true);
    peer_stacks::bench_seatbelt(&mut g, &rt, "seatbelt stack (no limit)", false);
    g.finish();
}

/// A blocking fn under `#[retryable] #[circuit_breakable]
/// #[concurrency_limit]` beside the hand-written reference's blocking loop
/// (the same atomics, `thread::sleep` for the delay) and the bare fn, all
/// called on the bench thread outside any runtime: with the registry as the
/// thread's default (`set_default`, how a test or a thread of its own
/// runs) and with the installed registry (how an application runs); and
/// the same layers on an `async fn` on a current-thread runtime.
fn blocking(c: &mut Criterion) {
    install();
    let rt = current_thread();
    let hand = hand::Hand::new(ATTEMPTS, RETRY_DELAY, 5, OPEN_WAIT, LIMIT, TIMEOUT);
    let default = registry("ring_buffer");
    let checks = [
        (
            "3 attributes, installed",
            three_attributes_blocking().is_ok(),
        ),
        ("3 attributes, thread default", {
            let _default = default.set_default();
            three_attributes_blocking().is_ok()
        }),
        ("hand-written", hand.call_blocking().is_ok()),
        (
            "3 attributes, async",
            rt.block_on(three_attributes()).is_ok(),
        ),
    ];
    for (name, ok) in checks {
        assert!(ok, "{name}: the first call failed");
    }
    let mut g = c.benchmark_group("blocking");
    g.bench_function("fn alone (baseline)", |bench| {
        bench.iter(|| black_box(op_blocking().is_ok()));
    });
    g.bench_function("resilient 3 attributes, thread default registry", |bench| {
        let _default = default.set_default();
        bench.iter(|| black_box(three_attributes_blocking().is_ok()));
    });
    g.bench_function("resilient 3 attributes, installed registry", |bench| {
        bench.iter(|| black_box(three_attributes_blocking().is_ok()));
    });
    g.bench_function("hand-written blocking reference", |bench| {
        bench.iter(|| black_box(hand.call_blocking().is_ok()));
    });
    g.bench_function(
        "resilient 3 attributes on an async fn, installed registry",
        |bench| {
            bench
                .to_async(&rt)
                .iter(|| async { black_box(three_attributes().await.is_ok()) });
        },
    );
    g.finish();
}

/// `iters` calls of `call`, spread over 64 tasks on a runtime with `workers`
/// worker threads; the wall time from the first spawn to the last task's end.
fn spread_over_tasks<F, Fut>(rt: &tokio::runtime::Runtime, iters: u64, call: F) -> Duration
where
    F: Fn() -> Fut + Copy + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    const TASKS: u64 = 64;
    rt.block_on(async {
        let start = Instant::now();
        let tasks: Vec<_> = (0..TASKS)
            .map(|i| {
                let n = iters / TASKS + u64::from(i < iters % TASKS);
                tokio::spawn(async move {
                    for _ in 0..n {
                        call().await;
                    }
                })
            })
            .collect();
        for task in tasks {
            if let Err(e) = task.await {
                panic!("{e}");
            }
        }
        start.elapsed()
    })
}

/// One shared breaker called from 64 tasks on 1 and on 2 worker threads:
/// through the macro form (the installed registry), through a handle taken
/// once, and failsafe's breaker, each around the same op. The figure is wall
/// time per call (and calls/s): a breaker that scales shows about half its
/// 1-worker time on 2 workers.
fn breaker_tasks(c: &mut Criterion) {
    install();
    let mut g = c.benchmark_group("breaker success, 64 tasks");
    g.throughput(Throughput::Elements(1));
    let (Ok(ring), Ok(striped)) = (ContendedRing::get(), ContendedStriped::get()) else {
        panic!("configured")
    };
    // Taken once and borrowed by every task: no refcount traffic per call.
    let ring = &*Box::leak(Box::new(ring));
    let striped = &*Box::leak(Box::new(striped));
    let failsafe = &*Box::leak(Box::new(failsafe::Config::new().build()));
    for workers in [1, 2] {
        let rt = multi_thread(workers);
        let checks = [
            ("ring_buffer macro", rt.block_on(contended_ring()).is_ok()),
            (
                "striped_approx macro",
                rt.block_on(contended_striped()).is_ok(),
            ),
            ("ring_buffer handle", rt.block_on(ring.call(op)).is_ok()),
            (
                "striped_approx handle",
                rt.block_on(striped.call(op)).is_ok(),
            ),
        ];
        for (name, ok) in checks {
            assert!(ok, "{name}: the first call failed");
        }
        let on = on_workers(workers);
        g.bench_function(format!("resilient ring_buffer macro, {on}"), |bench| {
            bench.iter_custom(|iters| {
                spread_over_tasks(&rt, iters, || async {
                    black_box(contended_ring().await.is_ok());
                })
            });
        });
        g.bench_function(format!("resilient ring_buffer handle, {on}"), |bench| {
            bench.iter_custom(|iters| {
                spread_over_tasks(&rt, iters, move || async move {
                    black_box(ring.call(op).await.is_ok());
                })
            });
        });
        g.bench_function(format!("resilient striped_approx macro, {on}"), |bench| {
            bench.iter_custom(|iters| {
                spread_over_tasks(&rt, iters, || async {
                    black_box(contended_striped().await.is_ok());
                })
            });
        });
        g.bench_function(format!("resilient striped_approx handle, {on}"), |bench| {
            bench.iter_custom(|iters| {
                spread_over_tasks(&rt, iters, move || async move {
                    black_box(striped.call(op).await.is_ok());
                })
            });
        });
        g.bench_function(format!("failsafe, {on}"), |bench| {
            bench.iter_custom(|iters| {
                spread_over_tasks(&rt, iters, move || async move {
                    let call = failsafe::futures::CircuitBreaker::call(failsafe, op());
                    black_box(call.await.is_ok());
                })
            });
        });
    }
    g.finish();
}

/// `#[concurrency_limit]` alone, fixed beside adaptive (same cap, `reject`),
/// installed registry: on a current-thread runtime, then from 64 tasks on 1
/// and on 2 worker threads (wall time per call, as in the breaker's group).
/// The adaptive limit reads the clock twice per call and adds its sample to
/// one shared word; the fixed one does neither.
fn concurrency_success(c: &mut Criterion) {
    install();
    let rt = current_thread();
    assert!(
        rt.block_on(limit_only()).is_ok(),
        "fixed: the first call failed"
    );
    assert!(
        rt.block_on(adaptive_limit_only()).is_ok(),
        "adaptive: the first call failed"
    );
    let mut g = c.benchmark_group("concurrency limit success");
    g.bench_function("fixed #[concurrency_limit], current thread", |bench| {
        bench
            .to_async(&rt)
            .iter(|| async { black_box(limit_only().await.is_ok()) });
    });
    g.bench_function("adaptive #[concurrency_limit], current thread", |bench| {
        bench
            .to_async(&rt)
            .iter(|| async { black_box(adaptive_limit_only().await.is_ok()) });
    });
    g.throughput(Throughput::Elements(1));
    for workers in [1, 2] {
        let rt = multi_thread(workers);
        let on = on_workers(workers);
        g.bench_function(
            format!("fixed #[concurrency_limit], 64 tasks, {on}"),
            |bench| {
                bench.iter_custom(|iters| {
                    spread_over_tasks(&rt, iters, || async {
                        black_box(limit_only().await.is_ok());
                    })
                });
            },
        );
        g.bench_function(
            format!("adaptive #[concurrency_limit], 64 tasks, {on}"),
            |bench| {
                bench.iter_custom(|iters| {
                    spread_over_tasks(&rt, iters, || async {
                        black_box(adaptive_limit_only().await.is_ok());
                    })
                });
            },
        );
    }
    g.finish();
}

/// What one clock read costs: tokio's `Instant::now` (what the time-based
/// window, the rate limiters and slow-call timing read), std's, and the
/// kernel's coarse monotonic clock, a candidate for a cheaper read.
fn clock_read(c: &mut Criterion) {
    let mut g = c.benchmark_group("clock read");
    g.bench_function("tokio::time::Instant::now", |bench| {
        bench.iter(|| black_box(tokio::time::Instant::now()));
    });
    g.bench_function("std::time::Instant::now", |bench| {
        bench.iter(|| black_box(Instant::now()));
    });
    let quanta = quanta::Clock::new();
    let origin = quanta.raw();
    g.bench_function("quanta raw + delta_as_nanos", |bench| {
        bench.iter(|| black_box(quanta.delta_as_nanos(origin, quanta.raw())));
    });
    #[cfg(target_os = "linux")]
    g.bench_function("clock_gettime(CLOCK_MONOTONIC_COARSE)", |bench| {
        bench.iter(|| {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: `ts` is a valid, writable timespec for the call.
            let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
            black_box((rc, ts.tv_sec, ts.tv_nsec))
        });
    });
    g.finish();
}

criterion_group!(
    benches,
    clock_read,
    breaker_success,
    breaker_contended,
    breaker_transition,
    retry_success,
    stack_success,
    breaker_tasks,
    concurrency_success,
    reload::reload,
    keyed::keyed,
    blocking,
    streams::streams,
    layers::tower_layers,
    middleware::reqwest_middleware,
    rate::rate_limiter,
    redis::redis,
    redis::budget,
    simulate::simulate
);
criterion_main!(benches);
