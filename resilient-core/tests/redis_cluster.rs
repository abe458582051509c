//! Rate limiters on a real Redis Cluster (`cluster = true`, feature
//! `redis-cluster`): three primaries and three replicas started by each
//! test on loopback ports (see `support/cluster.rs`). Each tenant's count
//! lives on the primary of its slot; a slot moved to another primary
//! (`ASK`, then `MOVED`) keeps its count, and the script is loaded on the
//! node it moved to; a primary killed is taken over by its replica, the
//! calls meanwhile answered by `on_backend_failure` within `timeout`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/cluster.rs"]
mod cluster;
mod support;

use cluster::{ask, calls, Cluster, Reply};
use support::redis::{self as server, two_workers};
use support::*;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use resilient_core::settings::Value;
use resilient_core::{Error, RateLimiterSpec, Registry};

#[derive(RateLimiterSpec)]
#[spec("redis_cluster.quota")]
struct TenantQuota;

/// One cluster at a time: each has six processes.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn quota(limit: i128) -> Value {
    table([
        ("limit_for_period", int(limit)),
        ("limit_refresh_period", s("1h")),
        ("backend", s("redis")),
    ])
}

/// A replica of a service on the cluster whose seed is `url`.
fn on(limit: i128, url: &str, prefix: &str) -> Registry {
    let redis = with(server::section(url, prefix), "cluster", boolean(true));
    server::replica::<TenantQuota>(quota(limit), redis)
}

/// As [`on`], with every other node of `cluster` in `nodes`: the client
/// finds the cluster though the seed dies.
fn on_every_node(limit: i128, cluster: &Cluster, prefix: &str) -> Registry {
    let others = cluster.nodes[1..]
        .iter()
        .map(|n| s(&format!("redis://127.0.0.1:{}", n.port)))
        .collect();
    let redis = with(
        server::section(&cluster.url(), prefix),
        "cluster",
        boolean(true),
    );
    let redis = with(redis, "nodes", Value::List(others));
    server::replica::<TenantQuota>(quota(limit), redis)
}

/// The Redis key of `tenant`'s count.
fn key(prefix: &str, tenant: &str, limit: u64) -> String {
    format!("{{{prefix}:redis_cluster.quota:key:{tenant}}}:fixed_window:{limit}:3600000000")
}

async fn take(r: &Registry, tenant: &str) -> Result<(), Error> {
    let limiter = r.sync_scope(|| TenantQuota::for_key(tenant))?;
    limiter.acquire().await
}

/// Three registries, 24 tenants with a quota of 3 each, 6 calls per tenant
/// (2 through each registry): 3 admitted per tenant, whatever primary its
/// slot is on; the counts are on all three primaries, and each primary
/// loaded the script once (`EVALSHA` answered `NOSCRIPT`, then `EVAL`).
/// A handle's `try_acquire` (a blocking connection to the cluster) shares
/// the same counts.
#[test]
fn each_tenants_quota_is_shared_on_the_primary_of_its_slot() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(cluster) = Cluster::start("quota", Duration::from_millis(500)) else {
        return;
    };
    let prefix = server::prefix("cluster");
    let replicas: Vec<Registry> = (0..3).map(|_| on(3, &cluster.url(), &prefix)).collect();
    let tenants: Vec<String> = (0..24).map(|t| format!("tenant-{t}")).collect();
    let admitted = two_workers().block_on(async {
        let mut admitted = vec![0; tenants.len()];
        for round in 0..6 {
            for (t, tenant) in tenants.iter().enumerate() {
                match take(&replicas[round % 3], tenant).await {
                    Ok(()) => admitted[t] += 1,
                    Err(Error::RateLimitExceeded { .. }) => {}
                    Err(e) => panic!("{e}"),
                }
            }
        }
        admitted
    });
    assert_eq!(admitted, vec![3; tenants.len()]);
    let primaries = cluster.primaries();
    assert_eq!(primaries.len(), 3);
    for &p in &primaries {
        let keys = match ask(p, &["DBSIZE"]) {
            Some(Reply::Int(n)) => n,
            other => panic!("{other:?}"),
        };
        assert!(keys > 0, "primary {p} holds no tenant's count");
        assert_eq!(calls(p, "eval"), 1, "primary {p} loaded the script once");
    }
    let total: i64 = primaries
        .iter()
        .map(|&p| match ask(p, &["DBSIZE"]) {
            Some(Reply::Int(n)) => n,
            _ => 0,
        })
        .sum();
    assert_eq!(total, 24, "one key per tenant");
    // A blocking connection reaches the same count: tenant-0 has none left,
    // a new tenant has 3.
    let handle = |t: &str| {
        replicas[0]
            .sync_scope(|| TenantQuota::for_key(t))
            .expect("configured")
    };
    assert!(handle("tenant-0").try_acquire().is_err());
    let fresh = handle("blocking");
    let given: Vec<bool> = (0..4).map(|_| fresh.try_acquire().is_ok()).collect();
    assert_eq!(given, [true, true, true, false]);
}

