//! One instance per key (`key = ..`): breakers per host, limits per key,
//! their bounds (`keys.max`, `keys.idle_timeout`), reload, telemetry, and
//! two workers over a thousand keys. Every test counts calls reaching each
//! key, instances, places and transitions.

#![allow(clippy::expect_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::*;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use resilient_core::circuit_breaker::{CircuitBreakerSettings, Metrics, State};
use resilient_core::concurrency::Places;
use resilient_core::keyed::{DisplayKey, KeySettings};
use resilient_core::registry::KeysSnapshot;
use resilient_core::settings::Value;
use resilient_core::telemetry::Event;
use resilient_core::{
    circuit_breakable, concurrency_limit, rate_limited, CircuitBreakerSpec, ConcurrencyLimitSpec,
    Error, RateLimiterSpec, Registry, Spec,
};

#[derive(Debug, thiserror::Error)]
enum TestError {
    #[error("host down")]
    Down,
    #[error(transparent)]
    Resilience(#[from] Error),
}

fn is<T>(out: &Result<T, TestError>, f: impl Fn(&Error) -> bool) -> bool {
    matches!(out, Err(TestError::Resilience(e)) if f(e))
}

/// Calls that reached each host.
#[derive(Default)]
struct Hits(Mutex<BTreeMap<String, u32>>);

impl Hits {
    fn hit(&self, host: &str) {
        let mut m = self.0.lock().expect("hits");
        *m.entry(host.to_owned()).or_default() += 1;
    }

    fn of(&self, host: &str) -> u32 {
        self.0.lock().expect("hits").get(host).copied().unwrap_or(0)
    }
}

/// How many keys `spec` has (none: no keys part in its snapshot).
fn key_count<S: Spec>(r: &Registry) -> usize {
    keys_of::<S>(r).map_or(0, |k| k.count)
}

/// Each shown key with its breaker's state.
fn states(k: &KeysSnapshot) -> Vec<(String, State)> {
    k.shown
        .iter()
        .map(|s| {
            let m: &Metrics = s.status().expect("breaker metrics");
            (s.key.to_string(), m.state)
        })
        .collect()
}

// ---------------------------------------------------------------- breakers per host

#[derive(CircuitBreakerSpec)]
#[spec("test.keyed.host")]
struct HostBreaker;

/// Threshold 50 %, at least 4 calls, window 10, open for 30 s; `keys` as
/// given.
fn host_section(keys: Value) -> Value {
    table([
        ("failure_rate_threshold", int(50)),
        ("minimum_required_calls", int(4)),
        ("wait_duration_in_open_state", s("30s")),
        ("permitted_calls_in_half_open_state", int(1)),
        ("count_based", table([("window_size", int(10))])),
        ("keys", keys),
    ])
}

#[circuit_breakable(HostBreaker, key = host)]
async fn fetch(hits: &Hits, host: &str, down: bool) -> Result<u32, TestError> {
    hits.hit(host);
    if down {
        Err(TestError::Down)
    } else {
        Ok(200)
    }
}

/// The same spec without a key: the spec's own breaker.
#[circuit_breakable(HostBreaker)]
async fn fetch_any(hits: &Hits, down: bool) -> Result<u32, TestError> {
    hits.hit("(any)");
    if down {
        Err(TestError::Down)
    } else {
        Ok(200)
    }
}

#[tokio::test]
async fn a_failing_host_opens_its_own_breaker_and_no_other() {
    let r = registry::<HostBreaker>(host_section(table([])));
    let transitions = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&transitions);
    r.subscribe(move |e| {
        if let Event::StateTransition { to, key, .. } = e {
            seen.lock().expect("events").push((key.clone(), *to));
        }
    });
    let hits = Hits::default();
    r.scope(async {
        for _ in 0..20 {
            for host in ["a.example", "b.example", "c.example"] {
                let out = fetch(&hits, host, host == "c.example").await;
                match host {
                    "c.example" => assert!(out.is_err()),
                    _ => assert_eq!(out.expect("healthy host"), 200),
                }
            }
        }
        // The spec's own breaker saw none of it.
        assert_eq!(fetch_any(&hits, false).await.expect("own breaker"), 200);
    })
    .await;
    assert_eq!(
        (
            hits.of("a.example"),
            hits.of("b.example"),
            hits.of("c.example")
        ),
        (20, 20, 4),
        "c reached 4 times, then its breaker rejected 16 calls"
    );
    let k = keys::<HostBreaker>(&r);
    assert_eq!(k.count, 3);
    assert_eq!(
        states(&k),
        [
            ("a.example".to_owned(), State::Closed),
            ("b.example".to_owned(), State::Closed),
            ("c.example".to_owned(), State::Open),
        ]
    );
    assert_eq!(
        *transitions.lock().expect("events"),
        [(Some(Arc::from("c.example")), State::Open)],
        "one transition, named by its key"
    );
    let own = r.snapshot().specs.remove(0);
    let own: &Metrics = own.status().expect("own metrics");
    assert_eq!((own.state, own.window.total), (State::Closed, 1));
}

