//! The success path of resilient's circuit breaker and retry beside the peer
//! crates', measured in one run so that the ratios compare like with like.
//!
//! Run with `cargo bench --manifest-path examples/bench/Cargo.toml`.

use std::hint::black_box;
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use failsafe::CircuitBreaker as _;
use resilient_core::settings::Value;
use resilient_core::{CircuitBreakerSpec, Registry, RetrySpec};

#[derive(CircuitBreakerSpec)]
#[spec("bench.breaker")]
struct Breaker;

#[derive(RetrySpec)]
#[spec("bench.retry")]
struct Retry;

#[derive(Debug, thiserror::Error)]
#[error(transparent)]
struct Failed(#[from] resilient_core::Error);

fn table<const N: usize>(pairs: [(&str, Value); N]) -> Value {
    Value::Table(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

fn registry(kind: &str) -> Registry {
    let window = if kind == "time_based" {
        (
            "time_based",
            table([("window_duration", Value::Str("10s".into()))]),
        )
    } else {
        ("count_based", table([("window_size", Value::Int(100))]))
    };
    let breaker = table([
        ("type", Value::Str(kind.into())),
        ("failure_rate_threshold", Value::Int(50)),
        ("minimum_required_calls", Value::Int(10)),
        ("wait_duration_in_open_state", Value::Str("1s".into())),
        ("permitted_calls_in_half_open_state", Value::Int(1)),
        window,
    ]);
    let retry = table([
        ("delay", Value::Str("1ms".into())),
        ("attempts", Value::Int(3)),
    ]);
    let root = table([("bench", table([("breaker", breaker), ("retry", retry)]))]);
    match Registry::builder()
        .spec::<Breaker>()
        .spec::<Retry>()
        .build(&root)
    {
        Ok(r) => r,
        Err(problems) => panic!("{problems:?}"),
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

criterion_group!(
    benches,
    breaker_success,
    breaker_contended,
    breaker_transition,
    retry_success
);
criterion_main!(benches);
