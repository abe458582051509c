//! Rate limiters whose permits live in a real Redis (`backend = "redis"`):
//! several registries, as several replicas are, share one limit exactly.
//! Needs RESILIENT_REDIS_URL (see `support/redis.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
use support::redis::{self as server, get, script_runs, two_workers, Server};
use support::*;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use resilient_core::settings::Value;
use resilient_core::{Error, RateLimiterSpec, Registry};

#[derive(RateLimiterSpec)]
#[spec("redis_rate.shared")]
struct Shared;

#[derive(RateLimiterSpec)]
#[spec("redis_rate.ordered")]
struct Ordered;

#[derive(RateLimiterSpec)]
#[spec("redis_rate.keyed")]
struct Keyed;

fn limit(kind: &str, n: i128, period: &str) -> Value {
    table([
        ("type", s(kind)),
        ("limit_for_period", int(n)),
        ("limit_refresh_period", s(period)),
        ("backend", s("redis")),
    ])
}

/// A registry of spec `S` with `section`, on the Redis at `url`, keys
/// under `prefix`.
fn on<S: resilient_core::Spec>(section: Value, url: &str, prefix: &str) -> Registry {
    server::replica::<S>(section, server::section(url, prefix))
}

/// 100 per second, fixed windows, three registries, 64 tasks on two
/// workers taking permits as fast as they are refused for 2.5 s: the
/// windows open at 0, 1 and 2 s, so exactly 300 calls are admitted in all
/// (each registry alone would admit 300, 900 in all).
#[test]
fn three_registries_admit_exactly_the_shared_limit() {
    let Some(url) = server::url("three_registries_admit_exactly_the_shared_limit") else {
        return;
    };
    let prefix = server::prefix("shared");
    let replicas: Vec<Registry> = (0..3)
        .map(|_| on::<Shared>(limit("fixed_window", 100, "1s"), &url, &prefix))
        .collect();
    let (each, refused) = hammer::<Shared>(&replicas, 64);
    assert_eq!(
        each.iter().sum::<u64>(),
        300,
        "admitted per registry: {each:?}"
    );
    assert!(
        each.iter().all(|&n| n > 0),
        "every registry took permits: {each:?}"
    );
    assert!(refused > 0);
    let word = get(
        &url,
        &format!("{{{prefix}:redis_rate.shared}}:fixed_window:100:1000000"),
    );
    assert!(
        word.as_deref().is_some_and(|w| w.ends_with(" 100")),
        "the third window holds 100 permits: {word:?}"
    );
}

/// A token bucket of 10 per 3 s (a burst of 10), `max_wait` 4.5 s, 40
/// calls at once from three registries: 10 at once, 15 reserved at 300 ms
/// steps and each waiting until its own step, 15 refused at once with the
/// time until a permit would be free. (Steps of 300 ms rather than 100: on
/// a loaded machine the 40 first decisions, each registry opening its
/// connection, took more than 100 ms to arrive, and a token refilled
/// meanwhile let a 26th call through.)
#[test]
fn reservations_are_served_in_order_across_registries() {
    let Some(url) = server::url("reservations_are_served_in_order_across_registries") else {
        return;
    };
    let prefix = server::prefix("ordered");
    let section = with(limit("token_bucket", 10, "3s"), "max_wait", s("4500ms"));
    let replicas: Vec<Registry> = (0..3)
        .map(|_| on::<Ordered>(section.clone(), &url, &prefix))
        .collect();
    let rt = two_workers();
    let (done, refused) = rt.block_on(async {
        let start = Instant::now();
        let tasks: Vec<_> = (0..40)
            .map(|i| {
                let registry = replicas[i % 3].clone();
                tokio::spawn(async move {
                    let limiter = registry.sync_scope(Ordered::get)?;
                    limiter.acquire().await.map(|()| start.elapsed())
                })
            })
            .collect();
        let (mut done, mut refused) = (Vec::new(), Vec::new());
        for t in tasks {
            match t.await {
                Ok(Ok(at)) => done.push(at),
                Ok(Err(Error::RateLimitExceeded { retry_after, .. })) => refused.push(retry_after),
                other => panic!("{other:?}"),
            }
        }
        done.sort();
        (done, refused)
    });
    assert_eq!((done.len(), refused.len()), (25, 15));
    for (i, at) in done.iter().enumerate().skip(10) {
        let due = Duration::from_millis(300 * (i as u64 - 9));
        assert!(*at >= due, "permit {i} came at {at:?}, before {due:?}");
        assert!(
            *at < due + Duration::from_millis(1000),
            "permit {i} came at {at:?}, long after {due:?}"
        );
    }
    for retry_after in refused {
        assert!(retry_after > Duration::from_millis(4500), "{retry_after:?}");
    }
}

