//! One quota per tenant, shared by every replica (`key = ..` with
//! `backend = "redis"`): each tenant's instance keeps its count under a
//! Redis key of its own, whatever the tenant's text holds, and a keyed
//! decision costs the round trips of an unkeyed one. Needs
//! RESILIENT_REDIS_URL and a redis-server to start (see `support/redis.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
use support::redis::{self as server, script_runs, two_workers, Server};
use support::*;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use resilient_core::keyed::PartitionKey;
use resilient_core::settings::Value;
use resilient_core::{rate_limited, Error, RateLimiterSpec, Registry};

#[derive(RateLimiterSpec)]
#[spec("redis_tenants.quota")]
struct TenantQuota;

fn quota(limit: i128) -> Value {
    table([
        ("limit_for_period", int(limit)),
        ("limit_refresh_period", s("1h")),
        ("backend", s("redis")),
    ])
}

fn on(section: Value, url: &str, prefix: &str) -> Registry {
    server::replica::<TenantQuota>(section, server::section(url, prefix))
}

/// The keys under `prefix` on the server at `url` (`KEYS`, by hand over
/// RESP).
fn keys(url: &str, prefix: &str) -> Vec<String> {
    let addr = url.trim_start_matches("redis://");
    let mut stream = TcpStream::connect(addr).expect("redis");
    let pattern = format!("*{prefix}*");
    let command = format!("*2\r\n$4\r\nKEYS\r\n${}\r\n{pattern}\r\n", pattern.len());
    stream.write_all(command.as_bytes()).expect("sent");
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).expect("an answer");
    let n: usize = line
        .trim_start_matches('*')
        .trim()
        .parse()
        .expect("an array");
    (0..n)
        .map(|_| {
            line.clear();
            reader.read_line(&mut line).expect("a bulk header");
            let len: usize = line
                .trim_start_matches('$')
                .trim()
                .parse()
                .expect("a length");
            let mut key = vec![0; len + 2];
            reader.read_exact(&mut key).expect("a key");
            key.truncate(len);
            String::from_utf8(key).expect("text")
        })
        .collect()
}

/// Tenants whose texts hold what a Redis key is made of (a brace that
/// would end the hash tag, the separator, another tenant's text, a number's
/// decimal beside that number) each have their own quota of 1 and one key
/// of the same shape: `{prefix:spec path:key:K}:fixed_window:..`, with K
/// escaped.
#[test]
fn a_tenants_text_never_reaches_another_tenants_key() {
    let Some(url) = server::url("a_tenants_text_never_reaches_another_tenants_key") else {
        return;
    };
    let prefix = server::prefix("escaped");
    let r = on(quota(1), &url, &prefix);
    let texts = [
        "a",
        "a}",
        "{a}",
        "a}:fixed_window:1:3600000000",
        "a:key:b",
        "42",
        "%342",
        "",
        "tenant 7",
        "ü",
    ];
    let rt = two_workers();
    let (firsts, seconds) = rt.block_on(async {
        let (mut firsts, mut seconds) = (Vec::new(), Vec::new());
        for key in texts
            .iter()
            .map(|t| t as &dyn PartitionKeyText)
            .chain([&42u64 as &dyn PartitionKeyText])
        {
            let limiter = r.sync_scope(|| key.limiter()).expect("configured");
            firsts.push(limiter.acquire().await.is_ok());
            seconds.push(limiter.acquire().await.is_ok());
        }
        (firsts, seconds)
    });
    assert_eq!(
        firsts,
        vec![true; texts.len() + 1],
        "each tenant's first call is admitted: {texts:?}, then 42"
    );
    assert_eq!(seconds, vec![false; texts.len() + 1]);
    let mut found = keys(&url, &prefix);
    found.sort();
    assert_eq!(
        found.len(),
        texts.len() + 1,
        "one key per tenant: {found:?}"
    );
    let head = format!("{{{prefix}:redis_tenants.quota:key:");
    for key in &found {
        let k = key
            .strip_prefix(&head)
            .and_then(|k| k.strip_suffix("}:fixed_window:1:3600000000"))
            .unwrap_or_else(|| panic!("a key of another shape: {key}"));
        assert!(
            k.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.%".contains(&b)),
            "{key}"
        );
    }
    assert!(found.contains(&format!("{head}a}}:fixed_window:1:3600000000")));
    assert!(found.contains(&format!("{head}42}}:fixed_window:1:3600000000")));
    assert!(found.contains(&format!("{head}%342}}:fixed_window:1:3600000000")));
}

