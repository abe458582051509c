//! A breaker keyed by host or tenant (`key = ..`) beside the same breaker
//! without a key: the cost of finding a key's instance, with the hash of
//! the key alone as its floor; then 64 tasks over 1000 keys on 1 and 2
//! workers, to see the lookup scale to the second worker.

use std::cell::Cell;
use std::hash::BuildHasher;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use criterion::{Criterion, Throughput};
use resilient_core::circuit_breakable;

use super::{
    breaker_only, current_thread, install, multi_thread, on_workers, spread_over_tasks, Breaker,
    Failed,
};

const HOST: &str = "api.example.com";

#[circuit_breakable(Breaker, key = host)]
async fn by_host(host: &str) -> Result<u32, Failed> {
    let _ = host;
    Ok(black_box(1))
}

#[circuit_breakable(Breaker, key = tenant)]
async fn by_tenant(tenant: u64) -> Result<u32, Failed> {
    let _ = tenant;
    Ok(black_box(1))
}

/// One of 1000 keys, drawn by each thread on its own (xorshift, seeded
/// apart per thread): calls on two workers meet on a key as often as random
/// traffic would, and share no counter.
fn next_key() -> u64 {
    static SEEDS: AtomicU64 = AtomicU64::new(0x9e37_79b9_7f4a_7c15);
    thread_local! {
        static STATE: Cell<u64> = Cell::new(SEEDS.fetch_add(0x6a09_e667_f3bc_c909, Ordering::Relaxed) | 1);
    }
    STATE.with(|s| {
        let mut x = s.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.set(x);
        x % 1000
    })
}

pub fn keyed(c: &mut Criterion) {
    install();
    let rt = current_thread();
    let checks = [
        ("unkeyed", rt.block_on(breaker_only()).is_ok()),
        ("by host", rt.block_on(by_host(HOST)).is_ok()),
        ("by tenant", rt.block_on(by_tenant(4_294_967_311)).is_ok()),
    ];
    for (name, ok) in checks {
        assert!(ok, "{name}: the first call failed");
    }
    let mut g = c.benchmark_group("keyed breaker success");
    g.bench_function("resilient #[circuit_breakable], no key", |bench| {
        bench
            .to_async(&rt)
            .iter(|| async { black_box(breaker_only().await.is_ok()) });
    });
    g.bench_function("resilient key = host (&str)", |bench| {
        bench
            .to_async(&rt)
            .iter(|| async { black_box(by_host(black_box(HOST)).await.is_ok()) });
    });
    g.bench_function("resilient key = tenant (u64)", |bench| {
        bench
            .to_async(&rt)
            .iter(|| async { black_box(by_tenant(black_box(4_294_967_311)).await.is_ok()) });
    });
    // The floor a keyed lookup cannot go under: hashing the key's text.
    let hasher = foldhash::fast::RandomState::default();
    g.bench_function("foldhash of the host alone (baseline)", |bench| {
        bench.iter(|| black_box(hasher.hash_one(black_box(HOST))));
    });
    g.finish();

    let mut g = c.benchmark_group("keyed breaker success, 64 tasks over 1000 keys");
    g.throughput(Throughput::Elements(1));
    for workers in [1, 2] {
        let rt = multi_thread(workers);
        for key in 0..1000u64 {
            assert!(rt.block_on(by_tenant(key)).is_ok(), "key {key}");
        }
        let on = on_workers(workers);
        g.bench_function(format!("resilient no key, {on}"), |bench| {
            bench.iter_custom(|iters| {
                spread_over_tasks(&rt, iters, || async {
                    black_box(breaker_only().await.is_ok());
                })
            });
        });
        g.bench_function(format!("resilient key = tenant, {on}"), |bench| {
            bench.iter_custom(|iters| {
                spread_over_tasks(&rt, iters, || async {
                    black_box(by_tenant(next_key()).await.is_ok());
                })
            });
        });
    }
    g.finish();
}
