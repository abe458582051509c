//! A permit from a rate limiter whose permits live in Redis
//! (`backend = "redis"`), beside the same limiter kept in the process: one
//! call at a time (each a round trip, or a lease of 100 per round trip),
//! and 64 tasks on two workers (calls merged into shared round trips).
//! Needs a redis-server: RESILIENT_REDIS_URL=redis://127.0.0.1:6379; the
//! group is skipped, with one line, without it. It prints, for each case,
//! the round trips per call (`INFO commandstats`: the scripts' runs).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::Criterion;
use resilient_core::settings::Value;
use resilient_core::{RateLimiterSpec, Registry};

/// Kept in the process: the floor.
#[derive(RateLimiterSpec)]
#[spec("bench.redis_local")]
pub struct RedisLocal;

/// In Redis, one round trip per permit (but calls merged while they wait).
#[derive(RateLimiterSpec)]
#[spec("bench.redis_each")]
pub struct RedisEach;

/// In Redis, up to 100 permits per round trip.
#[derive(RateLimiterSpec)]
#[spec("bench.redis_lease")]
pub struct RedisLease;

fn table<const N: usize>(pairs: [(&str, Value); N]) -> Value {
    Value::Table(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

/// A fixed window of 1048575 permits per 100 ms (ten million a second):
/// never a refusal here (each case prints its refusals); `extra` adds the
/// backend's keys.
fn section<const N: usize>(extra: [(&str, Value); N]) -> Value {
    let mut t = table([
        ("limit_for_period", Value::Int(1_048_575)),
        ("limit_refresh_period", Value::Str("100ms".into())),
    ]);
    if let Value::Table(t) = &mut t {
        t.extend(extra.into_iter().map(|(k, v)| (k.to_owned(), v)));
    }
    t
}

/// The `resilient` table with the Redis backend at `url`, keys under
/// `prefix`.
fn redis_section(url: &str, prefix: String) -> Value {
    table([(
        "redis",
        table([
            ("url", Value::Str(url.into())),
            ("key_prefix", Value::Str(prefix)),
        ]),
    )])
}

fn registry(url: &str) -> Registry {
    let prefix = format!("bench-{}", std::process::id());
    let root = table([
        (
            "bench",
            table([
                // Kept in the process, a window of 1 ms: a billion a second.
                (
                    "redis_local",
                    section([("limit_refresh_period", Value::Str("1ms".into()))]),
                ),
                (
                    "redis_each",
                    section([("backend", Value::Str("redis".into()))]),
                ),
                (
                    "redis_lease",
                    section([
                        ("backend", Value::Str("redis".into())),
                        ("lease", Value::Int(100)),
                    ]),
                ),
            ]),
        ),
        ("resilient", redis_section(url, prefix)),
    ]);
    match Registry::builder()
        .spec::<RedisLocal>()
        .spec::<RedisEach>()
        .spec::<RedisLease>()
        .build(&root)
    {
        Ok(r) => r,
        Err(problems) => panic!("{problems:?}"),
    }
}

/// The scripts' runs on the server so far.
fn script_runs(url: &str) -> u64 {
    use std::io::{BufRead, BufReader, Read, Write};
    let addr = url.trim_start_matches("redis://");
    let Ok(mut stream) = std::net::TcpStream::connect(addr) else {
        return 0;
    };
    let _ = stream.write_all(b"*2\r\n$4\r\nINFO\r\n$12\r\ncommandstats\r\n");
    let mut reader = BufReader::new(stream);
    let mut header = String::new();
    let _ = reader.read_line(&mut header);
    let len: usize = header.trim_start_matches('$').trim().parse().unwrap_or(0);
    let mut body = vec![0u8; len];
    let _ = reader.read_exact(&mut body);
    String::from_utf8_lossy(&body)
        .lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

fn runtime(workers: usize) -> tokio::runtime::Runtime {
    let built = if workers == 0 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()
    };
    match built {
        Ok(rt) => rt,
        Err(e) => panic!("{e}"),
    }
}

/// Calls refused in the group: none is expected.
static REFUSED: AtomicU64 = AtomicU64::new(0);

/// `iters` permits of `S`, taken by 64 tasks on `rt`: the time they took.
fn spread<S: RateLimiterSpec>(
    rt: &tokio::runtime::Runtime,
    r: &Registry,
    iters: u64,
    calls: &AtomicU64,
) -> Duration {
    let started = Instant::now();
    rt.block_on(async {
        let tasks: Vec<_> = (0..64u64)
            .map(|i| {
                let r = r.clone();
                let n = iters / 64 + u64::from(i < iters % 64);
                tokio::spawn(async move {
                    let Ok(limiter) = r.sync_scope(S::get) else {
                        panic!("configured")
                    };
                    for _ in 0..n {
                        if limiter.acquire().await.is_err() {
                            REFUSED.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for t in tasks {
            let _ = t.await;
        }
    });
    calls.fetch_add(iters, Ordering::Relaxed);
    started.elapsed()
}

pub(crate) fn redis(c: &mut Criterion) {
    let Ok(url) = std::env::var("RESILIENT_REDIS_URL") else {
        println!(
            "skipped the group \"redis permit\": set RESILIENT_REDIS_URL to a redis-server's URL"
        );
        return;
    };
    let r = registry(&url);
    let one = runtime(0);
    let two = runtime(2);
    let (Ok(local), Ok(each), Ok(lease)) = (
        r.sync_scope(RedisLocal::get),
        r.sync_scope(RedisEach::get),
        r.sync_scope(RedisLease::get),
    ) else {
        panic!("configured")
    };
    let mut g = c.benchmark_group("redis permit");
    let mut trips = Vec::new();
    let mut measured =
        |name: &str,
         trips: &mut Vec<(String, f64, u64)>,
         f: &mut dyn FnMut(&mut criterion::Bencher<'_>, &AtomicU64)| {
            let calls = AtomicU64::new(0);
            let before = script_runs(&url);
            g.bench_function(name, |b| f(b, &calls));
            let runs = script_runs(&url) - before;
            let calls = calls.load(Ordering::Relaxed).max(1);
            let refused = REFUSED.swap(0, Ordering::Relaxed);
            trips.push((name.to_owned(), runs as f64 / calls as f64, refused));
        };
    measured("local, acquire, 1 task", &mut trips, &mut |b, calls| {
        b.to_async(&one).iter(|| async {
            calls.fetch_add(1, Ordering::Relaxed);
            if local.acquire().await.is_err() {
                REFUSED.fetch_add(1, Ordering::Relaxed);
            }
        });
    });
    measured("redis, acquire, 1 task", &mut trips, &mut |b, calls| {
        b.to_async(&one).iter(|| async {
            calls.fetch_add(1, Ordering::Relaxed);
            if each.acquire().await.is_err() {
                REFUSED.fetch_add(1, Ordering::Relaxed);
            }
        });
    });
    measured(
        "redis lease 100, acquire, 1 task",
        &mut trips,
        &mut |b, calls| {
            b.to_async(&one).iter(|| async {
                calls.fetch_add(1, Ordering::Relaxed);
                if lease.acquire().await.is_err() {
                    REFUSED.fetch_add(1, Ordering::Relaxed);
                }
            });
        },
    );
    measured(
        "local, acquire, 64 tasks on 2 workers",
        &mut trips,
        &mut |b, calls| {
            b.iter_custom(|iters| spread::<RedisLocal>(&two, &r, iters, calls));
        },
    );
    measured(
        "redis, acquire, 64 tasks on 2 workers",
        &mut trips,
        &mut |b, calls| {
            b.iter_custom(|iters| spread::<RedisEach>(&two, &r, iters, calls));
        },
    );
    measured(
        "redis lease 100, acquire, 64 tasks on 2 workers",
        &mut trips,
        &mut |b, calls| {
            b.iter_custom(|iters| spread::<RedisLease>(&two, &r, iters, calls));
        },
    );
    g.finish();
    for (name, per_call, refused) in trips {
        println!("redis permit/{name}: {per_call:.4} round trips per call, {refused} refused");
    }
}

/// A retry budget kept in the process: the floor.
#[derive(resilient_core::RetrySpec)]
#[spec("bench.budget_local")]
pub struct BudgetLocal;

/// A retry budget whose tokens live in Redis.
#[derive(resilient_core::RetrySpec)]
#[spec("bench.budget_shared")]
pub struct BudgetShared;

#[derive(Debug)]
pub struct Down;

impl std::fmt::Display for Down {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("down")
    }
}

impl std::error::Error for Down {}

impl From<resilient_core::Error> for Down {
    fn from(_: resilient_core::Error) -> Self {
        Down
    }
}

/// A call that fails its first attempt when `fail` says so, and succeeds
/// on its retry: one withdrawal and one deposit per call.
#[resilient_core::retryable(BudgetLocal)]
async fn local_budget(fail: bool, tried: &std::sync::atomic::AtomicBool) -> Result<u64, Down> {
    if fail && !tried.swap(true, Ordering::Relaxed) {
        return Err(Down);
    }
    Ok(1)
}

#[resilient_core::retryable(BudgetShared)]
async fn shared_budget(fail: bool, tried: &std::sync::atomic::AtomicBool) -> Result<u64, Down> {
    if fail && !tried.swap(true, Ordering::Relaxed) {
        return Err(Down);
    }
    Ok(1)
}

fn budget_registry(url: &str) -> Registry {
    let prefix = format!("bench-budget-{}", std::process::id());
    // A retry at once; a bucket that each success refills by the token
    // its retry spent, far from empty.
    let retry = |backend: &str| {
        table([
            ("attempts", Value::Int(1)),
            ("delay", Value::Str("0ms".into())),
            (
                "retry_budget",
                table([
                    ("tokens_max", Value::Int(1_000_000)),
                    ("tokens_initial", Value::Int(1_000_000)),
                    ("ratio", Value::Float(1.0)),
                    ("backend", Value::Str(backend.into())),
                ]),
            ),
        ])
    };
    let root = table([
        (
            "bench",
            table([
                ("budget_local", retry("local")),
                ("budget_shared", retry("redis")),
            ]),
        ),
        ("resilient", redis_section(url, prefix)),
    ]);
    match Registry::builder()
        .spec::<BudgetLocal>()
        .spec::<BudgetShared>()
        .build(&root)
    {
        Ok(r) => r,
        Err(problems) => panic!("{problems:?}"),
    }
}

/// `iters` calls, by 64 tasks on `rt`, each failing once if `fail`: the
/// time they took.
fn spread_calls(
    rt: &tokio::runtime::Runtime,
    r: &Registry,
    shared: bool,
    fail: bool,
    iters: u64,
) -> Duration {
    let started = Instant::now();
    rt.block_on(async {
        let tasks: Vec<_> = (0..64u64)
            .map(|i| {
                let r = r.clone();
                let n = iters / 64 + u64::from(i < iters % 64);
                tokio::spawn(async move {
                    for _ in 0..n {
                        let tried = std::sync::atomic::AtomicBool::new(false);
                        let out = if shared {
                            r.scope(shared_budget(fail, &tried)).await
                        } else {
                            r.scope(local_budget(fail, &tried)).await
                        };
                        if out.is_err() {
                            REFUSED.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for t in tasks {
            let _ = t.await;
        }
    });
    started.elapsed()
}

/// A retry budget in Redis beside one kept in the process: a call that
/// succeeds at once (a deposit), and one that fails, takes a token (a round
/// trip on the calling thread), and succeeds on its retry; one task, and
/// 64 tasks on two workers.
pub(crate) fn budget(c: &mut Criterion) {
    let Ok(url) = std::env::var("RESILIENT_REDIS_URL") else {
        println!(
            "skipped the group \"redis retry budget\": set RESILIENT_REDIS_URL to a redis-server's URL"
        );
        return;
    };
    let r = budget_registry(&url);
    let one = runtime(0);
    let two = runtime(2);
    let mut g = c.benchmark_group("redis retry budget");
    let mut trips = Vec::new();
    for (name, shared, fail) in [
        ("local budget, success", false, false),
        ("redis budget, success", true, false),
        ("local budget, failure and retry", false, true),
        ("redis budget, failure and retry", true, true),
    ] {
        let before = script_runs(&url);
        let calls = AtomicU64::new(0);
        g.bench_function(name, |b| {
            b.to_async(&one).iter(|| async {
                calls.fetch_add(1, Ordering::Relaxed);
                let tried = std::sync::atomic::AtomicBool::new(false);
                let out = if shared {
                    r.scope(shared_budget(fail, &tried)).await
                } else {
                    r.scope(local_budget(fail, &tried)).await
                };
                if out.is_err() {
                    REFUSED.fetch_add(1, Ordering::Relaxed);
                }
            });
        });
        let runs = script_runs(&url) - before;
        let per_call = runs as f64 / calls.load(Ordering::Relaxed).max(1) as f64;
        trips.push((name, per_call, REFUSED.swap(0, Ordering::Relaxed)));
    }
    for (name, shared) in [
        (
            "local budget, failure and retry, 64 tasks on 2 workers",
            false,
        ),
        (
            "redis budget, failure and retry, 64 tasks on 2 workers",
            true,
        ),
    ] {
        let before = script_runs(&url);
        let calls = AtomicU64::new(0);
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                calls.fetch_add(iters, Ordering::Relaxed);
                spread_calls(&two, &r, shared, true, iters)
            });
        });
        let runs = script_runs(&url) - before;
        let per_call = runs as f64 / calls.load(Ordering::Relaxed).max(1) as f64;
        trips.push((name, per_call, REFUSED.swap(0, Ordering::Relaxed)));
    }
    g.finish();
    for (name, per_call, refused) in trips {
        println!("redis retry budget/{name}: {per_call:.4} round trips per call, {refused} ended in an error");
    }
}
