//! Shared backends: rate limiters whose permits, and retry budgets whose
//! tokens, live outside the process, so that every replica of a service
//! draws on one limit and one budget.
//!
//! A rate limiter spec names its backend in its section, a retry spec in
//! its `retry_budget` (see [`RetrySettings`](crate::retry::RetrySettings));
//! the connection is set once, for the whole registry, in the section
//! `resilient.redis`:
//!
//! ```toml
//! [resilient.redis]
//! url = "redis://127.0.0.1:6379"
//! timeout = "50ms"            # per decision; then `on_backend_failure` applies
//!
//! [resilient.ratelimiter.payments]
//! limit_for_period = 100
//! limit_refresh_period = "1s"
//! backend = "redis"
//! on_backend_failure = "local"   # or "deny" (the default), "allow"
//! local_limit_for_period = 34    # this replica's share while Redis is down
//! ```
//!
//! Each decision is one script run by Redis, timed by the Redis server's
//! clock (`TIME`): replicas whose clocks disagree share one limit exactly.
//! A decision costs one round trip at most: the calls of one limiter that
//! wait meanwhile are merged into it, `lease = N` takes up to N permits per
//! round trip, and a refusal is known until a permit could be due. A retry
//! budget's withdrawal is one script run too, on the calling thread, only
//! for a failure that would be retried; successes cost none (their deposits
//! are sent together). With the feature `redis-cluster` and
//! `cluster = true`, the backend is a Redis Cluster: a decision's keys
//! share one hash tag, so each decision is one script on its slot's
//! primary, and the client follows `MOVED` and `ASK` (see `conn`). A
//! keyed instance's key is escaped in its Redis key (see `key_text`).
//! See [`RedisSettings`] for the connection's settings,
//! and the guide's [redis](crate::guide::redis) chapter ("Limits shared by
//! replicas" and "Retry budgets shared by replicas") for the guarantees and
//! the figures.

mod budget;
#[cfg(feature = "redis")]
mod conn;
mod key_text;
#[cfg(feature = "redis")]
pub(crate) mod redis;

pub(crate) use budget::{BudgetShape, BudgetVersion, SharedBudget};

use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::keyed::KeyRef;
pub use crate::registry::{BackendSnapshot, BackendUse};
pub use crate::telemetry::BackendState;

use crate::registry::{Context, ReadinessRule, SectionEntry};
use crate::settings::{Problem, Section, Value};
use crate::spec::SpecKind;
use crate::telemetry::{Listeners, Recorded, Switches};

impl SpecKind {
    /// A registry's shared backend (`resilient.redis`): its own kind in the
    /// snapshot ([`BackendSnapshot`]), the metrics (`backend` label) and
    /// the events, not a spec.
    pub const BACKEND: SpecKind = SpecKind::new("backend", "shared backend");
}

/// The specs among `sections` (name, path, section as read) that use Redis,
/// with their policy while it is down.
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
fn users(sections: &[(&'static str, &'static str, &Value)]) -> Vec<BackendUse> {
    let redis = |v: Option<&Value>| matches!(v, Some(Value::Str(s)) if s.trim().eq_ignore_ascii_case("redis"));
    let policy = |v: Option<&Value>| match v {
        Some(Value::Str(s)) => ["allow", "local"]
            .into_iter()
            .find(|p| s.trim().eq_ignore_ascii_case(p))
            .unwrap_or("deny"),
        _ => "deny",
    };
    let mut out = Vec::new();
    for &(spec, path, raw) in sections {
        let at = |key: &str| crate::settings::at(raw, key);
        if redis(at("backend")) {
            out.push(BackendUse {
                spec,
                path,
                on_backend_failure: policy(at("on_backend_failure")),
            });
        }
        if redis(at("retry_budget.backend")) {
            out.push(BackendUse {
                spec,
                path,
                on_backend_failure: policy(at("retry_budget.on_backend_failure")),
            });
        }
    }
    out
}

/// Where a rate limiter keeps its permits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize),
    serde(rename_all = "snake_case")
)]
pub enum Backend {
    /// In this process: each replica has the whole limit.
    #[default]
    Local,
    /// In Redis (`resilient.redis`): every replica shares one limit.
    Redis,
}

/// What a call gets while the shared backend cannot decide (it is down,
/// slow past `timeout`, or answers what is not a decision).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize),
    serde(tag = "policy", rename_all = "snake_case")
)]
pub enum OnBackendFailure {
    /// The call is refused with
    /// [`Error::BackendUnavailable`](crate::Error::BackendUnavailable), not
    /// a rate limit (Kora's behaviour): the safe choice for a limit that
    /// protects a dependency or a paid quota. An inbound limit usually
    /// wants `Local` (its share) or `Allow`, so that an outage of the
    /// backend is no outage of the service.
    #[default]
    Deny,
    /// The call goes ahead unlimited.
    Allow,
    /// The call asks a limiter in this process, of the same algorithm and
    /// period, with `limit_for_period` permits: this replica's share.
    Local {
        /// Permits per period this process gives while the backend is down.
        limit_for_period: u32,
    },
}

/// How a spec names the share of `on_backend_failure = "local"`: its key,
/// the key of the whole it is a share of, and how the messages say them.
pub(crate) struct LocalShare {
    /// The key, `local_limit_for_period` or `local_tokens_max`.
    pub(crate) key: &'static str,
    /// The largest value the key takes.
    pub(crate) most: u64,
    /// The key of the whole, `limit_for_period` or `tokens_max`.
    pub(crate) of: &'static str,
    /// What the share is, for the message that asks for it.
    pub(crate) is: &'static str,
    /// What is shared: "limit", "bucket".
    pub(crate) shared: &'static str,
    /// What a spec kept in the process is: "limiter", "budget".
    pub(crate) local: &'static str,
    /// Keys besides these that apply only with `backend = "redis"`.
    pub(crate) redis_only: &'static [&'static str],
}

