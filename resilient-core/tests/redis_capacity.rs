//! The figures behind README's "Capacity": Redis operations per admitted
//! and per refused call, for many replica processes of 64 tasks sharing one
//! limit. A measurement, not a check: both tests are ignored, and run by
//! hand against a redis-server of their own (`RESILIENT_REDIS_SERVER`
//! names its binary, `redis-server` by default):
//!
//! ```text
//! CAPACITY_REPLICAS=10 CAPACITY_LEASE=10 CAPACITY_LIMIT=1000000 CAPACITY_PACE_MS=50 \
//!   cargo test -p resilient-core --features redis --test redis_capacity -- \
//!   --ignored --exact capacity --nocapture
//! ```
//!
//! Settings (environment): `CAPACITY_REPLICAS` processes (3), each with 64
//! tasks on two workers calling one rate limiter every `CAPACITY_PACE_MS`
//! (50) for `CAPACITY_SECONDS` (3); the limit is `CAPACITY_LIMIT` permits
//! per second for all, of `type = CAPACITY_TYPE` (`fixed_window`),
//! `lease = CAPACITY_LEASE` (1).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
use support::redis::{self as server, Server};
use support::*;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use resilient_core::{Error, RateLimiterSpec};

#[derive(RateLimiterSpec)]
#[spec("redis_capacity.quota")]
struct Quota;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `INFO commandstats` of the server at `url`: (command, calls, µs).
fn commandstats(url: &str) -> Vec<(String, u64, u64)> {
    let addr = url.trim_start_matches("redis://");
    let mut stream = TcpStream::connect(addr).expect("redis");
    stream
        .write_all(b"*2\r\n$4\r\nINFO\r\n$12\r\ncommandstats\r\n")
        .expect("sent");
    let mut reader = BufReader::new(stream);
    let mut header = String::new();
    reader.read_line(&mut header).expect("an answer");
    let len: usize = header.trim_start_matches('$').trim().parse().expect("bulk");
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body).expect("the body");
    String::from_utf8_lossy(&body)
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |f: &str| -> Option<u64> {
                rest.split(',')
                    .find_map(|p| p.strip_prefix(f))?
                    .parse()
                    .ok()
            };
            Some((name.to_owned(), field("calls=")?, field("usec=")?))
        })
        .collect()
}