/// Equal texts are one key whatever their types, and so are equal numbers;
/// a number and its text are two keys.
#[tokio::test]
async fn equal_texts_share_an_instance_and_so_do_equal_numbers() {
    #[circuit_breakable(HostBreaker, key = port)]
    async fn by_port(hits: &Hits, port: u16) -> Result<u32, TestError> {
        hits.hit("port");
        let _ = port;
        Err(TestError::Down)
    }
    #[circuit_breakable(HostBreaker, key = id)]
    async fn by_id(hits: &Hits, id: u64) -> Result<u32, TestError> {
        hits.hit("id");
        let _ = id;
        Err(TestError::Down)
    }
    #[circuit_breakable(HostBreaker, key = name.clone())]
    async fn by_name(hits: &Hits, name: String) -> Result<u32, TestError> {
        hits.hit("name");
        let _ = name;
        Err(TestError::Down)
    }
    #[circuit_breakable(HostBreaker, key = DisplayKey(port))]
    async fn by_display(hits: &Hits, port: u16) -> Result<u32, TestError> {
        hits.hit("display");
        let _ = port;
        Err(TestError::Down)
    }

    let r = registry::<HostBreaker>(host_section(table([])));
    let hits = Hits::default();
    r.scope(async {
        // The number 8080: a u16 and a u64 reach one breaker.
        let _ = by_port(&hits, 8080).await;
        let _ = by_id(&hits, 8080).await;
        let _ = by_port(&hits, 8080).await;
        let _ = by_id(&hits, 8080).await; // the fourth failure opens it
        assert!(is(&by_port(&hits, 8080).await, |e| matches!(
            e,
            Error::CallNotPermitted { .. }
        )));
        // The text "8080": a String and a DisplayKey reach another one,
        // still closed.
        let _ = by_name(&hits, "8080".to_owned()).await;
        let _ = by_display(&hits, 8080).await;
        assert!(matches!(
            by_name(&hits, "8080".to_owned()).await,
            Err(TestError::Down)
        ));
    })
    .await;
    assert_eq!(
        (
            hits.of("port"),
            hits.of("id"),
            hits.of("name"),
            hits.of("display")
        ),
        (2, 2, 2, 1)
    );
    let k = keys::<HostBreaker>(&r);
    assert_eq!(k.count, 2);
    let shown = states(&k);
    assert!(shown.iter().all(|(key, _)| key == "8080"), "{shown:?}");
    assert!(shown.contains(&("8080".to_owned(), State::Open)));
    assert!(shown.contains(&("8080".to_owned(), State::Closed)));
}

#[tokio::test(start_paused = true)]
async fn a_key_idle_past_the_timeout_is_dropped_and_starts_afresh() {
    let r = registry::<HostBreaker>(host_section(table([("idle_timeout", s("10s"))])));
    let hits = Hits::default();
    let failures = |k: &KeysSnapshot, key: &str| {
        k.shown
            .iter()
            .find(|s| &*s.key == key)
            .map(|s| s.status::<Metrics>().expect("metrics").window.failures)
    };
    r.scope(async {
        for _ in 0..3 {
            let _ = fetch(&hits, "a", true).await;
        }
    })
    .await;
    assert_eq!(failures(&keys::<HostBreaker>(&r), "a"), Some(3));
    // Unused for 9 s, then for 10 s: kept.
    tokio::time::sleep(Duration::from_secs(9)).await;
    assert_eq!(failures(&keys::<HostBreaker>(&r), "a"), Some(3));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(failures(&keys::<HostBreaker>(&r), "a"), Some(3));
    // Unused for 10 s and an eighth of 10 s (the sweeps' step): gone.
    tokio::time::sleep(Duration::from_millis(1250)).await;
    assert!(
        key_count::<HostBreaker>(&r) == 0,
        "dropped, and no keys left to show"
    );
    // Seen again: a fresh breaker, which one more failure does not open.
    r.scope(async {
        let out = fetch(&hits, "a", true).await;
        assert!(matches!(out, Err(TestError::Down)));
    })
    .await;
    let k = keys::<HostBreaker>(&r);
    assert_eq!((k.count, failures(&k, "a")), (1, Some(1)));
    assert_eq!(states(&k), [("a".to_owned(), State::Closed)]);
    assert_eq!(hits.of("a"), 4);
}