/// What a call gets while the backend makes no decision, as read; the
/// spec's own enum names the share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Policy {
    Deny,
    Allow,
    Local(u32),
}

/// Reads a spec's `backend`, `on_backend_failure` and the share of
/// `on_backend_failure = "local"`; `whole` is the value of the share's
/// whole, if valid.
pub(crate) fn read_backend(
    s: &mut Section<'_>,
    share: &LocalShare,
    whole: Option<u64>,
) -> (Option<Backend>, Option<Policy>) {
    let backend = s.choice("backend", &["local", "redis"], "local");
    let policy = s.choice("on_backend_failure", &["deny", "allow", "local"], "deny");
    let amount = s.int(share.key, Some(0), 1, share.most);
    if backend == Some("local") {
        let keys = ["on_backend_failure", share.key];
        for key in keys.iter().chain(share.redis_only) {
            if s.written(key).is_some() {
                s.invalid(
                    key,
                    format!(
                        "applies only with `backend = \"redis\"`: a local {} has no backend to fail",
                        share.local
                    ),
                );
                return (None, None);
            }
        }
    }
    let policy = match (policy, amount) {
        (Some("local"), Some(0)) => {
            s.problem(
                share.key,
                format!(
                    "is required with `on_backend_failure = \"local\"`: {} (its share of `{}`)",
                    share.is, share.of
                ),
                None,
            );
            None
        }
        (Some("local"), Some(amount)) => match whole {
            Some(whole) if amount > whole => {
                s.invalid(
                    share.key,
                    format!(
                        "must be at most `{}` ({whole}): it is this process's share of the shared {}",
                        share.of, share.shared
                    ),
                );
                None
            }
            _ => u32::try_from(amount).ok().map(Policy::Local),
        },
        (Some(_), Some(amount)) if amount != 0 => {
            s.invalid(
                share.key,
                "applies only with `on_backend_failure = \"local\"`",
            );
            None
        }
        (Some("allow"), _) => Some(Policy::Allow),
        (Some(_), _) => Some(Policy::Deny),
        (None, _) => None,
    };
    let backend = backend.map(|b| {
        if b == "redis" {
            Backend::Redis
        } else {
            Backend::Local
        }
    });
    (backend, policy)
}

/// The settings of the Redis backend, the section `resilient.redis`.
///
/// | key | default | rule |
/// |---|---|---|
/// | `url` | required | `redis://[user:password@]host[:port][/db]` or `unix:///path` |
/// | `timeout` | `"50ms"` | duration in [1ms, 1h]: how long one decision may take once it has a connection (its script, loaded again if Redis lost it) before `on_backend_failure` applies |
/// | `connect_timeout` | `"1s"` | duration in [1ms, 1h]: how long a connection may take to open, the client's setup commands (`AUTH`, `SELECT`) included; a decision that must open one has this, then `timeout` |
/// | `key_prefix` | `"resilient"` | text without `{`, `}` or spaces: the first part of every key (two services share a limit when prefix and spec path agree) |
/// | `require_at_startup` | `false` | `true`: the registry is not built while Redis does not answer a `PING` |
/// | `cluster` | `false` | `true`: `url` is a node of a Redis Cluster (feature `redis-cluster`), whose other nodes and slots are read from it |
/// | `nodes` | `[]` | with `cluster = true`: a list of more nodes' URLs, asked for the cluster's nodes and slots when `url` does not answer (list one per shard, or give a name that resolves to live nodes) |
/// | `readiness` | `"degraded"` | `"ignore"`, `"degraded"` or `"not_ready"`: what Redis down (its last decision failed) makes of the service's readiness (`Snapshot::readiness`) |
///
/// The backend's own failures go through a circuit breaker (count window of
/// the last 10 decisions, opens at 50% failures after 5, open for 1 s, then
/// one probe): while it is open, a decision costs one atomic load and the
/// policy applies at once.
///
/// Its `Debug` and its serialized form show the URL without its password
/// (see [`shown_url`](Self::shown_url)).
#[derive(Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct RedisSettings {
    /// Where Redis listens. It may hold a password: show
    /// [`shown_url`](Self::shown_url) instead.
    #[cfg_attr(feature = "serde", serde(serialize_with = "ser_shown"))]
    pub url: String,
    /// How long a decision may take.
    #[cfg_attr(
        feature = "serde",
        serde(serialize_with = "crate::settings::ser::duration")
    )]
    pub timeout: Duration,
    /// How long a connection may take to open.
    #[cfg_attr(
        feature = "serde",
        serde(serialize_with = "crate::settings::ser::duration")
    )]
    pub connect_timeout: Duration,
    /// The first part of every key.
    pub key_prefix: String,
    /// Whether the registry needs Redis to answer when it is built.
    pub require_at_startup: bool,
    /// Whether `url` is a node of a Redis Cluster.
    pub cluster: bool,
    /// More nodes of the cluster, asked when `url` does not answer. They
    /// may hold a password: the `Debug` and serialized forms show them
    /// without it.
    #[cfg_attr(feature = "serde", serde(serialize_with = "ser_shown_list"))]
    pub nodes: Vec<String>,
    /// What Redis down makes of the service's readiness.
    pub readiness: ReadinessRule,
}