/// A tenant's slot moved to another primary while its registry runs: the
/// call made while its key is moved and its slot not yet (`ASK`) and the
/// one after (`MOVED`) are decided on the new primary, whose script cache
/// was emptied first, against the count that moved with the key: 3 of 3
/// admitted in all, then refused.
#[test]
fn a_moved_slot_is_followed_with_its_count_and_the_script_loaded_there() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(cluster) = Cluster::start("moved", Duration::from_millis(500)) else {
        return;
    };
    let prefix = server::prefix("moved");
    let r = on(3, &cluster.url(), &prefix);
    let k = key(&prefix, "acme", 3);
    let slot = match ask(cluster.nodes[0].port, &["CLUSTER", "KEYSLOT", &k]) {
        Some(Reply::Int(slot)) => slot,
        other => panic!("{other:?}"),
    };
    let from = cluster.primary_of(&k);
    let to = *cluster
        .primaries()
        .iter()
        .find(|&&p| p != from)
        .expect("another primary");
    let _ = ask(to, &["SCRIPT", "FLUSH"]);
    let rt = two_workers();
    assert!(rt.block_on(take(&r, "acme")).is_ok(), "the first permit");
    let evals_before = calls(to, "eval");
    let mut during = None;
    cluster.move_slot(slot, from, to, || {
        during = Some(rt.block_on(take(&r, "acme")));
    });
    let after: Vec<bool> = (0..3)
        .map(|_| rt.block_on(take(&r, "acme")).is_ok())
        .collect();
    assert!(
        matches!(during, Some(Ok(()))),
        "the call during the move: {during:?}"
    );
    assert_eq!(after, [true, false, false]);
    assert_eq!(cluster.primary_of(&k), to);
    let word = match ask(to, &["GET", &k]) {
        Some(Reply::Text(w)) => w,
        other => panic!("{other:?}"),
    };
    assert!(
        word.ends_with(" 3"),
        "the new primary holds 3 permits taken: {word}"
    );
    assert!(
        calls(to, "eval") > evals_before,
        "the script was loaded on the new primary"
    );
}