/// A tenant key of either kind (a text, a number), as a handle asks for
/// it.
trait PartitionKeyText: Sync {
    fn limiter(&self) -> Result<resilient_core::RateLimiterHandle<TenantQuota>, Error>;
}

impl<T: PartitionKey + Sync + ?Sized> PartitionKeyText for T {
    fn limiter(&self) -> Result<resilient_core::RateLimiterHandle<TenantQuota>, Error> {
        TenantQuota::for_key(self)
    }
}

/// A keyed decision is one round trip, as an unkeyed one is, and a kept
/// refusal none: 5 admitted calls then 20 refused ones cost 6 script runs
/// through the spec's own instance and 6 through a tenant's.
#[test]
fn a_keyed_decision_costs_the_round_trips_of_an_unkeyed_one() {
    let Some(own) = Server::start("a_keyed_decision_costs_the_round_trips_of_an_unkeyed_one")
    else {
        return;
    };
    let url = own.url();
    let r = on(quota(5), &url, &server::prefix("trips"));
    let rt = two_workers();
    let runs = |keyed: bool| {
        let before = script_runs(&url);
        let results: Vec<bool> = rt.block_on(async {
            let limiter = r
                .sync_scope(|| {
                    if keyed {
                        TenantQuota::for_key("acme")
                    } else {
                        TenantQuota::get()
                    }
                })
                .expect("configured");
            let mut results = Vec::new();
            for _ in 0..25 {
                results.push(limiter.acquire().await.is_ok());
            }
            results
        });
        assert_eq!(results.iter().filter(|&&ok| ok).count(), 5, "{results:?}");
        script_runs(&url) - before
    };
    let unkeyed = runs(false);
    let keyed = runs(true);
    println!("round trips for 5 admitted and 20 refused calls: unkeyed {unkeyed}, keyed {keyed}");
    // The first run loads the script (`EVALSHA`, then `EVAL`): one more.
    assert_eq!((unkeyed, keyed), (7, 6));
}

#[rate_limited(TenantQuota, key = tenant)]
async fn call(tenant: &str) -> Result<(), Error> {
    let _ = tenant;
    Ok(())
}