impl RedisSettings {
    /// Where the section is read from.
    pub const PATH: &'static str = "resilient.redis";

    /// Reads and validates the section (`s`), recording every problem found.
    pub fn read(s: &mut Section<'_>) -> Option<Self> {
        let url = s.text("url", None);
        let timeout = bounded(s, "timeout", Duration::from_millis(50));
        let connect_timeout = bounded(s, "connect_timeout", Duration::from_secs(1));
        let key_prefix = match s.text("key_prefix", Some("resilient")) {
            Some(p) if p.is_empty() || p.contains(['{', '}', ' ']) => {
                s.invalid(
                    "key_prefix",
                    "must be non-empty text without `{`, `}` or spaces (the braces mark the part of a key Redis Cluster hashes)",
                );
                None
            }
            other => other,
        };
        let require_at_startup = s.bool("require_at_startup", false);
        let cluster = s.bool("cluster", false);
        if cluster == Some(true) && !cfg!(feature = "redis-cluster") {
            s.invalid(
                "cluster",
                "is true, and a Redis Cluster needs the `redis-cluster` feature of resilient-core: add `features = [\"redis-cluster\"]` to its dependency (or set `cluster = false` for one server)",
            );
        }
        let nodes = read_nodes(s, cluster);
        let readiness = ReadinessRule::read_key(s);
        let url = match url {
            Some(url) => match check_url(&url).and_then(|()| {
                if cluster == Some(true) {
                    check_cluster_url(&url)
                } else {
                    Ok(())
                }
            }) {
                Ok(()) => Some(url),
                Err(rule) => {
                    // Shown without its password, as everywhere.
                    let found = Value::Str(shown(&url));
                    s.problem("url", scrub(&rule, &url), Some(&found));
                    None
                }
            },
            None => None,
        };
        Some(Self {
            url: url?,
            timeout: timeout?,
            connect_timeout: connect_timeout?,
            key_prefix: key_prefix?,
            require_at_startup: require_at_startup?,
            cluster: cluster?,
            nodes: nodes?,
            readiness: readiness?,
        })
    }

    /// The URL as logs and messages show it: without its password.
    pub fn shown_url(&self) -> String {
        shown(&self.url)
    }

    /// `text` without the secrets of `url` and of `nodes`.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn scrub(&self, text: &str) -> String {
        self.nodes
            .iter()
            .fold(scrub(text, &self.url), |t, node| scrub(&t, node))
    }
}

/// Reads `nodes`: a list of URLs, each checked as `url` is, and only with
/// `cluster = true` (`cluster` as read).
fn read_nodes(s: &mut Section<'_>, cluster: Option<bool>) -> Option<Vec<String>> {
    s.has("nodes");
    let items = match s.value("nodes") {
        None => return Some(Vec::new()),
        Some(Value::List(items)) => items,
        Some(v) => {
            let found = match v {
                Value::Str(t) => Value::Str(shown(t)),
                other => other.clone(),
            };
            s.problem(
                "nodes",
                "must be a list of Redis URLs: `nodes = [\"redis://host:port\", ..]`",
                Some(&found),
            );
            return None;
        }
    };
    if cluster == Some(false) && !items.is_empty() {
        s.invalid(
            "nodes",
            "applies only with `cluster = true`: one server has no other nodes (set `cluster = true`, or remove `nodes`)",
        );
        return None;
    }
    let mut nodes = Vec::new();
    let mut ok = true;
    for item in items {
        match item {
            Value::Str(url) => match check_url(url).and_then(|()| check_cluster_url(url)) {
                Ok(()) => nodes.push(url.trim().to_owned()),
                Err(rule) => {
                    let found = Value::Str(shown(url));
                    s.problem("nodes", scrub(&rule, url), Some(&found));
                    ok = false;
                }
            },
            other => {
                s.problem("nodes", "must be a list of Redis URLs (texts)", Some(other));
                ok = false;
            }
        }
    }
    ok.then_some(nodes)
}

/// A duration in [1ms, 1h], `default` when absent.
fn bounded(s: &mut Section<'_>, key: &'static str, default: Duration) -> Option<Duration> {
    match s.duration(key, false) {
        Some(Some(d)) if d < Duration::from_millis(1) || d > Duration::from_secs(3600) => {
            s.invalid(key, "must be between 1ms and 1h");
            None
        }
        Some(d) => d,
        None => Some(default),
    }
}

impl std::fmt::Debug for RedisSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSettings")
            .field("url", &self.shown_url())
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("key_prefix", &self.key_prefix)
            .field("require_at_startup", &self.require_at_startup)
            .field("cluster", &self.cluster)
            .field(
                "nodes",
                &self.nodes.iter().map(|n| shown(n)).collect::<Vec<_>>(),
            )
            .field("readiness", &self.readiness)
            .finish()
    }
}

#[cfg(feature = "serde")]
fn ser_shown<S: serde::Serializer>(url: &str, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&shown(url))
}

#[cfg(feature = "serde")]
fn ser_shown_list<S: serde::Serializer>(urls: &[String], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(urls.iter().map(|u| shown(u)))
}

/// The parts of a URL a password can hide in: where the part after the
/// scheme starts, and the user info before its host (`user:password`).
struct UrlParts<'a> {
    scheme: &'a str,
    /// After `://`, up to the path, query or fragment.
    authority: &'a str,
    /// The path, query and fragment.
    rest: &'a str,
    /// `user:password`, before the last `@` of the authority.
    userinfo: Option<&'a str>,
    /// `host[:port]`.
    host_port: &'a str,
}