/// Keys unused for longer than `idle_timeout` are gone from the snapshot
/// and its count once that time has passed, whether a new key arrived
/// meanwhile or not: ten keys idle for 1 s under `idle_timeout = 300ms`
/// are not shown beside the key that came after them, nor in a snapshot
/// that no new key preceded.
#[tokio::test(start_paused = true)]
async fn a_snapshot_after_the_idle_timeout_shows_no_key_idle_longer() {
    let r = registry::<HostBreaker>(host_section(table([("idle_timeout", s("300ms"))])));
    let hits = Hits::default();
    let ten = || async {
        for i in 0..10 {
            let _ = fetch(&hits, &format!("idle-{i}"), false).await;
        }
    };
    r.scope(ten()).await;
    assert_eq!(key_count::<HostBreaker>(&r), 10);
    // Time passes as it does for a server: tokio's paused clock moves on
    // to each timer in turn.
    tokio::time::sleep(Duration::from_secs(1)).await;
    r.scope(async {
        let _ = fetch(&hits, "fresh", false).await;
    })
    .await;
    let k = keys::<HostBreaker>(&r);
    assert_eq!(
        states(&k),
        [("fresh".to_owned(), State::Closed)],
        "{} keys",
        k.count
    );
    assert_eq!(k.count, 1);

    // No new key this time: the snapshot alone.
    r.scope(ten()).await;
    assert_eq!(key_count::<HostBreaker>(&r), 11);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(key_count::<HostBreaker>(&r), 0);
    assert_eq!(keys_of::<HostBreaker>(&r).map(|k| k.shown.len()), None);
    // Every key was reached once per round, each time by its own call.
    assert_eq!(
        (hits.of("idle-0"), hits.of("idle-9"), hits.of("fresh")),
        (2, 2, 1)
    );
}

/// A key is dropped no sooner than `idle_timeout` after its last use, and
/// gone from the snapshot an eighth of `idle_timeout` after that at the
/// latest; a key used all along keeps its breaker (its window holds every
/// call up to the window's size, never a fresh breaker's one).
#[tokio::test(start_paused = true)]
async fn an_idle_key_goes_between_the_timeout_and_an_eighth_more() {
    let r = registry::<HostBreaker>(host_section(table([("idle_timeout", s("800ms"))])));
    let hits = Hits::default();
    let shown = |r: &Registry| -> Vec<(String, u64)> {
        keys_of::<HostBreaker>(r).map_or_else(Vec::new, |k| {
            k.shown
                .iter()
                .map(|s| {
                    let m: &Metrics = s.status().expect("breaker metrics");
                    (s.key.to_string(), m.window.total)
                })
                .collect()
        })
    };
    r.scope(async {
        let _ = fetch(&hits, "quiet", false).await;
    })
    .await;
    let started = tokio::time::Instant::now();
    let mut busy_calls: u64 = 0;
    // Every 50 ms a call with the key "busy", and a look at the snapshot.
    let mut quiet_last_seen = Duration::ZERO;
    let mut quiet_gone_at = None;
    while started.elapsed() < Duration::from_secs(2) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        r.scope(async {
            let _ = fetch(&hits, "busy", false).await;
        })
        .await;
        busy_calls += 1;
        let now = shown(&r);
        assert!(
            now.contains(&("busy".to_owned(), busy_calls.min(10))),
            "{now:?} at {:?}",
            started.elapsed()
        );
        if now.iter().any(|(key, _)| key == "quiet") {
            assert!(quiet_gone_at.is_none(), "quiet came back: {now:?}");
            quiet_last_seen = started.elapsed();
        } else if quiet_gone_at.is_none() {
            quiet_gone_at = Some(started.elapsed());
        }
    }
    let gone = quiet_gone_at.expect("quiet dropped");
    assert!(
        quiet_last_seen >= Duration::from_millis(750),
        "{quiet_last_seen:?}"
    );
    assert!(gone <= Duration::from_millis(900), "{gone:?}");
    assert_eq!(
        (u64::from(hits.of("busy")), hits.of("quiet")),
        (busy_calls, 1)
    );
    assert_eq!(key_count::<HostBreaker>(&r), 1);
}

#[tokio::test(start_paused = true)]
async fn an_open_breaker_is_never_evicted_idle_or_at_the_maximum() {
    let r = registry::<HostBreaker>(host_section(table([
        ("max", int(2)),
        ("idle_timeout", s("1s")),
    ])));
    let hits = Hits::default();
    r.scope(async {
        for _ in 0..4 {
            let _ = fetch(&hits, "dead", true).await;
        }
        let _ = fetch(&hits, "ok", false).await;
    })
    .await;
    // Long idle: the closed key goes, the open one stays.
    for _ in 0..4 {
        tokio::time::advance(Duration::from_secs(1)).await;
        let _ = key_count::<HostBreaker>(&r);
    }
    assert_eq!(
        states(&keys::<HostBreaker>(&r)),
        [("dead".to_owned(), State::Open)]
    );
    // At the maximum (2): a new key evicts the least recently used closed
    // key, never the open one.
    r.scope(async {
        let _ = fetch(&hits, "x", false).await;
        let _ = fetch(&hits, "y", false).await;
    })
    .await;
    let k = keys::<HostBreaker>(&r);
    assert_eq!(
        states(&k),
        [
            ("dead".to_owned(), State::Open),
            ("y".to_owned(), State::Closed)
        ]
    );
    assert_eq!((k.count, k.overflowed), (2, 0));
}