/// The role of one replica process in
/// `three_processes_share_each_tenants_quota`: started by that test with
/// `RESILIENT_REPLICA_PREFIX` set, it waits for a line on its input, then
/// 64 tasks on two workers call `call` 10 times for each of two tenants
/// (2 ms apart),
/// and it prints how many calls each tenant was admitted. Run alone, it
/// has nothing to do.
#[test]
#[ignore = "a replica process, started by three_processes_share_each_tenants_quota"]
fn tenant_replica_process() {
    let Some((url, prefix)) = server::replica_role() else {
        return;
    };
    let r = on(quota(100), &url, &prefix);
    server::replica_go();
    let admitted: [Arc<AtomicU64>; 2] = Default::default();
    two_workers().block_on(async {
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let (r, admitted) = (r.clone(), admitted.clone());
                tokio::spawn(async move {
                    for round in 0..20 {
                        let (t, tenant) = [(0, "acme"), (1, "globex")][round % 2];
                        match r.scope(call(tenant)).await {
                            Ok(()) => {
                                admitted[t].fetch_add(1, Ordering::Relaxed);
                            }
                            Err(Error::RateLimitExceeded { .. }) => {}
                            Err(e) => panic!("{e}"),
                        }
                        // Paced, so that the processes' calls overlap.
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("a task");
        }
    });
    println!(
        "acme {} globex {}",
        admitted[0].load(Ordering::Relaxed),
        admitted[1].load(Ordering::Relaxed)
    );
}

/// Three processes, 64 tasks each, call one fn keyed by tenant for two
/// tenants (1,920 calls per tenant): each tenant is admitted exactly its
/// quota of 100 in all, and the processes together make one script run per
/// decision Redis makes.
#[test]
fn three_processes_share_each_tenants_quota() {
    let Some(own) = Server::start("three_processes_share_each_tenants_quota") else {
        return;
    };
    let url = own.url();
    let prefix = server::prefix("tenants");
    let before = script_runs(&url);
    let exe = std::env::current_exe().expect("the test binary");
    let mut children: Vec<_> = (0..3)
        .map(|_| {
            Command::new(&exe)
                .args(["--exact", "tenant_replica_process", "--ignored"])
                .args(["--nocapture", "--test-threads", "1"])
                .env("RESILIENT_REDIS_URL", &url)
                .env("RESILIENT_REPLICA_PREFIX", &prefix)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("a replica process")
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    for child in &mut children {
        let stdin = child.stdin.as_mut().expect("piped");
        stdin.write_all(b"go\n").expect("the replica reads");
    }
    let each: Vec<(u64, u64)> = children
        .into_iter()
        .map(|child| {
            let out = child.wait_with_output().expect("the replica ends");
            assert!(out.status.success(), "a replica failed: {out:?}");
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let n: Vec<u64> = text
                .lines()
                .find_map(|l| l.split_once("acme ").map(|(_, counts)| counts))
                .unwrap_or_else(|| panic!("no counts from a replica: {text}"))
                .split(' ')
                .filter_map(|w| w.parse().ok())
                .collect();
            assert_eq!(n.len(), 2, "{text}");
            (n[0], n[1])
        })
        .collect();
    let runs = script_runs(&url) - before;
    println!("admitted per process (acme, globex): {each:?}; {runs} script runs for 3,840 calls");
    assert_eq!(each.iter().map(|e| e.0).sum::<u64>(), 100, "{each:?}");
    assert_eq!(each.iter().map(|e| e.1).sum::<u64>(), 100, "{each:?}");
    assert_eq!(
        keys(&url, &prefix).len(),
        2,
        "one key per tenant: {:?}",
        keys(&url, &prefix)
    );
}

/// A service that takes its key from the request (a tenant header, here
/// the request's first field) asks the tenant's handle, `for_key`, in
/// front of the inner work: 3 registries, 2 tenants, 8 requests per tenant
/// through each, and each tenant is served its quota of 5 in all, the
/// others answered with the limiter's error.
#[test]
fn a_service_keyed_by_its_request_shares_each_tenants_quota() {
    use tower::{service_fn, Service, ServiceExt};
    let Some(url) = server::url("a_service_keyed_by_its_request_shares_each_tenants_quota") else {
        return;
    };
    let prefix = server::prefix("service");
    let replicas: Vec<Registry> = (0..3).map(|_| on(quota(5), &url, &prefix)).collect();
    let served = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let rt = two_workers();
    let refused = rt.block_on(async {
        let mut refused = 0;
        for r in &replicas {
            let served = Arc::clone(&served);
            let mut svc = service_fn(move |(tenant, n): (&'static str, usize)| {
                let served = Arc::clone(&served);
                async move {
                    TenantQuota::for_key(tenant)?.acquire().await?;
                    served[n].fetch_add(1, Ordering::Relaxed);
                    Ok::<_, Error>(())
                }
            });
            for _ in 0..8 {
                for req in [("acme", 0), ("globex", 1)] {
                    let ready = svc.ready().await.expect("ready");
                    match r.scope(ready.call(req)).await {
                        Ok(()) => {}
                        Err(Error::RateLimitExceeded { .. }) => refused += 1,
                        Err(e) => panic!("{e}"),
                    }
                }
            }
        }
        refused
    });
    let served: Vec<u64> = served.iter().map(|n| n.load(Ordering::Relaxed)).collect();
    assert_eq!(served, [5, 5]);
    assert_eq!(refused, 2 * (3 * 8 - 5));
}