fn parts(url: &str) -> Option<UrlParts<'_>> {
    let (scheme, after) = url.split_once("://")?;
    let end = after.find(['/', '?', '#']).unwrap_or(after.len());
    let (authority, rest) = after.split_at(end);
    let (userinfo, host_port) = match authority.rfind('@') {
        Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
        None => (None, authority),
    };
    Some(UrlParts {
        scheme,
        authority,
        rest,
        userinfo,
        host_port,
    })
}

/// The query keys whose values are secrets (`unix:///path?pass=..`).
const SECRET_QUERY_KEYS: [&str; 3] = ["pass", "password", "token"];

/// The secrets `url` holds: the password of its user info and the values
/// of its `pass`, `password` and `token` query parts, each as written and
/// percent-decoded.
fn secrets(url: &str) -> Vec<String> {
    let mut found = Vec::new();
    let Some(p) = parts(url) else {
        return found;
    };
    if let Some((_, password)) = p.userinfo.and_then(|u| u.split_once(':')) {
        found.push(password.to_owned());
    }
    let query = p.rest.split_once('?').map_or("", |(_, q)| q);
    let query = query.split('#').next().unwrap_or("");
    for pair in query.split('&') {
        if let Some((key, value)) = pair.split_once('=') {
            if SECRET_QUERY_KEYS.contains(&key) {
                found.push(value.to_owned());
            }
        }
    }
    let decoded: Vec<String> = found.iter().map(|s| percent_decoded(s)).collect();
    found.extend(decoded);
    found.retain(|s| !s.is_empty());
    // The longest first: a secret that contains another is hidden whole.
    found.sort_by_key(|s| std::cmp::Reverse(s.len()));
    found.dedup();
    found
}

/// `s` with its `%XX` escapes decoded (and `+` kept as written).
fn percent_decoded(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                let v = hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0);
                out.push(u8::try_from(v).unwrap_or(b'?'));
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `text` with every secret of `url` replaced by `***`: what a message
/// that quotes a client's error shows.
pub(crate) fn scrub(text: &str, url: &str) -> String {
    secrets(url).iter().fold(text.to_owned(), |t, secret| {
        t.replace(secret.as_str(), "***")
    })
}

/// `url` without its password: `redis://app:***@cache:6379`, and `***`
/// for the values of `pass`, `password` and `token` query parts.
fn shown(url: &str) -> String {
    let Some(p) = parts(url) else {
        return scrub(url, url);
    };
    let authority = match p.userinfo {
        Some(userinfo) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:***@{}", p.host_port),
            None => p.authority.to_owned(),
        },
        None => p.authority.to_owned(),
    };
    let rest = match p.rest.split_once('?') {
        Some((path, query)) => {
            let (query, fragment) = match query.split_once('#') {
                Some((q, f)) => (q, Some(f)),
                None => (query, None),
            };
            let query: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((key, _)) if SECRET_QUERY_KEYS.contains(&key) => format!("{key}=***"),
                    _ => pair.to_owned(),
                })
                .collect();
            let fragment = fragment.map_or(String::new(), |f| format!("#{f}"));
            format!("{path}?{}{fragment}", query.join("&"))
        }
        None => p.rest.to_owned(),
    };
    scrub(&format!("{}://{authority}{rest}", p.scheme), url)
}

/// What is wrong with a `redis://` URL, said by its part, never echoing
/// its user info; `None` when its parts look right (the client has the
/// last word).
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
fn wrong_part(url: &str) -> Option<String> {
    let Some(p) = parts(url) else {
        return Some("has no scheme: write it `redis://host:port` (or `unix:///path`)".into());
    };
    let scheme = p.scheme;
    if ![
        "redis",
        "rediss",
        "valkey",
        "valkeys",
        "unix",
        "redis+unix",
        "valkey+unix",
    ]
    .contains(&scheme)
    {
        return Some(format!(
            "has the scheme `{scheme}`: it must be `redis://` (or `rediss://`, `unix://`)"
        ));
    }
    if scheme.ends_with("unix") {
        return None;
    }
    let host_port = p.host_port;
    let (host, port) = if let Some(v6) = host_port.strip_prefix('[') {
        match v6.split_once(']') {
            Some((host, rest)) => (host, rest.strip_prefix(':')),
            None => return Some("has an IPv6 host without its closing `]`".into()),
        }
    } else {
        match host_port.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (host_port, None),
        }
    };
    if host.is_empty() {
        return Some("has no host: write it `redis://host:port`".into());
    }
    if let Some(port) = port {
        if port.is_empty()
            || !port.bytes().all(|b| b.is_ascii_digit())
            || port.parse::<u16>().is_err()
        {
            let at = if p.userinfo.is_some() {
                " (after the `@`)"
            } else {
                ""
            };
            return Some(format!(
                "has a port{at} that is not a number in 0..=65535: `{port}`"
            ));
        }
    }
    let path = p
        .rest
        .split(['?', '#'])
        .next()
        .unwrap_or("")
        .trim_matches('/');
    if !path.is_empty() && path.parse::<i64>().is_err() {
        return Some(format!(
            "has a path that is not a database number: `/{path}` (write `/0`..`/15`, or nothing)"
        ));
    }
    None
}

#[cfg(feature = "redis")]
fn check_url(url: &str) -> Result<(), String> {
    const SHAPE: &str = "must be a Redis URL, `redis://[user:password@]host[:port][/db]`";
    if let Some(wrong) = wrong_part(url) {
        return Err(format!("{SHAPE}; this one {wrong}"));
    }
    // The client's words name the part it refused; a secret it quoted is
    // hidden.
    ::redis::Client::open(url)
        .map(drop)
        .map_err(|e| scrub(&format!("{SHAPE}: {e}"), url))
}

