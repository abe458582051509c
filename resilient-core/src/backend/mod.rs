//! Shared backends: rate limiters whose permits live outside the process,
//! so that every replica of a service draws on one limit.
//!
//! A rate limiter spec names its backend in its section; the connection is
//! set once, for the whole registry, in the section `resilient.redis`:
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
//! A decision costs one round trip. See [`RedisSettings`] for the
//! connection's settings and the `redis` feature of this crate.

#[cfg(feature = "redis")]
pub(crate) mod redis;

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use crate::registry::{Context, SectionEntry};
use crate::settings::{Problem, Section, Value};
use crate::telemetry::{Listeners, Switches};

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
    /// The call is refused, as by a limit with no permit left (Kora's
    /// behaviour).
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

/// The settings of the Redis backend, the section `resilient.redis`.
///
/// | key | default | rule |
/// |---|---|---|
/// | `url` | required | `redis://[user:password@]host[:port][/db]` or `unix:///path` |
/// | `timeout` | `"50ms"` | duration in [1ms, 1h]: how long one decision may take before `on_backend_failure` applies |
/// | `connect_timeout` | `"1s"` | duration in [1ms, 1h]: how long a connection may take to open |
/// | `key_prefix` | `"resilient"` | text without `{`, `}` or spaces: the first part of every key (two services share a limit when prefix and spec path agree) |
/// | `require_at_startup` | `false` | `true`: the registry is not built while Redis does not answer a `PING` |
///
/// The backend's own failures go through a circuit breaker (count window of
/// the last 10 decisions, opens at 50% failures after 5, open for 1 s, then
/// one probe): while it is open, a decision costs one atomic load and the
/// policy applies at once.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct RedisSettings {
    /// Where Redis listens.
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
        let url = match url {
            Some(url) => match check_url(&url) {
                Ok(()) => Some(url),
                Err(rule) => {
                    s.invalid("url", rule);
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
        })
    }

    /// The URL as logs and messages show it: without its password.
    pub fn shown_url(&self) -> String {
        shown(&self.url)
    }
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

/// `url` without its password.
fn shown(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let user = &url[scheme + 3..at];
            let user = user.split(':').next().unwrap_or("");
            format!("{}{user}:***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(feature = "redis")]
fn check_url(url: &str) -> Result<(), String> {
    ::redis::Client::open(url)
        .map(drop)
        .map_err(|e| format!("must be a Redis URL (`redis://host:port`): {e}"))
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
    let mut section = Section::optional("Redis backend", RedisSettings::PATH, root, problems);
    if !section.exists() {
        return None;
    }
    let settings = RedisSettings::read(&mut section);
    section.finish();
    let settings = settings?;
    let shown = settings.shown_url();
    #[cfg(feature = "redis")]
    {
        match redis::RedisBackend::new(settings, listeners, switches) {
            Ok(backend) => {
                let unreachable = if backend.settings().require_at_startup {
                    backend.ping_blocking().err()
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

/// A problem with a spec's `backend = "redis"` in the registry `context`
/// (as key and rule): no Redis section, or a Redis that had to answer at
/// startup and did not.
pub(crate) fn check_redis(context: &Context) -> Option<(&'static str, String)> {
    match context.get::<RedisPart>() {
        // Present and invalid: its own problems say what to change.
        None if context.present(RedisSettings::PATH) => None,
        None => Some((
            "backend",
            format!(
                "is \"redis\", and the configuration has no `[{}]` section: add one with the server's `url` (the registry connects once for every spec that uses it)",
                RedisSettings::PATH
            ),
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

/// One decision a rate limiter asks of a backend, in its clock's units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ask {
    /// `limit` permits per window of `period`.
    FixedWindow { limit: u64, period: Duration },
    /// A permit every `interval`, up to `tolerance` ahead of time.
    TokenBucket {
        interval: Duration,
        tolerance: Duration,
    },
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

/// The backend made no decision: down, slow, or its breaker open.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Unavailable {
    /// How long until it is tried again (its breaker's wait), or its
    /// `timeout`.
    pub(crate) retry_after: Duration,
}

/// The keys of one limiter in the backend, one per algorithm (a reload
/// that changes `type` starts afresh, as the local limiter does).
#[derive(Debug)]
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) struct Keys {
    pub(crate) fixed_window: Box<str>,
    pub(crate) token_bucket: Box<str>,
}

impl Keys {
    /// The keys of the spec at `path`, of its instance for `key` if keyed:
    /// `{prefix:path}:fixed_window`. The braces keep a spec's keys in one
    /// Redis Cluster slot, and a keyed instance's in its own.
    fn new(prefix: &str, path: &str, key: Option<&str>) -> Self {
        let tag = match key {
            None => format!("{{{prefix}:{path}}}"),
            Some(key) => format!("{{{prefix}:{path}:key:{key}}}"),
        };
        Self {
            fixed_window: format!("{tag}:fixed_window").into(),
            token_bucket: format!("{tag}:token_bucket").into(),
        }
    }
}

/// A limiter's way to its backend: the backend and its keys there.
#[derive(Debug, Clone)]
pub(crate) struct Remote {
    #[cfg(feature = "redis")]
    backend: Arc<redis::RedisBackend>,
    keys: Arc<Keys>,
}

impl Remote {
    /// The way to the Redis backend of the registry `context`, for the
    /// spec at `path` (and its instance for `key`); `None` without one.
    pub(crate) fn of(context: &Context, path: &str, key: Option<&str>) -> Option<Self> {
        let part = context.get::<RedisPart>()?;
        #[cfg(feature = "redis")]
        {
            Some(Self {
                keys: Arc::new(Keys::new(&part.backend.settings().key_prefix, path, key)),
                backend: Arc::clone(&part.backend),
            })
        }
        #[cfg(not(feature = "redis"))]
        {
            let _ = (part, path, key);
            None
        }
    }

    /// The same backend, for the instance of `key` of the same spec.
    pub(crate) fn for_key(&self, path: &str, key: &str) -> Self {
        Self {
            #[cfg(feature = "redis")]
            backend: Arc::clone(&self.backend),
            #[cfg(feature = "redis")]
            keys: Arc::new(Keys::new(
                &self.backend.settings().key_prefix,
                path,
                Some(key),
            )),
            #[cfg(not(feature = "redis"))]
            keys: Arc::new(Keys::new("", path, Some(key))),
        }
    }

    /// Asks for one permit due within `max_wait`.
    pub(crate) async fn decide(&self, ask: Ask, max_wait: Duration) -> Result<Answer, Unavailable> {
        #[cfg(feature = "redis")]
        {
            self.backend.decide(&self.keys, ask, max_wait).await
        }
        #[cfg(not(feature = "redis"))]
        {
            let _ = (ask, max_wait, &self.keys);
            Err(Unavailable {
                retry_after: Duration::ZERO,
            })
        }
    }

    /// As [`decide`](Self::decide), blocking the thread.
    pub(crate) fn decide_blocking(
        &self,
        ask: Ask,
        max_wait: Duration,
    ) -> Result<Answer, Unavailable> {
        #[cfg(feature = "redis")]
        {
            self.backend.decide_blocking(&self.keys, ask, max_wait)
        }
        #[cfg(not(feature = "redis"))]
        {
            let _ = (ask, max_wait, &self.keys);
            Err(Unavailable {
                retry_after: Duration::ZERO,
            })
        }
    }
}
