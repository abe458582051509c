//! A real Redis Cluster for the tests of `cluster = true`: three primaries
//! and three replicas of redis-server on loopback ports, started by the
//! test and stopped when dropped. The binary is `RESILIENT_REDIS_SERVER`
//! (default `redis-server`), the cluster made with `redis-cli --cluster
//! create`. In CI (or with RESILIENT_REDIS_REQUIRED) a missing server
//! fails the test; elsewhere the test prints one line and passes without
//! running.

#![allow(dead_code, unreachable_pub, clippy::expect_used)] // a broken test setup panics, saying what broke

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const HOW: &str =
    "install Debian's redis-server (redis-server and redis-cli on the PATH; `.ci/run` does)";

fn required() -> bool {
    ["CI", "RESILIENT_REDIS_REQUIRED"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|v| !v.is_empty() && v != "false"))
}

/// A reply of the server, as far as these tests read them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Text(String),
    Int(i64),
    Nil,
    Error(String),
    List(Vec<Reply>),
}

impl Reply {
    pub fn text(&self) -> String {
        match self {
            Reply::Text(t) => t.clone(),
            other => panic!("not a text: {other:?}"),
        }
    }
}

fn read(reader: &mut impl BufRead) -> Option<Reply> {
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let line = line.trim_end();
    let (kind, rest) = line.split_at(1);
    Some(match kind {
        "+" => Reply::Text(rest.to_owned()),
        "-" => Reply::Error(rest.to_owned()),
        ":" => Reply::Int(rest.parse().ok()?),
        "$" => {
            let len: i64 = rest.parse().ok()?;
            if len < 0 {
                return Some(Reply::Nil);
            }
            let mut body = vec![0; usize::try_from(len).ok()? + 2];
            reader.read_exact(&mut body).ok()?;
            body.truncate(body.len() - 2);
            Reply::Text(String::from_utf8_lossy(&body).into_owned())
        }
        "*" => {
            let n: i64 = rest.parse().ok()?;
            if n < 0 {
                return Some(Reply::Nil);
            }
            Reply::List((0..n).map(|_| read(reader)).collect::<Option<_>>()?)
        }
        _ => return None,
    })
}

/// Sends `args` to the server on `port`; `None` when it does not answer.
pub fn ask(port: u16, args: &[&str]) -> Option<Reply> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let mut command = format!("*{}\r\n", args.len());
    for a in args {
        command.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    stream.write_all(command.as_bytes()).ok()?;
    read(&mut BufReader::new(stream))
}

/// The value of `field` in `INFO section` of the server on `port`.
pub fn info(port: u16, section: &str, field: &str) -> Option<String> {
    let text = ask(port, &["INFO", section])?.text();
    text.lines().find_map(|l| {
        l.strip_prefix(field)?
            .strip_prefix(':')
            .map(|v| v.trim().to_owned())
    })
}