/// What a cluster's node URL cannot have: a database other than 0 (a
/// Redis Cluster has only that one), or a Unix socket (the client reaches
/// the other nodes by the addresses the cluster gives, host and port).
fn check_cluster_url(url: &str) -> Result<(), String> {
    let Some(p) = parts(url) else {
        return Ok(());
    };
    if p.scheme.ends_with("unix") {
        return Err(
            "is a Unix socket, and `cluster = true` needs a node's `redis://host:port`".into(),
        );
    }
    let db = p
        .rest
        .split(['?', '#'])
        .next()
        .unwrap_or("")
        .trim_matches('/');
    match db.parse::<i64>() {
        Ok(n) if n != 0 => Err(format!(
            "names database {n}, and a Redis Cluster has only database 0: remove `/{db}` (or set `cluster = false`)"
        )),
        _ => Ok(()),
    }
}

#[cfg(not(feature = "redis"))]
fn check_url(_url: &str) -> Result<(), String> {
    Err("needs the `redis` feature of resilient-core: add `features = [\"redis\"]` to its dependency".into())
}

/// The Redis section of a registry, as its specs find it in the registry's
/// [`Context`].
#[derive(Debug)]
pub(crate) struct RedisPart {
    /// The URL, without its password.
    pub(crate) shown: String,
    /// What the startup check tried and found, when `require_at_startup`
    /// is set and Redis did not answer.
    pub(crate) unreachable: Option<String>,
    #[cfg(feature = "redis")]
    backend: Arc<redis::RedisBackend>,
}

inventory::submit! {
    SectionEntry {
        name: "Redis backend",
        path: RedisSettings::PATH,
        build: build_redis,
        unused: unused_redis,
        snapshot: snapshot_redis,
        recent: recent_redis,
    }
}

/// The Redis backend's part of the snapshot.
fn snapshot_redis(
    part: &(dyn Any + Send + Sync),
    sections: &[(&'static str, &'static str, &Value)],
) -> Option<BackendSnapshot> {
    #[cfg(feature = "redis")]
    {
        let part = part.downcast_ref::<RedisPart>()?;
        Some(part.backend.snapshot(users(sections)))
    }
    #[cfg(not(feature = "redis"))]
    {
        let _ = (part, sections);
        None
    }
}

/// The Redis backend's recent events newer than `after`.
fn recent_redis(part: &(dyn Any + Send + Sync), after: u64, out: &mut Vec<Recorded>) {
    #[cfg(feature = "redis")]
    if let Some(part) = part.downcast_ref::<RedisPart>() {
        part.backend.recent(after, out);
    }
    #[cfg(not(feature = "redis"))]
    {
        let _ = (part, after, out);
    }
}

/// Reads `resilient.redis` (optional) and makes its backend, not
/// connected yet; with `require_at_startup`, checks that Redis answers.
fn build_redis(
    root: &Value,
    problems: &mut Vec<Problem>,
    listeners: &Arc<Listeners>,
    switches: Switches,
) -> Option<Arc<dyn Any + Send + Sync>> {
    let before = problems.len();
    let mut section = Section::optional("Redis backend", RedisSettings::PATH, root, problems);
    if !section.exists() {
        hide_secrets(root, &mut problems[before..]);
        return None;
    }
    let settings = RedisSettings::read(&mut section);
    section.finish();
    // A URL under another key, or the section written as a URL: whatever
    // a problem echoes, no password of it.
    hide_secrets(root, &mut problems[before..]);
    let settings = settings?;
    let shown = settings.shown_url();
    #[cfg(feature = "redis")]
    {
        match redis::RedisBackend::new(settings, listeners, switches) {
            Ok(backend) => {
                let unreachable = if backend.settings().require_at_startup {
                    let pinged = backend.ping_blocking();
                    backend.checked(pinged.is_ok());
                    pinged.err()
                } else {
                    None
                };
                Some(Arc::new(RedisPart {
                    shown,
                    unreachable,
                    backend: Arc::new(backend),
                }))
            }
            Err(rule) => {
                problems.push(Problem {
                    spec: "Redis backend",
                    path: RedisSettings::PATH,
                    key: "url".into(),
                    rule,
                    found: None,
                });
                None
            }
        }
    }
    #[cfg(not(feature = "redis"))]
    {
        // `check_url` refused every URL already; nothing gets here.
        let _ = (listeners, switches);
        Some(Arc::new(RedisPart {
            shown,
            unreachable: None,
        }))
    }
}

/// Hides in `problems` the secrets of every text written in the section
/// `resilient.redis` of `root`.
fn hide_secrets(root: &Value, problems: &mut [Problem]) {
    fn texts<'v>(v: &'v Value, out: &mut Vec<&'v str>) {
        match v {
            Value::Str(s) => out.push(s),
            Value::List(l) => l.iter().for_each(|v| texts(v, out)),
            Value::Table(t) => t.values().for_each(|v| texts(v, out)),
            _ => {}
        }
    }
    let mut written = Vec::new();
    if let Some(section) = crate::settings::at(root, RedisSettings::PATH) {
        texts(section, &mut written);
    }
    for p in problems {
        for url in &written {
            p.rule = scrub(&p.rule, url);
            p.found = p.found.as_deref().map(|f| scrub(f, url));
        }
    }
}