/// The primary of a tenant's slot, the node the client was given as its
/// seed, killed (SIGKILL), its replica promoted
/// after `cluster-node-timeout` (500 ms): the calls meanwhile are refused
/// with `BackendUnavailable` (`on_backend_failure = "deny"`), none of them
/// waiting past `connect_timeout` and `timeout`; then the promoted replica
/// decides, with the count it had replicated: 5 of 5 admitted in all.
#[test]
fn a_failover_is_answered_by_the_policy_then_decided_on_the_promoted_replica() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(mut cluster) = Cluster::start("failover", Duration::from_millis(500)) else {
        return;
    };
    let prefix = server::prefix("failover");
    let r = on_every_node(5, &cluster, &prefix);
    let seed = cluster.nodes[0].port;
    // A tenant on the seed the client was given: the node that dies is
    // the one it knew first.
    let (tenant, k, primary) = (0..100)
        .map(|t| {
            let tenant = format!("t{t}");
            let k = key(&prefix, &tenant, 5);
            let p = cluster.primary_of(&k);
            (tenant, k, p)
        })
        .find(|(_, _, p)| *p == seed)
        .expect("a tenant on the seed");
    let rt = two_workers();
    assert!(rt.block_on(take(&r, &tenant)).is_ok());
    // Replicated before the kill: `WAIT` for the replica's ack.
    assert_eq!(
        ask(primary, &["WAIT", "1", "2000"]),
        Some(Reply::Int(1)),
        "the replica has the count"
    );
    cluster.node(primary).kill();
    let killed = Instant::now();
    let (mut denied, mut slowest, mut admitted_at) = (0, Duration::ZERO, None);
    rt.block_on(async {
        while killed.elapsed() < Duration::from_secs(20) {
            let asked = Instant::now();
            let outcome = take(&r, &tenant).await;
            slowest = slowest.max(asked.elapsed());
            match outcome {
                Ok(()) => {
                    admitted_at = Some(killed.elapsed());
                    break;
                }
                Err(Error::BackendUnavailable { .. }) => denied += 1,
                Err(e) => panic!("{e}"),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let admitted_at = admitted_at.expect("the promoted replica decides within 20 s");
    println!(
        "failover: {denied} calls denied, the slowest in {slowest:?}; decided again {admitted_at:?} after the kill"
    );
    assert!(denied > 0, "the calls during the failover are the policy's");
    // `connect_timeout` 200 ms and `timeout` 200 ms, with room for a
    // loaded machine.
    assert!(slowest < Duration::from_millis(1500), "{slowest:?}");
    let mut after: Vec<bool> = (0..2)
        .map(|_| rt.block_on(take(&r, &tenant)).is_ok())
        .collect();
    // A handle's `try_acquire` (a blocking connection, made now from the
    // seeds, `url` dead and `nodes` alive) finds the promoted replica too.
    let handle = r
        .sync_scope(|| TenantQuota::for_key(tenant.as_str()))
        .expect("configured");
    after.extend((0..3).map(|_| handle.try_acquire().is_ok()));
    assert_eq!(after, [true, true, true, false, false], "1 + 1 + 3 of 5");
    let promoted = cluster.primary_of(&k);
    assert_ne!(promoted, primary);
    let word = match ask(promoted, &["GET", &k]) {
        Some(Reply::Text(w)) => w,
        other => panic!("{other:?}"),
    };
    assert!(
        word.ends_with(" 5"),
        "the promoted replica holds 5 taken: {word}"
    );
}

/// A backend left at `cluster = false` against a cluster's node: the
/// tenants whose slots another node serves are refused by the policy
/// (the node answers `MOVED`), and each of the backend's ERRORs says to
/// set `cluster = true`.
#[test]
fn a_cluster_taken_for_one_server_says_to_set_cluster() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(cluster) = Cluster::start("moved_hint", Duration::from_millis(500)) else {
        return;
    };
    let capture = support::capture::Capture::default();
    let _subscriber = tracing::subscriber::set_default(capture.clone());
    let prefix = server::prefix("hint");
    let r = server::replica::<TenantQuota>(quota(3), server::section(&cluster.url(), &prefix));
    // The client's task runs on this thread, so the log is captured.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let outcomes: Vec<bool> = rt.block_on(async {
        let mut outcomes = Vec::new();
        for t in 0..12 {
            outcomes.push(matches!(
                take(&r, &format!("t{t}")).await,
                Err(Error::BackendUnavailable { .. })
            ));
        }
        outcomes
    });
    assert!(outcomes.iter().any(|&refused| refused), "{outcomes:?}");
    let errors = capture.at("resilient::backend", tracing::Level::ERROR);
    // One ERROR per outage: a tenant on the seed's own slots ends one.
    assert!(!errors.is_empty());
    for e in &errors {
        assert!(
            e.message.starts_with("the Redis backend failed: Moved: ")
                && e.message.ends_with("the server is a node of a Redis Cluster: set `cluster = true` in `resilient.redis` (feature `redis-cluster`); specs that use it apply their `on_backend_failure` until it answers again"),
            "{}",
            e.message
        );
    }
}