#[tokio::test]
async fn a_hundred_thousand_keys_keep_at_most_max_instances() {
    let r = registry::<HostBreaker>(host_section(table([("max", int(100))])));
    let most = r
        .scope(async {
            let mut most = 0;
            for id in 0..100_000u64 {
                #[circuit_breakable(HostBreaker, key = id)]
                async fn get(id: u64) -> Result<u64, TestError> {
                    Ok(id)
                }
                assert_eq!(get(id).await.expect("closed"), id);
                if id % 10_000 == 9_999 {
                    most = most.max(keys::<HostBreaker>(&r).count);
                }
            }
            most
        })
        .await;
    let k = keys::<HostBreaker>(&r);
    assert!(most <= 100 && k.count <= 100, "{most} / {} keys", k.count);
    assert!(
        k.count > 80,
        "evictions free an eighth at a time: {}",
        k.count
    );
    assert_eq!(k.overflowed, 0);
    // The latest keys are the ones kept.
    assert!(k
        .shown
        .iter()
        .all(|s| s.key.parse::<u64>().expect("id") >= 99_800));
}

// ---------------------------------------------------------------- limits per key

#[derive(ConcurrencyLimitSpec)]
#[spec("test.keyed.tenant")]
struct TenantLimit;

/// Holds a place until `release` is notified.
#[concurrency_limit(TenantLimit, key = tenant)]
async fn hold(tenant: u32, release: Arc<tokio::sync::Notify>) -> Result<(), TestError> {
    let _ = tenant;
    release.notified().await;
    Ok(())
}

fn places(k: &KeysSnapshot) -> Vec<(String, u32, u32)> {
    k.shown
        .iter()
        .map(|s| {
            let p: &Places = s.status().expect("places");
            (s.key.to_string(), p.permits_in_use, p.permits_limit)
        })
        .collect()
}

#[tokio::test]
async fn at_the_maximum_with_every_key_busy_a_new_key_runs_under_the_spec_s_own_limit() {
    let r = registry::<TenantLimit>(table([
        ("limit", int(1)),
        ("keys", table([("max", int(2))])),
    ]));
    let release = Arc::new(tokio::sync::Notify::new());
    let _guard = r.set_default();
    let held: Vec<_> = [1, 2, 3]
        .into_iter()
        .map(|t| tokio::spawn(hold(t, Arc::clone(&release))))
        .collect();
    tokio::task::yield_now().await;
    for _ in 0..3 {
        tokio::task::yield_now().await;
    }
    let k = keys::<TenantLimit>(&r);
    assert_eq!(places(&k), [("1".into(), 1, 1), ("2".into(), 1, 1)]);
    assert_eq!((k.count, k.overflowed), (2, 1));
    let own = r.snapshot().specs.remove(0);
    assert_eq!(
        own.status::<Places>().expect("own places").permits_in_use,
        1,
        "tenant 3 holds the spec's own place"
    );
    // Tenant 4 finds the spec's own limit full too: rejected, not admitted
    // past any limit.
    let out = hold(4, Arc::clone(&release)).await;
    assert!(is(&out, |e| matches!(
        e,
        Error::ConcurrencyLimitReached { limit: 1, .. }
    )));
    release.notify_waiters();
    for h in held {
        assert!(h.await.expect("task").is_ok());
    }
    let k = keys::<TenantLimit>(&r);
    assert_eq!(places(&k), [("1".into(), 0, 1), ("2".into(), 0, 1)]);
    assert_eq!(k.overflowed, 2);
}

#[tokio::test]
async fn a_reload_applies_to_every_key_and_to_keys_to_come() {
    let section = |limit| table([("limit", int(limit))]);
    let r = registry::<TenantLimit>(section(1));
    let release = Arc::new(tokio::sync::Notify::new());
    let _guard = r.set_default();
    let first = tokio::spawn(hold(1, Arc::clone(&release)));
    tokio::task::yield_now().await;
    assert!(is(&hold(1, Arc::clone(&release)).await, |e| matches!(
        e,
        Error::ConcurrencyLimitReached { .. }
    )));
    let changed = r
        .reload(&root(vec![(TenantLimit::PATH, section(2))]))
        .expect("valid");
    assert_eq!(changed.specs[0].keys, ["limit: 1 -> 2"]);
    // Tenant 1 (existing) now admits a second call; tenant 2 (new) two.
    let more: Vec<_> = [1, 2, 2]
        .into_iter()
        .map(|t| tokio::spawn(hold(t, Arc::clone(&release))))
        .collect();
    for _ in 0..3 {
        tokio::task::yield_now().await;
    }
    assert_eq!(
        places(&keys::<TenantLimit>(&r)),
        [("1".into(), 2, 2), ("2".into(), 2, 2)]
    );
    release.notify_waiters();
    assert!(first.await.expect("task").is_ok());
    for h in more {
        assert!(h.await.expect("task").is_ok());
    }
}