/// A problem with a spec's `backend = "redis"` in the registry `context`
/// (as key and rule): no Redis section, or a Redis that had to answer at
/// startup and did not.
pub(crate) fn check_redis(context: &Context) -> Option<(&'static str, String)> {
    match context.get::<RedisPart>() {
        // Present and invalid: its own problems say what to change.
        None if context.present(RedisSettings::PATH) => None,
        None => Some((
            "backend",
            match context.near(RedisSettings::PATH) {
                Some(near) => format!(
                    "is \"redis\", and the configuration has no `[{path}]` section; did you mean `[{near}]`? (the section must be at `{path}`)",
                    path = RedisSettings::PATH
                ),
                None => format!(
                    "is \"redis\", and the configuration has no `[{}]` section: add one with the server's `url` (the registry connects once for every spec that uses it)",
                    RedisSettings::PATH
                ),
            },
        )),
        Some(part) => part.unreachable.as_ref().map(|tried| {
            (
                "backend",
                format!(
                    "uses Redis at {}, which did not answer: {tried} (`{}.require_at_startup` is true; set it to false to start without Redis, the spec's `on_backend_failure` then applies until it answers)",
                    part.shown,
                    RedisSettings::PATH
                ),
            )
        }),
    }
}

/// The WARN of a Redis section that no spec uses (none of `sections` says
/// `backend = "redis"`, nor `retry_budget.backend = "redis"`): harmless,
/// since nothing connects, but most likely a backend meant and not set.
fn unused_redis(sections: &[&Value]) -> Option<String> {
    let redis = |v: Option<&Value>| matches!(v, Some(Value::Str(s)) if s == "redis");
    let used = sections.iter().any(|raw| {
        redis(crate::settings::at(raw, "backend"))
            || redis(crate::settings::at(raw, "retry_budget.backend"))
    });
    (!used).then(|| {
        format!(
            "`{}` has no effect: no spec says `backend = \"redis\"` (a rate limiter's, or a retry spec's `retry_budget.backend`), so every limit and budget is kept in this process; set `backend = \"redis\"` on the specs replicas must share, or remove the section",
            RedisSettings::PATH
        )
    })
}

/// One decision a rate limiter asks of a backend, in whole µs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ask {
    /// `limit` permits per window of `period_us`.
    FixedWindow { limit: u64, period_us: u64 },
    /// A permit every `interval_us`, up to `tolerance_us` ahead of time.
    TokenBucket { interval_us: u64, tolerance_us: u64 },
}

/// The largest number a script takes: sums with the server's clock (in µs,
/// about 2^51 today) stay exact in Lua's doubles.
pub(crate) const MAX_ARG: u64 = 1 << 50;

/// `d` in whole µs, rounded down, at most [`MAX_ARG`].
pub(crate) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros())
        .unwrap_or(u64::MAX)
        .min(MAX_ARG)
}

impl Ask {
    /// `limit` permits per window of `period`.
    pub(crate) fn fixed_window(limit: u32, period: Duration) -> Self {
        Self::FixedWindow {
            limit: u64::from(limit),
            period_us: micros(period).max(1),
        }
    }

    /// `limit` permits per `period`, coming back one by one: the interval
    /// rounded up to a whole µs (never more than the rate), the burst of
    /// `limit` counted in that interval.
    pub(crate) fn token_bucket(limit: u32, period: Duration) -> Self {
        let interval = period.as_nanos().div_ceil(u128::from(limit.max(1)) * 1000);
        let interval_us = u64::try_from(interval).unwrap_or(MAX_ARG).clamp(1, MAX_ARG);
        Self::TokenBucket {
            interval_us,
            tolerance_us: interval_us
                .saturating_mul(u64::from(limit.saturating_sub(1)))
                .min(MAX_ARG),
        }
    }
}

/// A backend's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) enum Answer {
    /// A permit, due after the wait.
    Admitted(Duration),
    /// No permit within `max_wait`; one would be free after this long.
    Refused(Duration),
}

/// What a backend answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) struct Decision {
    /// Whether a permit was given.
    pub(crate) admitted: bool,
    /// Admitted: the wait until it is due; refused: until one would be.
    pub(crate) wait: Duration,
    /// Permits given (0 when refused; more than 1 only due now).
    pub(crate) granted: u64,
    /// How long the permits given due now stay valid.
    pub(crate) valid: Duration,
}

/// One run of a retry budget's script (see `budget`).
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) struct BudgetAsk {
    pub(crate) max: u64,
    pub(crate) initial: u64,
    pub(crate) per_second: u64,
    /// Millionths of a token deposited since the last decision.
    pub(crate) deposit: u64,
    /// Whether a token is withdrawn.
    pub(crate) want: bool,
}

/// What the script answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) struct BudgetAnswer {
    /// A token was withdrawn.
    pub(crate) granted: bool,
    /// Millionths of a token left.
    pub(crate) tokens: u64,
}

/// The backend made no decision: down, slow, or its breaker open. It says
/// no more: when the backend answers again is not known (a call refused
/// for it has no `retry_after` to promise).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Unavailable;

/// Where one limiter's state lives in the backend: a key per algorithm and
/// parameters, so that a reload that changes them starts afresh there (as a
/// new `type` does in the process), and replicas running other settings
/// during a rollout count apart.
#[derive(Debug)]
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) struct Keys {
    /// `{prefix:path}`, or `{prefix:path:key:K}` for the instance of key
    /// `K` (written as `key_text` says): the braces keep a limiter's keys
    /// in one Redis Cluster slot.
    tag: Box<str>,
}