/// A keyed limiter's instances keep separate state in Redis: two tenants
/// each have the whole limit, shared by the registries.
#[test]
fn keyed_instances_have_their_own_shared_limits() {
    let Some(url) = server::url("keyed_instances_have_their_own_shared_limits") else {
        return;
    };
    let prefix = server::prefix("keyed");
    let replicas: Vec<Registry> = (0..2)
        .map(|_| on::<Keyed>(limit("fixed_window", 3, "1h"), &url, &prefix))
        .collect();
    let rt = two_workers();
    let admitted = rt.block_on(async {
        let mut admitted = [0, 0];
        for round in 0..5 {
            for (t, tenant) in ["a", "b"].into_iter().enumerate() {
                let limiter = replicas[round % 2].sync_scope(|| Keyed::for_key(tenant));
                if limiter.expect("configured").acquire().await.is_ok() {
                    admitted[t] += 1;
                }
            }
        }
        admitted
    });
    assert_eq!(admitted, [3, 3]);
    let key = format!("{{{prefix}:redis_rate.keyed:key:a}}:fixed_window:3:3600000000");
    assert!(get(&url, &key).is_some_and(|w| w.ends_with(" 3")), "{key}");
}

/// The role of one replica process in
/// `three_processes_with_skewed_clocks_admit_exactly_the_shared_limit`:
/// started by that test with `RESILIENT_REPLICA_PREFIX` set, it waits for a
/// line on its input, takes permits for 2.5 s from 24 tasks on two workers,
/// and prints how many it was given. Run alone, it has nothing to do.
#[test]
#[ignore = "a replica process, started by three_processes_with_skewed_clocks_admit_exactly_the_shared_limit"]
fn replica_process() {
    let Some((url, prefix)) = server::replica_role() else {
        return;
    };
    let r = on::<Shared>(limit("fixed_window", 100, "1s"), &url, &prefix);
    server::replica_go();
    let (each, _) = hammer::<Shared>(std::slice::from_ref(&r), 24);
    println!("admitted {}", each[0]);
}

/// Three processes, their clocks set 5 s behind, right, and 7 s ahead by
/// libfaketime, share 100 per second: exactly 300 admitted in 2.5 s, as in
/// one process, since every decision is timed by Redis's clock.
#[test]
fn three_processes_with_skewed_clocks_admit_exactly_the_shared_limit() {
    let test = "three_processes_with_skewed_clocks_admit_exactly_the_shared_limit";
    let Some(url) = server::url(test) else {
        return;
    };
    let Some(faketime) = server::faketime(test) else {
        return;
    };
    let prefix = server::prefix("processes");
    let each = server::skewed_processes(
        &faketime,
        "replica_process",
        (&url, &prefix),
        &["-5s", "+0s", "+7s"],
        "admitted",
    );
    assert_eq!(
        each.iter().sum::<u64>(),
        300,
        "admitted per process: {each:?}"
    );
    assert!(each.iter().all(|&n| n > 0), "{each:?}");
}

/// Takes permits as fast as they come from `tasks` tasks on two workers,
/// split over the registries, for 2.5 s: the permits each registry was
/// given, and the refusals in all.
fn hammer<S: RateLimiterSpec>(replicas: &[Registry], tasks: usize) -> (Vec<u64>, u64) {
    let admitted: Vec<Arc<AtomicU64>> = replicas.iter().map(|_| Arc::default()).collect();
    let refused = Arc::new(AtomicU64::new(0));
    two_workers().block_on(async {
        let until = Instant::now() + Duration::from_millis(2500);
        let tasks: Vec<_> = (0..tasks)
            .map(|i| {
                let n = i % replicas.len();
                let (registry, admitted) = (replicas[n].clone(), Arc::clone(&admitted[n]));
                let refused = Arc::clone(&refused);
                tokio::spawn(async move {
                    let limiter = registry.sync_scope(S::get).expect("configured");
                    while Instant::now() < until {
                        match limiter.acquire().await {
                            Ok(()) => admitted.fetch_add(1, Ordering::Relaxed),
                            Err(Error::RateLimitExceeded { .. }) => {
                                tokio::time::sleep(Duration::from_millis(2)).await;
                                refused.fetch_add(1, Ordering::Relaxed)
                            }
                            Err(e) => panic!("{e}"),
                        };
                    }
                })
            })
            .collect();
        for t in tasks {
            assert!(t.await.is_ok());
        }
    });
    (
        admitted.iter().map(|a| a.load(Ordering::Relaxed)).collect(),
        refused.load(Ordering::Relaxed),
    )
}

#[derive(RateLimiterSpec)]
#[spec("redis_rate.leased")]
struct Leased;

/// A lease of 10 permits per round trip, fixed windows of 100 per second,
/// three registries: still exactly 300 in 2.5 s (a lease of a window ends
/// with it), in far fewer round trips than the ~49,000 calls: a refusal is
/// asked again only every 100 ms.
#[test]
fn a_lease_keeps_the_limit_exact_in_fewer_round_trips() {
    let Some(redis) = Server::start("a_lease_keeps_the_limit_exact_in_fewer_round_trips") else {
        return;
    };
    let url = redis.url();
    for lease in [1, 10] {
        let prefix = server::prefix("leased");
        let section = with(limit("fixed_window", 100, "1s"), "lease", int(lease));
        let replicas: Vec<Registry> = (0..3)
            .map(|_| on::<Leased>(section.clone(), &url, &prefix))
            .collect();
        let before = script_runs(&url);
        let (each, refused) = hammer::<Leased>(&replicas, 64);
        let admitted: u64 = each.iter().sum();
        let trips = script_runs(&url) - before;
        println!("lease {lease}: {admitted} admitted, {refused} refused, {trips} round trips");
        assert_eq!(admitted, 300, "lease {lease}");
        assert!(refused > 1000, "lease {lease}: {refused} refused");
        // 300 permits in at most 300 / lease grants and the partial ones;
        // a refusal is asked again every 100 ms by each registry: 75 in
        // 2.5 s, with some to spare.
        assert!(
            trips < 300 / lease as u64 + 120,
            "lease {lease}: {trips} round trips"
        );
    }
}