/// The snapshot's settings of a spec that takes `key = ..` include its
/// `keys` table, every key of it at its value in force (the defaults for
/// those left out), whether or not a key was seen yet, and as a reload
/// leaves it; a spec of another kind has none.
#[test]
fn the_snapshot_gives_a_keyed_spec_s_keys_table_as_running() {
    let settings = |r: &Registry| {
        let snapshot = r.snapshot();
        snapshot.specs[0]
            .settings::<KeySettings>()
            .map(|k| (k.max, k.idle_timeout, k.label_metrics, k.max_open_percent))
    };
    let section = |keys: Value| host_section(keys);
    let r = registry::<HostBreaker>(section(table([
        ("max", int(5)),
        ("max_open_percent", int(40)),
    ])));
    assert_eq!(
        settings(&r),
        Some((5, Duration::from_secs(600), false, 40)),
        "no key yet"
    );
    assert!(
        r.snapshot().specs[0]
            .settings::<CircuitBreakerSettings>()
            .is_some(),
        "the breaker's own settings as before"
    );
    r.reload(&root(vec![(
        HostBreaker::PATH,
        section(table([
            ("idle_timeout", s("1m")),
            ("label_metrics", boolean(true)),
        ])),
    )]))
    .expect("valid");
    assert_eq!(
        settings(&r),
        Some((1000, Duration::from_secs(60), true, 100))
    );
    #[derive(resilient_core::RetrySpec)]
    #[spec("test.keyed.retry")]
    struct NoKeys;
    let r = registry::<NoKeys>(table([("delay", s("1ms")), ("attempts", int(1))]));
    assert_eq!(settings(&r), None, "a retry spec takes no key");
}

/// Two workers, 64 tasks, each call in its own task over 1000 keys with a
/// limit of one place per key: no key ever runs two calls at once, every
/// call is admitted or rejected, every place comes back, and every key has
/// its instance (no overflow).
#[test]
fn two_workers_over_a_thousand_keys_keep_one_place_per_key() {
    #[derive(ConcurrencyLimitSpec)]
    #[spec("test.keyed.shard")]
    struct ShardLimit;

    static RUNNING: [AtomicU32; 1000] = [const { AtomicU32::new(0) }; 1000];
    static PEAK: AtomicU32 = AtomicU32::new(0);

    #[concurrency_limit(ShardLimit, key = shard)]
    async fn write(shard: usize) -> Result<(), TestError> {
        let now = RUNNING[shard].fetch_add(1, Ordering::SeqCst) + 1;
        PEAK.fetch_max(now, Ordering::SeqCst);
        tokio::task::yield_now().await;
        RUNNING[shard].fetch_sub(1, Ordering::SeqCst);
        Ok(())
    }

    let r = registry::<ShardLimit>(table([("limit", int(1))]));
    // Neighbouring tasks share keys: every key is hit by several at once.
    let (a, j) = on_two_workers(&r, 64, 200, |t, i| (t * 31 + i * 7) % 1000, write);
    assert_eq!(a + j, 64 * 200);
    assert!(a > 0);
    assert_eq!(PEAK.load(Ordering::SeqCst), 1, "one place per key");
    let k = keys::<ShardLimit>(&r);
    assert_eq!((k.count, k.overflowed), (1000, 0));
    let busy: u32 = r.sync_scope(|| {
        (0..1000usize)
            .map(|shard| ShardLimit::for_key(&shard).expect("configured").in_use())
            .sum()
    });
    assert_eq!(busy, 0, "every place of the 1000 keys came back");
}