#[cfg_attr(not(feature = "redis"), allow(dead_code))]
impl Keys {
    fn new(prefix: &str, path: &str, key: Option<KeyRef<'_>>) -> Self {
        let tag = match key {
            None => format!("{{{prefix}:{path}}}"),
            Some(key) => format!("{{{prefix}:{path}:key:{}}}", key_text::redis_text(key)),
        };
        Self { tag: tag.into() }
    }

    /// The key of `ask`: `{prefix:path}:fixed_window:100:1000000` (limit,
    /// period in µs), `{prefix:path}:token_bucket:10000:990000` (interval
    /// and burst tolerance in µs).
    pub(crate) fn of(&self, ask: &Ask) -> String {
        match ask {
            Ask::FixedWindow { limit, period_us } => {
                format!("{}:fixed_window:{limit}:{period_us}", self.tag)
            }
            Ask::TokenBucket {
                interval_us,
                tolerance_us,
            } => format!("{}:token_bucket:{interval_us}:{tolerance_us}", self.tag),
        }
    }

    /// The key `name` of this spec: `{prefix:path}:name`.
    pub(crate) fn named(&self, name: &str) -> String {
        format!("{}:{name}", self.tag)
    }
}

/// A limiter's way to its backend: the backend, its keys there, and what
/// this process holds of the shared state: permits leased, and the instant
/// before which the backend said no permit is free.
#[derive(Debug)]
pub(crate) struct Remote {
    #[cfg(feature = "redis")]
    backend: Arc<redis::RedisBackend>,
    keys: Arc<Keys>,
    /// Permits given by one decision beyond the caller's, for the calls
    /// that follow: their expiry in ms of the limiter's clock (high 44
    /// bits), and their count (low 20).
    leased: AtomicU64,
    /// In ns of the limiter's clock: no permit is due before it (a
    /// refusal said so); a call whose `max_wait` ends earlier is refused
    /// here, as the backend would refuse it.
    free_at: AtomicU64,
    /// In ns of the limiter's clock: until when a kept refusal is trusted
    /// ([`REFUSAL_KEPT`] after it was asked): a key reset by hand, or a
    /// Redis restarted empty, is seen that soon.
    trusted_until: AtomicU64,
    /// Bumped by [`forget`](Self::forget): a decision asked before does not
    /// keep its lease or refusal for the settings after.
    epoch: AtomicU64,
    /// One decision at a time per limiter: the calls that wait meanwhile
    /// are merged into the next one (it asks for as many permits).
    turn: tokio::sync::Mutex<()>,
    waiting: AtomicU64,
    /// Failed decisions: a call that waited for its turn while one failed
    /// takes that failure instead of trying again.
    failures: AtomicU64,
}

/// How long a refusal is kept without asking Redis again.
const REFUSAL_KEPT: Duration = Duration::from_millis(100);

/// Takes a waiting caller off the count when it stops waiting for its
/// turn, however it stops (its future dropped, say).
struct Waiting<'a>(&'a AtomicU64);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

const LEASE_BITS: u32 = 20;
const LEASE_MASK: u64 = (1 << LEASE_BITS) - 1;

/// How a limiter reads its clock (ns).
pub(crate) type Now<'a> = &'a (dyn Fn() -> u64 + Sync);

impl Remote {
    fn with(#[cfg(feature = "redis")] backend: Arc<redis::RedisBackend>, keys: Keys) -> Self {
        Self {
            #[cfg(feature = "redis")]
            backend,
            keys: Arc::new(keys),
            leased: AtomicU64::new(0),
            free_at: AtomicU64::new(0),
            trusted_until: AtomicU64::new(0),
            epoch: AtomicU64::new(0),
            turn: tokio::sync::Mutex::new(()),
            waiting: AtomicU64::new(0),
            failures: AtomicU64::new(0),
        }
    }

    /// The way to the Redis backend of the registry `context`, for the
    /// spec at `path` (and its instance for `key`); `None` without one.
    pub(crate) fn of(context: &Context, path: &str, key: Option<KeyRef<'_>>) -> Option<Self> {
        let part = context.get::<RedisPart>()?;
        #[cfg(feature = "redis")]
        {
            let keys = Keys::new(&part.backend.settings().key_prefix, path, key);
            Some(Self::with(Arc::clone(&part.backend), keys))
        }
        #[cfg(not(feature = "redis"))]
        {
            let _ = (part, path, key);
            None
        }
    }

    /// The same backend, for the instance of `key` of the same spec.
    pub(crate) fn for_key(&self, path: &str, key: KeyRef<'_>) -> Self {
        #[cfg(feature = "redis")]
        {
            let keys = Keys::new(&self.backend.settings().key_prefix, path, Some(key));
            Self::with(Arc::clone(&self.backend), keys)
        }
        #[cfg(not(feature = "redis"))]
        {
            Self::with(Keys::new("", path, Some(key)))
        }
    }

    /// Forgets what this process holds (new settings: the leased permits
    /// and the refusal were of the old ones).
    pub(crate) fn forget(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        self.clear();
    }

    fn clear(&self) {
        self.leased.store(0, Ordering::SeqCst);
        self.trusted_until.store(0, Ordering::SeqCst);
        self.free_at.store(0, Ordering::SeqCst);
    }

