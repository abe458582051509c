//! A real redis-server for the tests of the Redis backend.
//!
//! `RESILIENT_REDIS_URL` names a running server (`.ci/run` starts one on a
//! free loopback port); the tests that stop and start a server run their
//! own from the binary `RESILIENT_REDIS_SERVER` names (default
//! `redis-server`). In CI a missing server fails the test; elsewhere the
//! test prints one line saying how to run it, and passes without running.

#![allow(dead_code, unreachable_pub, clippy::expect_used)] // a broken test setup panics, saying what broke

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use resilient_core::settings::Value;
use resilient_core::{Registry, Spec};

use super::{boolean, build, s, table};

const HOW: &str = "start one with `redis-server --port 6399 --save '' --appendonly no` and set RESILIENT_REDIS_URL=redis://127.0.0.1:6399 (`.ci/run` does both)";

/// Whether this run must have Redis: in CI, or where
/// RESILIENT_REDIS_REQUIRED is set (`.ci/run` sets it), a test without it
/// fails.
fn required() -> bool {
    ["CI", "RESILIENT_REDIS_REQUIRED"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|v| !v.is_empty() && v != "false"))
}

/// The running server's URL; `None` (and one line printed) outside CI
/// when there is none.
pub fn url(test: &str) -> Option<String> {
    match std::env::var("RESILIENT_REDIS_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ if required() => {
            panic!("RESILIENT_REDIS_URL is not set, and CI needs the Redis tests: {HOW}")
        }
        _ => {
            println!("skipped {test}: no Redis; {HOW}");
            None
        }
    }
}