/// `tasks` tasks on two workers, each making `calls` calls of `write`, each
/// call in a task of its own (as a server makes them) under `r`, on the key
/// `key(task, call)`: how many calls were admitted, and how many rejected.
fn on_two_workers<F, Fut>(
    r: &Registry,
    tasks: usize,
    calls: usize,
    key: fn(usize, usize) -> usize,
    write: F,
) -> (u64, u64)
where
    F: Fn(usize) -> Fut + Copy + Send + 'static,
    Fut: std::future::Future<Output = Result<(), TestError>> + Send + 'static,
{
    let (admitted, rejected) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    two_workers().block_on(async {
        let tasks: Vec<_> = (0..tasks)
            .map(|t| {
                let (r, admitted, rejected) =
                    (r.clone(), Arc::clone(&admitted), Arc::clone(&rejected));
                tokio::spawn(async move {
                    for i in 0..calls {
                        let (r, k) = (r.clone(), key(t, i));
                        let call = tokio::spawn(async move { r.scope(write(k)).await });
                        match call.await.expect("call") {
                            Ok(()) => admitted.fetch_add(1, Ordering::Relaxed),
                            Err(_) => rejected.fetch_add(1, Ordering::Relaxed),
                        };
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("task");
        }
    });
    (
        admitted.load(Ordering::Relaxed),
        rejected.load(Ordering::Relaxed),
    )
}

// ---------------------------------------------------------------- rate limits per key

#[derive(RateLimiterSpec)]
#[spec("test.keyed.quota")]
struct Quota;

#[rate_limited(Quota, key = tenant)]
async fn quota(tenant: &str) -> Result<(), TestError> {
    let _ = tenant;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn one_tenant_spending_its_quota_leaves_the_others_theirs() {
    let r = registry::<Quota>(table([
        ("limit_for_period", int(2)),
        ("limit_refresh_period", s("1s")),
        ("keys", table([("idle_timeout", s("2s")), ("max", int(2))])),
    ]));
    let rejections = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&rejections);
    r.subscribe(move |e| {
        if let Event::Rejected { key, .. } = e {
            seen.lock().expect("events").push(key.clone());
        }
    });
    r.scope(async {
        let noisy: Vec<bool> = {
            let mut v = Vec::new();
            for _ in 0..5 {
                v.push(quota("noisy").await.is_ok());
            }
            v
        };
        assert_eq!(noisy, [true, true, false, false, false]);
        assert!(quota("quiet").await.is_ok());
        assert!(quota("quiet").await.is_ok());
        assert!(quota("quiet").await.is_err());
        // At `max` = 2 with both keys' permits spent in this window, a
        // third tenant finds no key it may drop: it runs under the spec's
        // own limiter.
        assert!(quota("third").await.is_ok());
        assert_eq!(keys::<Quota>(&r).overflowed, 1);
        // A window later every key is as a fresh limiter would be: the
        // least recently used one gives its place.
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(quota("third").await.is_ok());
    })
    .await;
    // Both were last used in the same epoch: either may have gone.
    let k = keys::<Quota>(&r);
    let shown: Vec<&str> = k.shown.iter().map(|s| &*s.key).collect();
    assert_eq!(
        (shown.len(), shown.last(), k.overflowed),
        (2, Some(&"third"), 1)
    );
    let rejected = rejections.lock().expect("events");
    assert_eq!(rejected.len(), 4);
    assert_eq!(
        rejected
            .iter()
            .filter(|k| k.as_deref() == Some("noisy"))
            .count(),
        3
    );
}

// ---------------------------------------------------------------- settings

#[test]
fn the_keys_table_is_validated_with_every_problem() {
    let problems = Registry::builder()
        .spec::<HostBreaker>()
        .build(&root(vec![(
            HostBreaker::PATH,
            host_section(table([
                ("max", int(0)),
                ("idle_timeout", s("0s")),
                ("label_metric", boolean(true)),
            ])),
        )]))
        .expect_err("three problems");
    let shown: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert_eq!(
        shown,
        [
            "HostBreaker at `test.keyed.host`: key `keys.idle_timeout` must be more than 0s (found \"0s\")",
            "HostBreaker at `test.keyed.host`: key `keys.label_metric` is not a known setting; did you mean `label_metrics`? (found true)",
            "HostBreaker at `test.keyed.host`: key `keys.max` must be a whole number in 1..=1000000 (found 0)",
        ]
    );
}

// ---------------------------------------------------------------- handles

#[tokio::test]
async fn a_handle_for_a_key_reaches_the_instance_the_attribute_uses() {
    let r = registry::<HostBreaker>(host_section(table([("max", int(1))])));
    let hits = Hits::default();
    r.scope(async {
        // Made by the handle, reached by the attribute.
        let dead = HostBreaker::for_key("dead").expect("configured");
        dead.force_open();
        let out = fetch(&hits, "dead", false).await;
        assert!(is(&out, |e| matches!(
            e,
            Error::CallNotPermitted {
                state: State::ForcedOpen,
                ..
            }
        )));
        // Held by the handle (and forced open): never evicted, so at
        // `max` = 1 another key runs under the spec's own breaker.
        assert_eq!(
            fetch(&hits, "other", false).await.expect("own breaker"),
            200
        );
        assert_eq!(keys::<HostBreaker>(&r).overflowed, 1);
        dead.reset();
        drop(dead);
        // Released and closed: the next new key may take its place.
        assert_eq!(fetch(&hits, "other", false).await.expect("own"), 200);
    })
    .await;
    let k = keys::<HostBreaker>(&r);
    assert_eq!(states(&k), [("other".to_owned(), State::Closed)]);
    assert_eq!((hits.of("dead"), hits.of("other")), (0, 2));
}

/// At `max` = 16 with every key busy, one look at the map serves two new
/// keys (an eighth of `max`): the first new key after a key frees still
/// goes to the spec's own limit, the next one takes the freed key's place.
#[tokio::test]
async fn a_fruitless_look_at_the_maximum_serves_an_eighth_of_max_new_keys() {
    let r = registry::<TenantLimit>(table([
        ("limit", int(1)),
        ("keys", table([("max", int(16))])),
    ]));
    let _guard = r.set_default();
    let releases: Vec<_> = (0..16)
        .map(|_| Arc::new(tokio::sync::Notify::new()))
        .collect();
    let held: Vec<_> = (0..16u32)
        .map(|t| tokio::spawn(hold(t, Arc::clone(&releases[t as usize]))))
        .collect();
    for _ in 0..4 {
        tokio::task::yield_now().await;
    }
    let spare = Arc::new(tokio::sync::Notify::new());
    spare.notify_one(); // each call below returns at once
    assert!(hold(100, Arc::clone(&spare)).await.is_ok());
    assert_eq!(keys::<TenantLimit>(&r).overflowed, 1, "no key could go");
    releases[0].notify_one();
    let mut held = held.into_iter();
    if let Some(first) = held.next() {
        assert!(first.await.expect("task").is_ok());
    }
    spare.notify_one();
    assert!(hold(101, Arc::clone(&spare)).await.is_ok());
    assert_eq!(
        keys::<TenantLimit>(&r).overflowed,
        2,
        "sent on without a look"
    );
    spare.notify_one();
    assert!(hold(102, Arc::clone(&spare)).await.is_ok());
    let k = keys::<TenantLimit>(&r);
    assert_eq!((k.count, k.overflowed), (16, 2), "tenant 0 gave its place");
    assert!(k.shown.iter().any(|s| &*s.key == "102"));
    assert!(!k.shown.iter().any(|s| &*s.key == "0"));
    for release in releases.iter().skip(1) {
        release.notify_one();
    }
    for h in held {
        assert!(h.await.expect("task").is_ok());
    }
}

/// Two workers, 8 tasks making calls each in its own task over 64 keys
/// with room for 16: keys are evicted and made again all the time, while
/// calls claim them on the other worker. A key never has two instances at
/// once (with one place per key, no key ever runs two calls), every call
/// is admitted or rejected, and no call is sent to the spec's own limit
/// (at most 8 keys are ever busy).
#[test]
fn two_workers_churning_64_keys_through_16_never_make_two_instances_of_a_key() {
    #[derive(ConcurrencyLimitSpec)]
    #[spec("test.keyed.churn")]
    struct ChurnLimit;

    static RUNNING: [AtomicU32; 64] = [const { AtomicU32::new(0) }; 64];
    static PEAK: AtomicU32 = AtomicU32::new(0);

    #[concurrency_limit(ChurnLimit, key = shard)]
    async fn write(shard: usize) -> Result<(), TestError> {
        let now = RUNNING[shard].fetch_add(1, Ordering::SeqCst) + 1;
        PEAK.fetch_max(now, Ordering::SeqCst);
        tokio::task::yield_now().await;
        RUNNING[shard].fetch_sub(1, Ordering::SeqCst);
        Ok(())
    }

    let r = registry::<ChurnLimit>(table([
        ("limit", int(1)),
        ("keys", table([("max", int(16))])),
    ]));
    let (a, j) = on_two_workers(&r, 8, 2000, |t, i| (t * 13 + i * 5) % 64, write);
    assert_eq!(a + j, 8 * 2000);
    assert_eq!(
        PEAK.load(Ordering::SeqCst),
        1,
        "one place per key, one instance"
    );
    let k = keys::<ChurnLimit>(&r);
    assert!(k.count <= 16, "{} keys", k.count);
    assert_eq!(k.overflowed, 0);
    let busy: u32 = k
        .shown
        .iter()
        .map(|s| s.status::<Places>().expect("places").permits_in_use)
        .sum();
    assert_eq!(busy, 0, "every place came back");
}

// ---------------------------------------------------------------- the open cap

#[derive(CircuitBreakerSpec)]
#[spec("test.keyed.capped")]
struct CappedBreaker;

#[circuit_breakable(CappedBreaker, key = host)]
async fn capped(hits: &Hits, host: &str, down: bool) -> Result<u32, TestError> {
    hits.hit(host);
    if down {
        Err(TestError::Down)
    } else {
        Ok(200)
    }
}

/// Ten hosts, five of them failing, at most 20 % open: two breakers open,
/// the other three failing hosts keep being reached; when one open breaker
/// closes again, the next failing host may open.
#[tokio::test(start_paused = true)]
async fn at_most_max_open_percent_of_the_keys_open_at_once() {
    let r = registry::<CappedBreaker>(with(
        host_section(table([("max_open_percent", int(20))])),
        "wait_duration_in_open_state",
        s("1s"),
    ));
    let hits = Hits::default();
    let hosts: Vec<String> = (0..10).map(|i| format!("h{i}")).collect();
    let failing = |h: &str| ["h0", "h1", "h2", "h3", "h4"].contains(&h);
    r.scope(async {
        for h in &hosts {
            let _ = capped(&hits, h, false).await; // all ten keys exist
        }
        for _ in 0..8 {
            for h in &hosts {
                let _ = capped(&hits, h, failing(h)).await;
            }
        }
    })
    .await;
    let k = keys::<CappedBreaker>(&r);
    let open: Vec<String> = states(&k)
        .into_iter()
        .filter(|(_, s)| *s == State::Open)
        .map(|(h, _)| h)
        .collect();
    assert_eq!(open, ["h0", "h1"], "two of ten keys: 20 %");
    assert_eq!(k.ejected, 2);
    assert!(k.held_closed > 0);
    // The held hosts were reached by every call (1 + 8); the open ones
    // until their third failure made 4 calls, 75 % failed.
    assert_eq!((hits.of("h0"), hits.of("h2"), hits.of("h4")), (4, 9, 9));
    // h0 recovers: its probe succeeds and its breaker closes, which frees
    // an ejection for h2, the next to fail.
    tokio::time::advance(Duration::from_secs(1)).await;
    r.scope(async {
        assert_eq!(capped(&hits, "h0", false).await.expect("probe"), 200);
        let _ = capped(&hits, "h2", true).await;
    })
    .await;
    let k = keys::<CappedBreaker>(&r);
    let open: Vec<String> = states(&k)
        .into_iter()
        .filter(|(_, s)| *s != State::Closed)
        .map(|(h, _)| h)
        .collect();
    assert_eq!(open, ["h1", "h2"]);
    assert_eq!(k.ejected, 2);
}

#[tokio::test]
async fn at_least_one_key_may_open_whatever_the_percent() {
    let r = registry::<CappedBreaker>(host_section(table([("max_open_percent", int(1))])));
    let hits = Hits::default();
    r.scope(async {
        for _ in 0..5 {
            let _ = capped(&hits, "a", true).await;
            let _ = capped(&hits, "b", true).await;
        }
    })
    .await;
    let k = keys::<CappedBreaker>(&r);
    assert_eq!(
        states(&k),
        [
            ("a".to_owned(), State::Open),
            ("b".to_owned(), State::Closed)
        ]
    );
    assert_eq!((hits.of("a"), hits.of("b")), (4, 5));
}

#[test]
fn max_open_percent_is_a_breaker_s_and_envoy_s_name_is_answered() {
    let limit = Registry::builder()
        .spec::<TenantLimit>()
        .build(&root(vec![(
            TenantLimit::PATH,
            table([
                ("limit", int(1)),
                ("keys", table([("max_open_percent", int(20))])),
            ]),
        )]))
        .expect_err("a limit has no open keys");
    assert_eq!(limit.len(), 1);
    assert!(
        limit[0]
            .to_string()
            .contains("key `keys.max_open_percent` is not a known setting"),
        "{}",
        limit[0]
    );
    let breaker = Registry::builder()
        .spec::<HostBreaker>()
        .build(&root(vec![(
            HostBreaker::PATH,
            host_section(table([("max_ejection_percent", int(10))])),
        )]))
        .expect_err("Envoy's name");
    assert_eq!(breaker.len(), 1);
    let shown = breaker[0].to_string();
    assert!(
        shown.contains("keys.max_ejection_percent") && shown.contains("max_open_percent"),
        "{shown}"
    );
}

/// Two dead hosts open their breakers (two of four keys, 50 %), wait past
/// their open wait and are evicted by two new hosts. With no key left open,
/// a live host that starts failing opens its breaker: the evicted keys'
/// ejections came back when they went, not whenever the map frees their
/// memory.
#[tokio::test(start_paused = true)]
async fn evicted_open_keys_give_their_ejections_back_when_they_go() {
    let r = registry::<CappedBreaker>(host_section(table([
        ("max", int(4)),
        ("idle_timeout", s("1h")),
        ("max_open_percent", int(50)),
    ])));
    let hits = Hits::default();
    r.scope(async {
        for h in ["dead-1", "dead-2", "live-1", "live-2"] {
            let _ = capped(&hits, h, false).await;
        }
        for h in ["dead-1", "dead-2"] {
            for _ in 0..4 {
                let _ = capped(&hits, h, true).await;
            }
        }
    })
    .await;
    assert_eq!(keys::<CappedBreaker>(&r).ejected, 2);
    tokio::time::advance(Duration::from_secs(31 * 60)).await;
    let _ = keys::<CappedBreaker>(&r); // a new epoch: the live hosts rank above the dead ones
    r.scope(async {
        for h in ["live-1", "live-2", "new-1", "new-2"] {
            let _ = capped(&hits, h, false).await;
        }
    })
    .await;
    let k = keys::<CappedBreaker>(&r);
    let mut shown: Vec<String> = states(&k).into_iter().map(|(h, _)| h).collect();
    shown.sort();
    assert_eq!(
        shown,
        ["live-1", "live-2", "new-1", "new-2"],
        "the dead hosts went"
    );
    assert_eq!(k.ejected, 0, "no key is open");
    r.scope(async {
        for _ in 0..4 {
            let _ = capped(&hits, "live-1", true).await;
        }
    })
    .await;
    assert!(
        states(&keys::<CappedBreaker>(&r)).contains(&("live-1".to_owned(), State::Open)),
        "a failing host opens with no key open"
    );
}

/// A key's breaker that opened on its own holds one of the openings the
/// cap allows; forced open, disabled or reset by hand, it gives it back
/// (and a breaker forced open by hand takes none).
#[tokio::test]
async fn a_breaker_taken_over_by_hand_gives_its_opening_back() {
    let r = registry::<CappedBreaker>(host_section(table([("max_open_percent", int(50))])));
    let hits = Hits::default();
    let open_on_failures = |host: &'static str| {
        let hits = &hits;
        async move {
            for _ in 0..4 {
                let _ = capped(hits, host, true).await;
            }
        }
    };
    let ejected = |r: &Registry| keys::<CappedBreaker>(r).ejected;
    let _guard = r.set_default();
    let _ = capped(&hits, "ok", false).await; // 2 keys with the next: 1 may open
    for (n, by_hand) in ["force_open", "disable", "reset"].into_iter().enumerate() {
        let host = ["a", "b", "c"][n];
        open_on_failures(host).await;
        assert_eq!(ejected(&r), 1, "{host} opened on its own");
        let handle = CappedBreaker::for_key(host).expect("configured");
        match by_hand {
            "force_open" => handle.force_open(),
            "disable" => handle.disable(),
            _ => handle.reset(),
        }
        assert_eq!(ejected(&r), 0, "{by_hand} gave it back");
    }
    CappedBreaker::for_key("ok")
        .expect("configured")
        .force_open();
    assert_eq!(ejected(&r), 0, "forced open by hand: not counted");
}