    /// A decision without a round trip, at `now` (ns): `Ok` for a leased
    /// permit, `Err` with the time until one is free when the backend said
    /// none is due within `max_wait`; `None`: the backend decides.
    #[inline]
    pub(crate) fn at_hand(&self, now: u64, max_wait: Duration) -> Option<Result<(), Duration>> {
        let now_ms = now / 1_000_000;
        let leased = self
            .leased
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                (w & LEASE_MASK > 0 && now_ms < w >> LEASE_BITS).then(|| w - 1)
            });
        if leased.is_ok() {
            return Some(Ok(()));
        }
        if now >= self.trusted_until.load(Ordering::Acquire) {
            return None;
        }
        let free_at = self.free_at.load(Ordering::Acquire);
        let max_wait = u64::try_from(max_wait.as_nanos()).unwrap_or(u64::MAX);
        (now.saturating_add(max_wait) < free_at).then(|| Err(Duration::from_nanos(free_at - now)))
    }

    /// Keeps what `decision`, asked at `sent` (ns) in `epoch`, says for the
    /// calls that follow: permits beyond the caller's, until they expire;
    /// or the instant before which none is due. Nothing, when the settings
    /// changed since it was asked.
    fn keep(&self, sent: u64, epoch: u64, decision: &Decision) {
        if self.epoch.load(Ordering::SeqCst) != epoch {
            return;
        }
        if !decision.admitted {
            let wait = u64::try_from(decision.wait.as_nanos()).unwrap_or(u64::MAX);
            let kept = u64::try_from(REFUSAL_KEPT.as_nanos()).unwrap_or(u64::MAX);
            self.free_at
                .store(sent.saturating_add(wait), Ordering::SeqCst);
            self.trusted_until
                .store(sent.saturating_add(wait.min(kept)), Ordering::SeqCst);
        } else if decision.wait.is_zero() && decision.granted > 1 {
            let valid = u64::try_from(decision.valid.as_nanos()).unwrap_or(u64::MAX);
            let expiry_ms = sent.saturating_add(valid) / 1_000_000;
            let count = (decision.granted - 1).min(LEASE_MASK);
            self.leased.store(
                (expiry_ms.min(u64::MAX >> LEASE_BITS) << LEASE_BITS) | count,
                Ordering::SeqCst,
            );
        } else {
            return;
        }
        // A `forget` meanwhile: what was just kept is of the old settings.
        if self.epoch.load(Ordering::SeqCst) != epoch {
            self.clear();
        }
    }

    /// Asks the backend for one permit due within `max_wait`, and for up to
    /// `lease` (or as many as calls wait for their turn) due now, which
    /// this process hands out to the calls that follow.
    pub(crate) async fn decide(
        &self,
        ask: Ask,
        max_wait: Duration,
        lease: u64,
        now: Now<'_>,
    ) -> Result<Answer, Unavailable> {
        let epoch = self.epoch.load(Ordering::SeqCst);
        let failures = self.failures.load(Ordering::Acquire);
        self.waiting.fetch_add(1, Ordering::AcqRel);
        let counted = Waiting(&self.waiting);
        let turn = self.turn.lock().await;
        drop(counted);
        // The callers still waiting for their turn: merged into this one.
        let waiting = self.waiting.load(Ordering::Acquire);
        if let Some(at_hand) = self.at_hand(now(), max_wait) {
            return Ok(match at_hand {
                Ok(()) => Answer::Admitted(Duration::ZERO),
                Err(wait) => Answer::Refused(wait),
            });
        }
        if self.failures.load(Ordering::Acquire) != failures {
            return Err(self.backend_unavailable());
        }
        let want = lease.max(waiting + 1).min(LEASE_MASK);
        let sent = now();
        let decision = self.ask_backend(ask, max_wait, want).await;
        let answer = self.answer(sent, epoch, decision);
        drop(turn);
        answer
    }

    /// As [`decide`](Self::decide), blocking the thread; merged with no
    /// other call.
    pub(crate) fn decide_blocking(
        &self,
        ask: Ask,
        max_wait: Duration,
        lease: u64,
        now: Now<'_>,
    ) -> Result<Answer, Unavailable> {
        let epoch = self.epoch.load(Ordering::SeqCst);
        if let Some(at_hand) = self.at_hand(now(), max_wait) {
            return Ok(match at_hand {
                Ok(()) => Answer::Admitted(Duration::ZERO),
                Err(wait) => Answer::Refused(wait),
            });
        }
        let sent = now();
        #[cfg(feature = "redis")]
        let decision =
            self.backend
                .decide_blocking(&self.keys, ask, max_wait, lease.min(LEASE_MASK));
        #[cfg(not(feature = "redis"))]
        let decision = {
            let _ = (ask, max_wait, lease);
            Err(self.backend_unavailable())
        };
        self.answer(sent, epoch, decision)
    }

    fn answer(
        &self,
        sent: u64,
        epoch: u64,
        decision: Result<Decision, Unavailable>,
    ) -> Result<Answer, Unavailable> {
        match decision {
            Ok(decision) => {
                self.keep(sent, epoch, &decision);
                Ok(if decision.admitted {
                    Answer::Admitted(decision.wait)
                } else {
                    Answer::Refused(decision.wait)
                })
            }
            Err(unavailable) => {
                self.failures.fetch_add(1, Ordering::AcqRel);
                Err(unavailable)
            }
        }
    }

    async fn ask_backend(
        &self,
        ask: Ask,
        max_wait: Duration,
        want: u64,
    ) -> Result<Decision, Unavailable> {
        #[cfg(feature = "redis")]
        {
            self.backend.decide(&self.keys, ask, max_wait, want).await
        }
        #[cfg(not(feature = "redis"))]
        {
            let _ = (ask, max_wait, want, &self.keys);
            Err(self.backend_unavailable())
        }
    }

    fn backend_unavailable(&self) -> Unavailable {
        #[cfg(feature = "redis")]
        {
            self.backend.unavailable()
        }
        #[cfg(not(feature = "redis"))]
        {
            Unavailable
        }
    }
}