#[derive(RateLimiterSpec)]
#[spec("redis_rate.bucket")]
struct Bucket;

/// A token bucket of 100 per second (a burst of 100) shared by three
/// registries, with and without a lease: in 2.5 s of asking, the burst and
/// 2.5 s of refill, 350, never more than the bound of 351.
#[test]
fn a_shared_token_bucket_stays_within_its_bound() {
    let Some(url) = server::url("a_shared_token_bucket_stays_within_its_bound") else {
        return;
    };
    for lease in [1, 10] {
        let prefix = server::prefix("bucket");
        let section = with(limit("token_bucket", 100, "1s"), "lease", int(lease));
        let replicas: Vec<Registry> = (0..3)
            .map(|_| on::<Bucket>(section.clone(), &url, &prefix))
            .collect();
        let (each, _) = hammer::<Bucket>(&replicas, 64);
        let admitted: u64 = each.iter().sum();
        println!("token bucket, lease {lease}: {admitted} admitted");
        assert!((300..=351).contains(&admitted), "lease {lease}: {admitted}");
    }
}

#[derive(RateLimiterSpec)]
#[spec("redis_rate.sync")]
struct Sync;

/// A handle's `try_acquire` has no future to wait in: it asks Redis on a
/// connection of its own that needs no runtime, blocking its thread for the
/// round trip, from an async task on a multi-thread runtime, a blocking
/// task, a plain thread and a current-thread runtime: Redis counts each
/// permit.
#[test]
fn try_acquire_asks_redis_where_it_can_block() {
    let Some(url) = server::url("try_acquire_asks_redis_where_it_can_block") else {
        return;
    };
    let prefix = server::prefix("sync");
    let r = on::<Sync>(limit("fixed_window", 1000, "1h"), &url, &prefix);
    let key = format!("{{{prefix}:redis_rate.sync}}:fixed_window:1000:3600000000");
    let rt = two_workers();
    let limiter = r.sync_scope(Sync::get).expect("configured");
    // An async call first: the backend learns its runtime.
    rt.block_on(async { assert!(limiter.acquire().await.is_ok()) });
    let l = limiter.clone();
    rt.block_on(async move {
        let l2 = l.clone();
        assert!(tokio::spawn(async move { l2.try_acquire().is_ok() })
            .await
            .unwrap());
        assert!(tokio::task::spawn_blocking(move || l.try_acquire().is_ok())
            .await
            .unwrap());
    });
    let l = limiter.clone();
    assert!(std::thread::spawn(move || l.try_acquire().is_ok())
        .join()
        .unwrap());
    assert_eq!(
        get(&url, &key).as_deref().map(|w| w.ends_with(" 4")),
        Some(true),
        "{:?}",
        get(&url, &key)
    );
    let one = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    assert!(one.block_on(async { limiter.try_acquire() }).is_ok());
    assert_eq!(
        get(&url, &key).as_deref().map(|w| w.ends_with(" 5")),
        Some(true)
    );
}

#[derive(RateLimiterSpec)]
#[spec("redis_rate.attribute")]
struct Attribute;

#[resilient_core::rate_limited(Attribute)]
async fn attributed(hits: Arc<AtomicU64>) -> Result<(), Error> {
    hits.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// `#[rate_limited]` on an async fn asks Redis as a handle does: 12 calls
/// of a limit of 10 per hour, 10 run the body, 2 are refused, and Redis
/// holds the 10.
#[test]
fn an_annotated_fn_takes_its_permits_in_redis() {
    let Some(url) = server::url("an_annotated_fn_takes_its_permits_in_redis") else {
        return;
    };
    let prefix = server::prefix("attribute");
    let r = on::<Attribute>(limit("fixed_window", 10, "1h"), &url, &prefix);
    let hits = Arc::new(AtomicU64::new(0));
    let refused = two_workers().block_on(async {
        let mut refused = 0;
        for _ in 0..12 {
            match r.scope(attributed(Arc::clone(&hits))).await {
                Ok(()) => {}
                Err(Error::RateLimitExceeded { .. }) => refused += 1,
                Err(e) => panic!("{e}"),
            }
        }
        refused
    });
    assert_eq!((hits.load(Ordering::Relaxed), refused), (10, 2));
    let key = format!("{{{prefix}:redis_rate.attribute}}:fixed_window:10:3600000000");
    assert_eq!(get(&url, &key).map(|w| w.ends_with(" 10")), Some(true));
}