/// Calls of `command` (`evalsha`, `eval`) on the server on `port`.
pub fn calls(port: u16, command: &str) -> u64 {
    info(port, "commandstats", &format!("cmdstat_{command}"))
        .and_then(|v| v.split("calls=").nth(1)?.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// A loopback port free for a node and for its cluster bus (the port plus
/// 10000).
fn free_port() -> u16 {
    for _ in 0..200 {
        let port = 20000 + fastrand::u16(0..30000);
        let free = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_ok();
        if free(port) && free(port + 10000) {
            return port;
        }
    }
    panic!("no free loopback port pair for a cluster node");
}

/// One node of the cluster.
pub struct Node {
    pub port: u16,
    child: Option<Child>,
}

impl Node {
    /// Whether its process runs.
    pub fn alive(&self) -> bool {
        self.child.is_some()
    }
}

/// A cluster of three primaries, each with one replica.
pub struct Cluster {
    pub nodes: Vec<Node>,
    dir: PathBuf,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Node {
    /// Stops the node's process (SIGSTOP) without closing its sockets: it
    /// neither answers nor replicates until [`resume`](Self::resume).
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Resumes a paused node (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        if let Some(child) = &self.child {
            let ok = Command::new("kill")
                .args([signal, &child.id().to_string()])
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "kill {signal} {}", child.id());
        }
    }

    /// Stops the node at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Cluster {
    /// Starts one with `node_timeout` (`cluster-node-timeout`, which
    /// bounds how soon a replica takes over a dead primary); `None` (and
    /// one line printed) outside CI when there is no redis-server.
    pub fn start(test: &str, node_timeout: Duration) -> Option<Cluster> {
        let server =
            std::env::var("RESILIENT_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let found = Command::new(&server)
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
            && Command::new("redis-cli")
                .arg("--version")
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
        if !found {
            if required() {
                panic!("no {server} or redis-cli to start a Redis Cluster, and CI needs the cluster tests: {HOW}");
            }
            println!("skipped {test}: no {server} or redis-cli; {HOW}");
            return None;
        }
        let dir = std::env::temp_dir().join(format!(
            "resilient-cluster-{test}-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::create_dir_all(&dir).expect("a directory for the nodes");
        let mut cluster = Cluster {
            nodes: Vec::new(),
            dir,
        };
        for _ in 0..6 {
            let port = free_port();
            let child = Command::new(&server)
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--cluster-enabled", "yes"])
                .args(["--cluster-config-file", &format!("nodes-{port}.conf")])
                .args([
                    "--cluster-node-timeout",
                    &node_timeout.as_millis().to_string(),
                ])
                // A replica may take over however long its link was down.
                .args(["--cluster-replica-validity-factor", "0"])
                .args([
                    "--repl-diskless-sync",
                    "yes",
                    "--repl-diskless-sync-delay",
                    "0",
                ])
                .args(["--save", "", "--appendonly", "no"])
                .arg("--dir")
                .arg(&cluster.dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("a redis-server");
            cluster.nodes.push(Node {
                port,
                child: Some(child),
            });
        }
        for node in &cluster.nodes {
            wait_for(Duration::from_secs(10), || {
                ask(node.port, &["PING"]) == Some(Reply::Text("PONG".into()))
            })
            .unwrap_or_else(|| panic!("node {} did not start", node.port));
        }
        let addresses: Vec<String> = cluster
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli");
        assert!(out.status.success(), "redis-cli --cluster create: {out:?}");
        wait_for(Duration::from_secs(20), || cluster.settled())
            .expect("the cluster's state is ok on every node, each replica linked");
        Some(cluster)
    }

    /// Every live node says `cluster_state:ok`, and agrees on three
    /// primaries, each with its replica linked.
    pub fn settled(&self) -> bool {
        self.nodes.iter().filter(|n| n.alive()).all(|n| {
            info_cluster(n.port).as_deref() == Some("ok")
                && match info(n.port, "replication", "role").as_deref() {
                    Some("slave") => {
                        info(n.port, "replication", "master_link_status").as_deref() == Some("up")
                    }
                    Some("master") => true,
                    _ => false,
                }
        })
    }

    /// The URL of the first node, a seed for the client.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.nodes[0].port)
    }

    /// The port of the live primary serving `key`'s slot, as the live
    /// nodes' `CLUSTER NODES` say.
    pub fn primary_of(&self, key: &str) -> u16 {
        let live = self.nodes.iter().find(|n| n.alive()).expect("a live node");
        let slot = match ask(live.port, &["CLUSTER", "KEYSLOT", key]) {
            Some(Reply::Int(slot)) => slot,
            other => panic!("CLUSTER KEYSLOT: {other:?}"),
        };
        self.owner(slot).0
    }

    /// The port and node id of the primary serving `slot`.
    pub fn owner(&self, slot: i64) -> (u16, String) {
        let live = self.nodes.iter().find(|n| n.alive()).expect("a live node");
        let nodes = ask(live.port, &["CLUSTER", "NODES"])
            .expect("CLUSTER NODES")
            .text();
        for line in nodes.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            if f.len() < 9 || !f[2].contains("master") || f[2].contains("fail") {
                continue;
            }
            let serves = f[8..].iter().any(|range| match range.split_once('-') {
                Some((a, b)) => {
                    a.parse::<i64>().is_ok_and(|a| a <= slot)
                        && b.parse::<i64>().is_ok_and(|b| slot <= b)
                }
                None => range.parse::<i64>() == Ok(slot),
            });
            if serves {
                let port = f[1].split(['@', ':']).nth(1).and_then(|p| p.parse().ok());
                return (port.expect("a node's port"), f[0].to_owned());
            }
        }
        panic!("no primary serves slot {slot}: {nodes}")
    }

    /// The port of the replica of the primary on `port`.
    pub fn replica_of(&self, port: u16) -> u16 {
        let id = self.id(port);
        let nodes = ask(port, &["CLUSTER", "NODES"])
            .expect("CLUSTER NODES")
            .text();
        nodes
            .lines()
            .map(|l| l.split(' ').collect::<Vec<_>>())
            .find(|f| f.len() > 3 && f[2].contains("slave") && f[3] == id)
            .and_then(|f| f[1].split(['@', ':']).nth(1)?.parse().ok())
            .unwrap_or_else(|| panic!("no replica of {port}: {nodes}"))
    }

    /// The node id of the node on `port`.
    pub fn id(&self, port: u16) -> String {
        ask(port, &["CLUSTER", "MYID"])
            .expect("CLUSTER MYID")
            .text()
    }

    /// The ports of the live primaries.
    pub fn primaries(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|n| {
                n.alive() && info(n.port, "replication", "role").as_deref() == Some("master")
            })
            .map(|n| n.port)
            .collect()
    }

    /// The node on `port`.
    pub fn node(&mut self, port: u16) -> &mut Node {
        self.nodes
            .iter_mut()
            .find(|n| n.port == port)
            .expect("a node of this cluster")
    }

    /// Moves `slot` (and its keys) from the primary on `from` to the one
    /// on `to`, as `redis-cli --cluster reshard` does; `between` runs once
    /// the keys are moved and before the slot is (so a client is
    /// redirected with `ASK` meanwhile).
    pub fn move_slot(&self, slot: i64, from: u16, to: u16, between: impl FnOnce()) {
        let (from_id, to_id) = (self.id(from), self.id(to));
        let slot_s = slot.to_string();
        let ok = |r: Option<Reply>, what: &str| {
            assert!(matches!(r, Some(Reply::Text(_))), "{what}: {r:?}");
        };
        ok(
            ask(to, &["CLUSTER", "SETSLOT", &slot_s, "IMPORTING", &from_id]),
            "IMPORTING",
        );
        ok(
            ask(from, &["CLUSTER", "SETSLOT", &slot_s, "MIGRATING", &to_id]),
            "MIGRATING",
        );
        loop {
            let keys = match ask(from, &["CLUSTER", "GETKEYSINSLOT", &slot_s, "100"]) {
                Some(Reply::List(keys)) => keys,
                other => panic!("GETKEYSINSLOT: {other:?}"),
            };
            if keys.is_empty() {
                break;
            }
            let port = to.to_string();
            let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
            let names: Vec<String> = keys.iter().map(Reply::text).collect();
            args.extend(names.iter().map(String::as_str));
            ok(ask(from, &args), "MIGRATE");
        }
        between();
        for node in self.nodes.iter().filter(|n| n.alive()) {
            let _ = ask(node.port, &["CLUSTER", "SETSLOT", &slot_s, "NODE", &to_id]);
        }
    }
}

fn info_cluster(port: u16) -> Option<String> {
    let text = ask(port, &["CLUSTER", "INFO"])?.text();
    text.lines().find_map(|l| {
        l.strip_prefix("cluster_state:")
            .map(|v| v.trim().to_owned())
    })
}

/// Polls `done` every 50 ms until it holds or `limit` passes; how long it
/// took.
pub fn wait_for(limit: Duration, mut done: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if done() {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}