/// The role of one replica process, started by `capacity`.
#[test]
#[ignore = "a replica process, started by capacity"]
fn capacity_replica() {
    let Some((url, prefix)) = server::replica_role() else {
        return;
    };
    let section = table([
        (
            "limit_for_period",
            int(i128::from(env("CAPACITY_LIMIT", 100))),
        ),
        ("limit_refresh_period", s("1s")),
        (
            "type",
            s(&std::env::var("CAPACITY_TYPE").unwrap_or_else(|_| "fixed_window".into())),
        ),
        ("backend", s("redis")),
        ("lease", int(i128::from(env("CAPACITY_LEASE", 1)))),
    ]);
    let redis = with(server::section(&url, &prefix), "timeout", s("1s"));
    let r = server::replica::<Quota>(section, redis);
    let pace = Duration::from_millis(env("CAPACITY_PACE_MS", 50));
    let seconds = env("CAPACITY_SECONDS", 3);
    server::replica_go();
    let counts: [Arc<AtomicU64>; 3] = Default::default();
    server::two_workers().block_on(async {
        let until = Instant::now() + Duration::from_secs(seconds);
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let (r, counts) = (r.clone(), counts.clone());
                tokio::spawn(async move {
                    let limiter = r.sync_scope(Quota::get).expect("configured");
                    // Spread over the pace, as independent callers are.
                    let mut next = tokio::time::Instant::now() + pace.mul_f64(fastrand::f64());
                    tokio::time::sleep_until(next).await;
                    while Instant::now() < until {
                        let n = match limiter.acquire().await {
                            Ok(()) => 0,
                            Err(Error::RateLimitExceeded { .. }) => 1,
                            Err(_) => 2,
                        };
                        counts[n].fetch_add(1, Ordering::Relaxed);
                        next += pace;
                        tokio::time::sleep_until(next).await;
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("a task");
        }
    });
    println!(
        "counts {} {} {}",
        counts[0].load(Ordering::Relaxed),
        counts[1].load(Ordering::Relaxed),
        counts[2].load(Ordering::Relaxed)
    );
}

/// Runs `CAPACITY_REPLICAS` replica processes against a redis-server of
/// its own and prints one line of figures.
#[test]
#[ignore = "a measurement, run by hand (see the file's docs)"]
fn capacity() {
    let own = Server::start("capacity").expect("a redis-server");
    let url = own.url();
    let prefix = server::prefix("capacity");
    let replicas = env("CAPACITY_REPLICAS", 3);
    let exe = std::env::current_exe().expect("the test binary");
    let mut children: Vec<_> = (0..replicas)
        .map(|_| {
            Command::new(&exe)
                .args(["--exact", "capacity_replica", "--ignored", "--nocapture"])
                .args(["--test-threads", "1"])
                .env("RESILIENT_REDIS_URL", &url)
                .env("RESILIENT_REPLICA_PREFIX", &prefix)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("a replica process")
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500 + 50 * replicas));
    let before = commandstats(&url);
    for child in &mut children {
        let stdin = child.stdin.as_mut().expect("piped");
        stdin.write_all(b"go\n").expect("the replica reads");
    }
    let mut totals = [0u64; 3];
    for child in children {
        let out = child.wait_with_output().expect("the replica ends");
        assert!(out.status.success(), "a replica failed: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let n: Vec<u64> = text
            .lines()
            .find_map(|l| l.split_once("counts ").map(|(_, c)| c))
            .unwrap_or_else(|| panic!("no counts: {text}"))
            .split(' ')
            .filter_map(|w| w.parse().ok())
            .collect();
        for (t, n) in totals.iter_mut().zip(n) {
            *t += n;
        }
    }
    let after = commandstats(&url);
    let delta = |pick: &dyn Fn(&str) -> bool| -> (u64, u64) {
        let sum = |stats: &[(String, u64, u64)]| {
            stats
                .iter()
                .filter(|(name, _, _)| pick(name))
                .fold((0, 0), |(c, u), (_, calls, usec)| (c + calls, u + usec))
        };
        let (a, b) = (sum(&after), sum(&before));
        (a.0 - b.0, a.1 - b.1)
    };
    let (scripts, script_usec) = delta(&|n| n == "evalsha" || n == "eval");
    let (commands, _) = delta(&|n| n != "info");
    let [admitted, refused, failed] = totals;
    let others: Vec<String> = after
        .iter()
        .filter_map(|(name, calls, _)| {
            let was = before.iter().find(|b| &b.0 == name).map_or(0, |b| b.1);
            (calls > &was && name != "info").then(|| format!("{name} {}", calls - was))
        })
        .collect();
    println!("commands: {}", others.join(", "));
    let seconds = env("CAPACITY_SECONDS", 3) as f64;
    println!(
        "{} replicas {replicas} lease {} limit {}/s pace {} ms: calls {} ({:.0}/s), admitted {admitted}, refused {refused}, failed {failed}; scripts {scripts} ({:.0}/s, {:.1} µs each in Redis), commands {commands}; scripts per admitted {:.3}, per call {:.4}",
        std::env::var("CAPACITY_TYPE").unwrap_or_else(|_| "fixed_window".into()),
        env("CAPACITY_LEASE", 1),
        env("CAPACITY_LIMIT", 100),
        env("CAPACITY_PACE_MS", 50),
        admitted + refused + failed,
        (admitted + refused + failed) as f64 / seconds,
        scripts as f64 / seconds,
        script_usec as f64 / scripts.max(1) as f64,
        scripts as f64 / admitted.max(1) as f64,
        scripts as f64 / (admitted + refused).max(1) as f64,
    );
}