/// A key prefix no other test, run or process shares.
pub fn prefix(test: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "t-{test}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// The `resilient.redis` section for `url` and `prefix`.
pub fn section(url: &str, prefix: &str) -> Value {
    table([
        ("url", s(url)),
        ("key_prefix", s(prefix)),
        ("timeout", s("200ms")),
        ("connect_timeout", s("200ms")),
        ("require_at_startup", boolean(false)),
    ])
}

/// A registry of spec `S` with `section`, and `redis` as its
/// `resilient.redis` section: one replica of a service.
pub fn replica<S: Spec>(section: Value, redis: Value) -> Registry {
    build(
        Registry::builder().spec::<S>(),
        vec![(S::PATH, section), ("resilient.redis", redis)],
    )
}

/// A redis-server of this test's own, on a free loopback port, stopped
/// when dropped.
pub struct Server {
    pub port: u16,
    child: Option<Child>,
}

impl Server {
    /// Starts one; `None` (and one line printed) outside CI when there is
    /// no redis-server to start.
    pub fn start(test: &str) -> Option<Server> {
        let port = match TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()) {
            Ok(addr) => addr.port(),
            Err(e) => panic!("no free port: {e}"),
        };
        let mut server = Server { port, child: None };
        if !server.restart() {
            if required() {
                panic!("could not start redis-server, and CI needs the Redis tests: {HOW}");
            }
            println!("skipped {test}: no redis-server to start; {HOW}");
            return None;
        }
        Some(server)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Stops the server at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server's process (SIGSTOP) without closing its socket:
    /// the kernel still accepts connections, and nothing answers on them
    /// (a server stalled by a long command, swapping, or a host frozen).
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Lets a paused server go on (SIGCONT): it answers what waited.
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("a running server").id();
        let ok = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {signal} {pid}");
    }

    /// Starts the server again on its port, empty; whether it answers.
    pub fn restart(&mut self) -> bool {
        self.kill();
        let binary =
            std::env::var("RESILIENT_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let child = Command::new(binary)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let Ok(child) = child else { return false };
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `GET key` on the server at `url`, by hand over RESP (the tests read
/// what the scripts wrote without a client of their own).
pub fn get(url: &str, key: &str) -> Option<String> {
    use std::io::{BufRead, BufReader, Write};
    let addr = url.trim_start_matches("redis://");
    let mut stream = TcpStream::connect(addr).ok()?;
    let command = format!("*2\r\n$3\r\nGET\r\n${}\r\n{key}\r\n", key.len());
    stream.write_all(command.as_bytes()).ok()?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    if line.starts_with("$-1") {
        return None;
    }
    let mut value = String::new();
    reader.read_line(&mut value).ok()?;
    Some(value.trim_end().to_owned())
}

/// A runtime with two worker threads and every driver (a client's
/// sockets need the IO driver), as a server has.
pub fn two_workers() -> tokio::runtime::Runtime {
    match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("no runtime: {e}"),
    }
}

/// The `faketime` program (Debian's package of libfaketime), to run a
/// process on a skewed clock; `None` (and one line printed) outside CI
/// when there is none.
pub fn faketime(test: &str) -> Option<String> {
    let ok = Command::new("faketime")
        .args(["-f", "+1s", "true"])
        .status()
        .is_ok_and(|s| s.success());
    match ok {
        true => Some("faketime".into()),
        false if required() => panic!(
            "no `faketime`, and CI needs it: install Debian's package faketime (`.ci/run` does)"
        ),
        false => {
            println!("skipped {test}: no `faketime` (Debian's package faketime)");
            None
        }
    }
}

/// The scripts' runs on the server at `url` so far (`EVALSHA` and `EVAL`,
/// from `INFO commandstats`): one per round trip of a decision.
pub fn script_runs(url: &str) -> u64 {
    use std::io::{BufRead, BufReader, Read, Write};
    let addr = url.trim_start_matches("redis://");
    let Ok(mut stream) = TcpStream::connect(addr) else {
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

/// In a replica process (an ignored test that [`skewed_processes`]
/// starts): the Redis URL and key prefix its parent gave; `None` when run
/// any other way.
pub fn replica_role() -> Option<(String, String)> {
    match (
        std::env::var("RESILIENT_REDIS_URL"),
        std::env::var("RESILIENT_REPLICA_PREFIX"),
    ) {
        (Ok(url), Ok(prefix)) => Some((url, prefix)),
        _ => None,
    }
}

/// In a replica process: waits for its parent's signal to start, so that
/// all start together once each has built its registry.
pub fn replica_go() {
    let mut go = String::new();
    let _ = std::io::stdin().read_line(&mut go);
}

/// Runs the ignored test `role` of this test binary in one process per
/// clock offset of `skews` (libfaketime's `-f`, such as `"-5s"`), each
/// given `redis` (URL, key prefix); starts them together and returns the
/// number each printed after `label`.
pub fn skewed_processes(
    faketime: &str,
    role: &str,
    redis: (&str, &str),
    skews: &[&str],
    label: &str,
) -> Vec<u64> {
    use std::io::{BufRead, BufReader, Write};
    let exe = std::env::current_exe().expect("the test binary");
    let mut children: Vec<_> = skews
        .iter()
        .map(|skew| {
            Command::new(faketime)
                .args(["-f", skew])
                .arg(&exe)
                .args(["--exact", role, "--ignored", "--nocapture"])
                .args(["--test-threads", "1"])
                .env("RESILIENT_REDIS_URL", redis.0)
                .env("RESILIENT_REPLICA_PREFIX", redis.1)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("a replica process")
        })
        .collect();
    // Each builds its registry first; then all start at once.
    std::thread::sleep(Duration::from_millis(300));
    for child in &mut children {
        let stdin = child.stdin.as_mut().expect("piped");
        stdin.write_all(b"go\n").expect("the replica reads");
    }
    let prefix = format!("{label} ");
    children
        .into_iter()
        .map(|child| {
            let out = child.wait_with_output().expect("the replica ends");
            assert!(out.status.success(), "a replica failed: {out:?}");
            BufReader::new(&out.stdout[..])
                .lines()
                .map_while(Result::ok)
                .find_map(|l| {
                    let (_, n) = l.split_once(&prefix)?;
                    n.trim().parse::<u64>().ok()
                })
                .unwrap_or_else(|| {
                    panic!(
                        "no count from a replica: {}",
                        String::from_utf8_lossy(&out.stdout)
                    )
                })
        })
        .collect()
}

/// The millionths of a token a shared retry budget's key holds in Redis
/// (its word is `"tokens refilled_at"`); `None` when the key is absent.
pub fn budget_tokens(url: &str, key: &str) -> Option<u64> {
    get(url, key)?.split(' ').next()?.parse().ok()
}

/// Waits up to 2 s for the budget at `key` to hold `micro` millionths of a
/// token (deposits are sent 20 ms after they make a whole token); what it
/// holds then.
pub fn wait_for_budget(url: &str, key: &str, micro: u64) -> Option<u64> {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let now = budget_tokens(url, key);
        if now == Some(micro) || Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A TCP proxy in front of Redis: `freeze` stops forwarding on the
/// connections open now without closing them (a host gone, a network
/// partition, a NAT entry dropped); new connections go through.
/// `first_delay_ms` delays the first answer of each new connection (a slow
/// handshake: TLS, AUTH, DNS).
pub struct Proxy {
    pub port: u16,
    frozen_below: Arc<AtomicU64>,
    next_id: Arc<AtomicU64>,
    pub first_delay_ms: Arc<AtomicU64>,
}

impl Proxy {
    pub fn start(upstream: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let port = listener.local_addr().expect("its address").port();
        let frozen_below = Arc::new(AtomicU64::new(0));
        let next_id = Arc::new(AtomicU64::new(1));
        let first_delay_ms = Arc::new(AtomicU64::new(0));
        let (f, n, d) = (
            Arc::clone(&frozen_below),
            Arc::clone(&next_id),
            Arc::clone(&first_delay_ms),
        );
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let id = n.fetch_add(1, Ordering::SeqCst);
                let delay = d.load(Ordering::SeqCst);
                let pump = |mut from: TcpStream, mut to: TcpStream, delay: u64| {
                    let f = Arc::clone(&f);
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 65536];
                        let mut first = true;
                        loop {
                            let Ok(k) = from.read(&mut buf) else { return };
                            if k == 0 {
                                return;
                            }
                            if first && delay > 0 {
                                std::thread::sleep(Duration::from_millis(delay));
                            }
                            first = false;
                            while id < f.load(Ordering::SeqCst) {
                                std::thread::sleep(Duration::from_millis(10));
                            }
                            if to.write_all(&buf[..k]).is_err() {
                                return;
                            }
                        }
                    });
                };
                pump(
                    client.try_clone().expect("a second handle"),
                    server.try_clone().expect("a second handle"),
                    0,
                );
                pump(server, client, delay);
            }
        });
        Proxy {
            port,
            frozen_below,
            next_id,
            first_delay_ms,
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn freeze_open_connections(&self) {
        self.frozen_below
            .store(self.next_id.load(Ordering::SeqCst), Ordering::SeqCst);
    }
}