/// `cluster = true` with a database other than 0, or a Unix socket, in
/// `url` or in `nodes`, is a problem at startup that says why; so are
/// `nodes` without `cluster = true`, and `nodes` written as one text.
#[test]
fn a_cluster_url_with_a_database_or_a_socket_is_a_problem() {
    let problems_of = |redis: Value| -> Vec<String> {
        match Registry::builder().spec::<TenantQuota>().build(&root(vec![
            ("redis_cluster.quota", quota(3)),
            ("resilient.redis", redis),
        ])) {
            Ok(_) => Vec::new(),
            Err(problems) => problems.iter().map(ToString::to_string).collect(),
        }
    };
    let seed = s("redis://127.0.0.1:7000");
    for (redis, key, says) in [
        (
            table([("url", seed.clone()), ("nodes", Value::List(vec![s("redis://u:hunter2@127.0.0.1:7001/3")]))]),
            "nodes",
            "applies only with `cluster = true`: one server has no other nodes (set `cluster = true`, or remove `nodes`)",
        ),
        (
            table([("url", seed.clone()), ("cluster", boolean(true)), ("nodes", s("redis://127.0.0.1:7001"))]),
            "nodes",
            "must be a list of Redis URLs: `nodes = [\"redis://host:port\", ..]`",
        ),
        (
            table([
                ("url", seed.clone()),
                ("cluster", boolean(true)),
                ("nodes", Value::List(vec![s("redis://u:hunter2@127.0.0.1:7001/3")])),
            ]),
            "nodes",
            "names database 3, and a Redis Cluster has only database 0: remove `/3` (or set `cluster = false`) (found \"redis://u:***@127.0.0.1:7001/3\")",
        ),
    ] {
        let problems = problems_of(redis);
        assert!(
            problems
                .iter()
                .any(|p| p.contains(&format!("key `{key}`")) && p.contains(says)),
            "{problems:?}"
        );
        assert!(!problems.iter().any(|p| p.contains("hunter2")), "{problems:?}");
    }
    // Settings that are valid show no password of `nodes` either.
    let redis = table([
        ("url", s("redis://u:hunter2@127.0.0.1:7000")),
        ("cluster", boolean(true)),
        (
            "nodes",
            Value::List(vec![s("redis://u:hunter2@127.0.0.1:7001")]),
        ),
    ]);
    let tree = root(vec![("resilient.redis", redis.clone())]);
    let mut found = Vec::new();
    let mut section = resilient_core::settings::Section::root(
        "Redis backend",
        "resilient.redis",
        &tree,
        &mut found,
    );
    let settings = resilient_core::backend::RedisSettings::read(&mut section).expect("valid");
    section.finish();
    let shown = format!("{settings:?}");
    assert!(
        shown.contains("nodes: [\"redis://u:***@127.0.0.1:7001\"]"),
        "{shown}"
    );
    assert!(!shown.contains("hunter2"), "{shown}");
    let r = server::replica::<TenantQuota>(quota(3), redis);
    let shown = format!("{r:?} {:?}", r.snapshot());
    assert!(!shown.contains("hunter2"), "{shown}");
    for (url, says) in [
        (
            "redis://127.0.0.1:7000/2",
            "names database 2, and a Redis Cluster has only database 0: remove `/2` (or set `cluster = false`)",
        ),
        (
            "unix:///run/redis.sock",
            "is a Unix socket, and `cluster = true` needs a node's `redis://host:port`",
        ),
    ] {
        let redis = table([("url", s(url)), ("cluster", boolean(true))]);
        let problems: Vec<String> = match Registry::builder().spec::<TenantQuota>().build(&root(
            vec![("redis_cluster.quota", quota(3)), ("resilient.redis", redis)],
        )) {
            Ok(_) => Vec::new(),
            Err(problems) => problems.iter().map(ToString::to_string).collect(),
        };
        assert!(
            problems.iter().any(|p| p.contains("key `url`") && p.contains(says)),
            "{problems:?}"
        );
    }
}

/// Replication is asynchronous: the permits a primary admitted and had not
/// replicated when it died are lost with it, and the limit admits them
/// again. Here the replica is paused (SIGSTOP) and its link closed while 3
/// of 5 permits are taken, the primary killed, and the replica resumed and promoted with
/// the 1 permit it had: 4 more are admitted, 8 in all, the limit exceeded
/// by exactly the 3 it never received.
#[test]
fn a_failover_loses_the_permits_not_replicated_and_no_more() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(mut cluster) = Cluster::start("lost", Duration::from_millis(500)) else {
        return;
    };
    let prefix = server::prefix("lost");
    let r = on(5, &cluster.url(), &prefix);
    let seed = cluster.nodes[0].port;
    let (tenant, k, primary) = (0..100)
        .map(|t| {
            let tenant = format!("t{t}");
            let k = key(&prefix, &tenant, 5);
            let p = cluster.primary_of(&k);
            (tenant, k, p)
        })
        .find(|(_, _, p)| *p != seed)
        .expect("a tenant on another primary");
    let replica = cluster.replica_of(primary);
    let rt = two_workers();
    assert!(rt.block_on(take(&r, &tenant)).is_ok());
    assert_eq!(ask(primary, &["WAIT", "1", "2000"]), Some(Reply::Int(1)));
    // Paused, and its link closed by the primary, so that what follows
    // does not wait in its socket either.
    cluster.node(replica).pause();
    assert!(matches!(
        ask(primary, &["CLIENT", "KILL", "TYPE", "replica"]),
        Some(Reply::Int(1))
    ));
    let unreplicated = (0..3)
        .filter(|_| rt.block_on(take(&r, &tenant)).is_ok())
        .count();
    assert_eq!(unreplicated, 3);
    cluster.node(primary).kill();
    cluster.node(replica).resume();
    let promoted = cluster::wait_for(Duration::from_secs(20), || {
        cluster::info(replica, "replication", "role").as_deref() == Some("master")
    });
    assert!(promoted.is_some(), "the replica took over");
    let mut after = 0;
    rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            match take(&r, &tenant).await {
                Ok(()) => after += 1,
                Err(Error::RateLimitExceeded { .. }) => break,
                Err(Error::BackendUnavailable { .. }) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("{e}"),
            }
        }
    });
    println!("failover with 3 permits not replicated: 1 + 3 admitted before, {after} after");
    assert_eq!(after, 4, "the promoted replica had 1 of 5 taken");
    let word = match ask(replica, &["GET", &k]) {
        Some(Reply::Text(w)) => w,
        other => panic!("{other:?}"),
    };
    assert!(word.ends_with(" 5"), "{word}");
}
