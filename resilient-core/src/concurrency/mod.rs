//! Concurrency limit: at most `limit` calls of a spec run at once, or, with
//! `type = "adaptive"`, as many as the calls' latency shows the dependency
//! serves without a queue (see [`adaptive`]).
//!
//! ```
//! use resilient_core::ConcurrencyLimitSpec;
//!
//! #[derive(ConcurrencyLimitSpec)]
//! #[spec("resilient.concurrency.reviews")]
//! pub struct Reviews;
//! ```
//!
//! ```toml
//! [resilient.concurrency.reviews]
//! limit = 2
//! policy = "block"      # or "reject" (the default)
//! max_wait = "500ms"    # optional, with "block" only
//! ```
//!
//! One limiter per spec type, shared by every fn that names it. The permit is
//! held for the whole life of the call's future and released when it
//! completes, fails, panics or is dropped. Waiters are served first come,
//! first served.
//!
//! A `reject` limiter has no waiters, so it is one atomic counter: taking and
//! freeing a place is a compare-and-swap and a subtraction, with no lock. A
//! `block` limiter is tokio's fair semaphore; a call that finds a free place
//! takes it at once, and only a call that must wait allocates its wait.
//!
//! An adaptive limit (`type = "adaptive"`) takes its places the same way,
//! against a limit that one call per window recomputes from the calls'
//! latency; a `block` limiter's semaphore is resized when it moves, as a
//! reload resizes it. A fixed limit pays nothing for it: no clock read and
//! no atomic beyond those above.

pub mod adaptive;
mod estimate;

use std::future::Future;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use metrics::{Counter, Gauge};
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::time::Instant;

use self::adaptive::{Adaptive, AdaptiveSettings, Measured};
use crate::error::Error;
use crate::keyed::PartitionKey;
use crate::outcome::Fail;
use crate::registry::{CallInstance, Key, Mechanism, Part, Sealed, Shared, Spec, Tag, Versions};
use crate::settings::{Section, Value};
use crate::spec::SpecKind;
use crate::telemetry::{Outcome, Telemetry};

impl SpecKind {
    /// `#[derive(ConcurrencyLimitSpec)]`, used by `#[concurrency_limit]`.
    pub const CONCURRENCY_LIMIT: SpecKind = SpecKind::new("concurrency_limit", "concurrency limit");
}

/// A concurrency limit spec: implemented by `#[derive(ConcurrencyLimitSpec)]`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a concurrency limit spec",
    label = "`#[concurrency_limit]` needs a type declared with `#[derive(ConcurrencyLimitSpec)]`",
    note = "declare one with `#[derive(ConcurrencyLimitSpec)] #[spec(\"resilient.concurrency.name\")] pub struct Name;`",
    note = "each spec kind goes with its own attribute: `RetrySpec` with `#[retryable]`, `CircuitBreakerSpec` with `#[circuit_breakable]`, `TimeoutSpec` with `#[timeout]`, `ConcurrencyLimitSpec` with `#[concurrency_limit]`, `RateLimiterSpec` with `#[rate_limited]`, `ChaosSpec` with `#[chaos]`, `HedgingSpec` with `#[hedged]`"
)]
pub trait ConcurrencyLimitSpec: Spec<Mechanism = Limiter> + Sized {
    /// The spec's shared limiter, from the registry in use.
    ///
    /// # Errors
    ///
    /// [`Error::NotConfigured`] when the registry in use has no settings for
    /// this spec.
    fn get() -> Result<ConcurrencyLimitHandle<Self>, Error> {
        crate::registry::handle::<Self>().map(|inner| ConcurrencyLimitHandle {
            inner,
            _spec: PhantomData,
        })
    }
    /// The instance of `key` among the spec's keyed instances (see
    /// [`keyed`](crate::keyed)): the one `key = ..` in the attribute reaches
    /// for an equal key (equal texts, or equal numbers: a number and its
    /// text are two keys), made now if the key has none. While the handle
    /// lives, the key's instance is not evicted, and it holds one of the
    /// spec's `keys.max` places: take a handle to act on a key, not to look
    /// at every key (the snapshot's [`keys`](crate::SpecSnapshot::keys)
    /// shows them without making any). When `keys.max` keys are all held,
    /// a new key's handle is the spec's own instance, shared with every key
    /// that overflows.
    ///
    /// ```
    /// # use resilient_core::ConcurrencyLimitSpec;
    /// # #[derive(ConcurrencyLimitSpec)] #[spec("resilient.concurrency.tenant")] pub struct TenantLimit;
    /// # fn demo() -> Result<(), resilient_core::Error> {
    /// let places = TenantLimit::for_key(&42u32)?.in_use();
    /// # let _ = places; Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::NotConfigured`] when the registry in use has no settings for
    /// this spec.
    fn for_key(key: &(impl PartitionKey + ?Sized)) -> Result<ConcurrencyLimitHandle<Self>, Error> {
        key.with_key(crate::registry::handle_keyed::<Self>)
            .map(|inner| ConcurrencyLimitHandle {
                inner,
                _spec: PhantomData,
            })
    }
}

/// What a call does when every permit is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize),
    serde(rename_all = "snake_case", tag = "policy")
)]
pub enum Policy {
    /// Fail at once with [`Error::ConcurrencyLimitReached`].
    Reject,
    /// Wait for a permit, at most `max_wait` if set.
    Block {
        /// How long to wait before failing.
        #[cfg_attr(
            feature = "serde",
            serde(
                serialize_with = "crate::settings::ser::option_duration",
                skip_serializing_if = "Option::is_none"
            )
        )]
        max_wait: Option<Duration>,
    },
}

/// What every concurrency limit has, fixed or adaptive: its switch, its
/// policy, and its limit as one number (a fixed limit's `limit`, an
/// adaptive limit's `max`). Part of [`LimiterSettings`], which holds the
/// rest; what [`ConcurrencyLimitHandle::settings`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ConcurrencyLimitSettings {
    /// `false` turns the spec into a pass-through.
    pub enabled: bool,
    /// Calls that may run at once: `limit`, or with `type = "adaptive"` its
    /// `max` (the limit in force is [`ConcurrencyLimitHandle::limit`]).
    pub limit: u32,
    /// What a call does when every permit is taken.
    #[cfg_attr(feature = "serde", serde(flatten))]
    pub policy: Policy,
}

impl ConcurrencyLimitSettings {
    /// Reads and validates a concurrency limit section (of either `type`),
    /// recording every problem found; the part every type has.
    pub fn read(s: &mut Section<'_>) -> Option<Self> {
        LimiterSettings::read(s).map(|l| l.common)
    }
}

/// The settings of one concurrency limit spec, read from its section.
///
/// | key | default | rule |
/// |---|---|---|
/// | `enabled` | `true` | `false` makes the spec a pass-through (still validated) |
/// | `type` | `"fixed"` | `"fixed"` (`limit` calls at once) or `"adaptive"` (a limit found from latency, between `min` and `max`, with keys of its own: see the adaptive limit) |
/// | `limit` | required with `type = "fixed"` | whole number in 1..=536870911: calls that may run at once |
/// | `policy` | `"reject"` | `"reject"` (fail at once when full) or `"block"` (wait for a permit) |
/// | `max_wait` | none | duration > 0, with `policy = "block"` only: how long to wait before failing |
/// | `retry_header` | none | an HTTP header name (`"x-retry-attempt"`): the header in which a request announces the attempts made before it; a request that announces one or more is refused at once when the limit is full, and never waits (read by the layers on `http::Request`s that are applied with `reading_retry_header`, not by the attribute) |
/// | `retry_share` | none | number > 0 and < 1, with `retry_header` only: a retry is admitted only while fewer than this share of the limit's places (rounded down) are in use, so that first calls find the rest free |
///
/// The keys of one type are problems under the other: `limit` with
/// `type = "adaptive"`, `min` with `type = "fixed"`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LimiterSettings {
    /// The switch, the policy, and the limit as one number.
    pub common: ConcurrencyLimitSettings,
    /// `type = "adaptive"`: how the limit is found; `None` for a fixed
    /// limit.
    pub adaptive: Option<AdaptiveSettings>,
    /// `retry_header` (and `retry_share`): how the retries that requests
    /// announce are treated; `None` when no header is read.
    pub retries: Option<RetryShedding>,
}

/// How a concurrency limit treats the requests that announce themselves as
/// retries (`retry_header`, `retry_share`): see the guide's chapter on the
/// concurrency limit.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct RetryShedding {
    /// The header's name, in lower case (`retry_header`).
    #[cfg_attr(feature = "serde", serde(rename = "retry_header"))]
    pub header: &'static str,
    /// The share of the places retries may fill (`retry_share`); `None`:
    /// every place, while one is free.
    #[cfg_attr(
        feature = "serde",
        serde(rename = "retry_share", skip_serializing_if = "Option::is_none")
    )]
    pub share: Option<f64>,
}

impl RetryShedding {
    /// The places a retry may be admitted into under `limit`: the share of
    /// the limit, rounded down, or the whole limit without a share.
    #[inline]
    pub fn places(&self, limit: u32) -> u32 {
        match self.share {
            // A float's cast saturates: no overflow, whatever the limit.
            Some(share) => ((f64::from(limit) * share).floor() as u32).min(limit),
            None => limit,
        }
    }
}

/// Headers that count the attempt itself (1 on a first try), which
/// `retry_header` cannot read: every request would read as a retry.
const COUNTS_ITSELF: &[&str] = &["x-envoy-attempt-count"];

/// Whether `c` may stand in an HTTP header name (RFC 9110's `tchar`).
fn header_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

/// A header name kept for the life of the process, once per distinct name:
/// settings are `Copy`, and a reload that keeps the name keeps the same
/// text.
fn interned(name: String) -> &'static str {
    static NAMES: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    let mut names = NAMES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(known) = names.iter().find(|n| **n == name) {
        return known;
    }
    let name: &'static str = Box::leak(name.into_boxed_str());
    names.push(name);
    name
}

/// Reads `retry_header` and `retry_share`, recording every problem found;
/// `Some(None)` when no header is set, the outer `None` on a problem.
/// `most`: the most places the limit can have, and whether it is an
/// adaptive limit's `max`.
fn read_retries(s: &mut Section<'_>, most: Option<(u64, bool)>) -> Option<Option<RetryShedding>> {
    let has_header = s.has("retry_header");
    let has_share = s.has("retry_share");
    let share = if has_share {
        let rule = "must be a number > 0 and < 1: the share of the limit's places a retry may be admitted into (`0.8`: retries are admitted while fewer than 80 % of the places are in use)";
        let percent = match s.value("retry_share") {
            Some(Value::Int(i)) if (2..=100).contains(i) => Some(*i as f64),
            Some(Value::Float(x)) if (2.0..=100.0).contains(x) && x.fract() == 0.0 => Some(*x),
            _ => None,
        };
        if let Some(p) = percent {
            s.invalid(
                "retry_share",
                format!(
                    "{rule}; it is a share, not a percent: write `{}` for {p} %",
                    p / 100.0
                ),
            );
            None
        } else if matches!(
            s.value("retry_share"),
            Some(Value::Int(1)) | Some(Value::Float(1.0))
        ) {
            s.invalid(
                "retry_share",
                format!("{rule}; `1` lets retries fill every place, as without `retry_share`: remove it"),
            );
            None
        } else {
            s.float("retry_share", None, rule, |x| x > 0.0 && x < 1.0)
                .map(Some)
        }
    } else {
        Some(None)
    };
    if !has_header {
        if has_share {
            s.invalid(
                "retry_share",
                "has no effect without `retry_header`, the header that tells a retry from a first call: set `retry_header`, or remove `retry_share`",
            );
            return None;
        }
        return Some(None);
    }
    let written = s.text("retry_header", None)?;
    let rule = "must be an HTTP header name (letters, digits and `!#$%&'*+-.^_`|~`, such as \"x-retry-attempt\"), written as a TOML string with no quotes inside";
    let quoted = written.len() >= 2
        && ["'", "`"]
            .iter()
            .any(|q| written.starts_with(q) && written.ends_with(q));
    if written.is_empty() || quoted || !written.chars().all(header_char) {
        s.invalid("retry_header", rule);
        return None;
    }
    let name = written.to_ascii_lowercase();
    if COUNTS_ITSELF.contains(&name.as_str()) {
        s.invalid(
            "retry_header",
            "counts the attempt itself (1 on a first try), so every request would read as a retry; `retry_header` reads a count of the attempts made before the request (0 or absent on a first call, 1 on the first retry), as gRPC's `grpc-previous-rpc-attempts` and this project's clients send",
        );
        return None;
    }
    let share = share?;
    if let (Some(share), Some((limit, adaptive))) = (share, most) {
        let retries = RetryShedding {
            header: "",
            share: Some(share),
        };
        if retries.places(u32::try_from(limit).unwrap_or(u32::MAX)) == 0 {
            let (places, raise) = if adaptive {
                (format!("even at its most, `max` = {limit} places"), "`max`")
            } else {
                (format!("{limit} places"), "the limit")
            };
            s.invalid(
                "retry_share",
                format!("leaves retries no place: {places} × {share} is less than one; raise `retry_share` or {raise}, or remove `retry_share` (retries then fill any free place)"),
            );
            return None;
        }
    }
    Some(Some(RetryShedding {
        header: interned(name),
        share,
    }))
}

impl Tag for LimiterSettings {}

/// The largest limit tokio's semaphore holds.
const LIMIT_MAX: u64 = (u32::MAX >> 3) as u64;

/// Reports `key` as a key of the other type, if it is there.
fn other_type(s: &mut Section<'_>, key: &'static str, rule: &str) {
    if s.present(key) {
        s.invalid(key, rule);
    }
}

impl LimiterSettings {
    /// Reads and validates a concurrency limit section, recording every
    /// problem found.
    pub fn read(s: &mut Section<'_>) -> Option<Self> {
        s.alias("max_wait_duration", "max_wait", |_| {
            "`max_wait` applies with `policy = \"block\"` only: Resilience4j's `max_wait_duration` is `policy = \"block\"` with `max_wait`, and its `0` is the default `policy = \"reject\"`".into()
        });
        let enabled = s.bool("enabled", true);
        let kind = s.choice("type", &["fixed", "adaptive"], "fixed");
        // `Some(None)`: a fixed limit; the outer `None`: a problem.
        let (limit, adaptive) = match kind {
            // The type itself is wrong (reported): leave the keys of both
            // types alone.
            None => {
                s.has("limit");
                for key in adaptive::KEYS {
                    s.present(key);
                }
                (None, None)
            }
            Some("adaptive") => {
                other_type(
                    s,
                    "limit",
                    "is not used by `type = \"adaptive\"`, whose limit moves between `min` and `max`; remove it (the cap is `max`), or set `type = \"fixed\"`",
                );
                let adaptive = AdaptiveSettings::read(s);
                (adaptive.map(|a| u64::from(a.max)), adaptive.map(Some))
            }
            Some(_) => {
                s.alias("max_concurrent_calls", "limit", |_| {
                    "the same number of calls at once under this project's name".into()
                });
                for key in adaptive::KEYS {
                    other_type(
                        s,
                        key,
                        "is not used by `type = \"fixed\"` (the default); remove it, or set `type = \"adaptive\"`",
                    );
                }
                (s.int("limit", None, 1, LIMIT_MAX), Some(None))
            }
        };
        // The most places the limit can have, for `retry_share`'s check:
        // a fixed limit's, an adaptive limit's `max`.
        let most = match &adaptive {
            Some(None) => limit.map(|l| (l, false)),
            Some(Some(a)) => Some((u64::from(a.max), true)),
            None => None,
        };
        let retries = read_retries(s, most);
        let policy = s.choice("policy", &["reject", "block"], "reject");
        let max_wait = s.duration("max_wait", false);
        let policy = match (policy?, max_wait) {
            ("reject", Some(Some(_))) => {
                s.invalid(
                    "max_wait",
                    "applies to `policy = \"block\"` only; set `policy = \"block\"`, or remove `max_wait`",
                );
                return None;
            }
            ("reject", _) => Policy::Reject,
            (_, Some(None)) => return None,
            (_, Some(Some(d))) if d.is_zero() => {
                s.invalid(
                    "max_wait",
                    "must be > 0 (with `policy = \"reject\"` a full limiter fails at once)",
                );
                return None;
            }
            (_, max_wait) => Policy::Block {
                max_wait: max_wait.flatten(),
            },
        };
        Some(Self {
            common: ConcurrencyLimitSettings {
                enabled: enabled?,
                limit: u32::try_from(limit?).ok()?,
                policy,
            },
            adaptive: adaptive?,
            retries: retries?,
        })
    }

    /// The limit a call starts under, before anything is measured.
    fn initial(&self) -> u32 {
        self.adaptive.map_or(self.common.limit, |a| a.initial)
    }
}

/// As the section is written: `type` with its own keys, then the policy.
#[cfg(feature = "serde")]
impl serde::Serialize for LimiterSettings {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(serde::Serialize)]
        #[serde(tag = "type", rename_all = "snake_case")]
        enum Type<'a> {
            Fixed { limit: u32 },
            Adaptive(&'a AdaptiveSettings),
        }
        #[derive(serde::Serialize)]
        struct Written<'a> {
            enabled: bool,
            #[serde(flatten)]
            kind: Type<'a>,
            #[serde(flatten)]
            policy: &'a Policy,
            #[serde(flatten, skip_serializing_if = "Option::is_none")]
            retries: &'a Option<RetryShedding>,
        }
        let kind = match &self.adaptive {
            None => Type::Fixed {
                limit: self.common.limit,
            },
            Some(a) => Type::Adaptive(a),
        };
        serde::Serialize::serialize(
            &Written {
                enabled: self.common.enabled,
                kind,
                policy: &self.common.policy,
                retries: &self.retries,
            },
            s,
        )
    }
}

/// The shared instance of one concurrency limit spec: its places, its
/// settings and its telemetry. Reached through a
/// [`ConcurrencyLimitHandle`].
#[derive(Debug)]
pub struct Limiter {
    config: Versions<LimiterSettings>,
    telemetry: Telemetry,
    /// `block`: the places, and the queue of waiters.
    semaphore: Semaphore,
    /// The limit the semaphore holds places for (whatever the policy, so
    /// that a reload to `block` finds it sized).
    semaphore_limit: AtomicU32,
    /// Places the semaphore holds beyond its limit, after a reload made the
    /// limit smaller while they were taken: each given back is dropped
    /// instead, until none is left.
    debt: AtomicU32,
    /// `reject`: the places taken.
    taken: AtomicU32,
    in_use: OnceLock<Gauge>,
    limit_gauge: OnceLock<Gauge>,
    /// Retries refused by `retry_header`: registered at the first, with
    /// the recorder current then.
    #[cfg_attr(not(all(feature = "tower", feature = "http")), allow(dead_code))]
    shed: OnceLock<Counter>,
    /// Whether a call whose door reads no header found a limit with a
    /// `retry_header` full (told once).
    unread_told: AtomicBool,
    /// `type = "adaptive"`: the limit in force and its measurements.
    adaptive: Adaptive,
}

/// A concurrency limit's places, in its part of the
/// [`Snapshot`](crate::Snapshot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Places {
    /// Places held now.
    pub permits_in_use: u32,
    /// Places in all: the limit in force (where an adaptive limit stands).
    pub permits_limit: u32,
    /// An adaptive limit's last measurements; `None` for a fixed limit, or
    /// before its first window closed.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub adaptive: Option<Measured>,
}

impl Sealed for Limiter {}

impl Mechanism for Limiter {
    const KIND: SpecKind = SpecKind::CONCURRENCY_LIMIT;
    const OUTCOMES: &'static [Outcome] = &[
        Outcome::Success,
        Outcome::Failure,
        Outcome::Rejected,
        Outcome::Cancelled,
    ];
    type Settings = LimiterSettings;

    fn read(section: &mut Section<'_>) -> Option<LimiterSettings> {
        LimiterSettings::read(section)
    }

    fn build(settings: LimiterSettings, telemetry: Telemetry) -> Self {
        Limiter::new(settings, telemetry)
    }

    fn reconfigure(&self, settings: LimiterSettings) -> Vec<String> {
        let was = *self.config.get();
        let mut notes = Vec::new();
        let limit = {
            // Held while the limit and the settings change: a window that
            // closes meanwhile sees both before or both after.
            let mut estimator = self.adaptive.lock();
            let limit = match (was.adaptive, settings.adaptive) {
                (_, None) => {
                    if was.adaptive.is_some() {
                        notes.push(format!(
                            "`type` is now \"fixed\": the limit is `limit` ({}), and the adaptive limit's measurements are dropped",
                            settings.common.limit
                        ));
                    }
                    settings.common.limit
                }
                (Some(old), Some(new)) => {
                    let before = estimator.limit();
                    estimator.clamp(new.bounds());
                    let kept = estimator.limit();
                    if kept != before {
                        notes.push(format!(
                            "the adaptive limit {before} is outside `min`..=`max` ({}..={}): it is now {kept}, its measurements kept",
                            new.min, new.max
                        ));
                    } else if old.initial != new.initial {
                        notes.push(format!(
                            "`initial` applies when a limit becomes adaptive: the running limit {kept} is kept, with its measurements"
                        ));
                    }
                    kept
                }
                (None, Some(new)) => {
                    self.adaptive
                        .restart(&mut estimator, new.initial, new.window, self.in_use());
                    notes.push(format!(
                        "`type` is now \"adaptive\": the limit starts at `initial` ({}) and is measured afresh",
                        new.initial
                    ));
                    new.initial
                }
            };
            self.adaptive.set_current(limit);
            self.resize(limit);
            self.config.publish(|c| *c == settings, || settings);
            limit
        };
        self.set_limit_gauge(limit);
        let policy = |p: Policy| match p {
            Policy::Reject => "reject",
            Policy::Block { .. } => "block",
        };
        if policy(was.common.policy) != policy(settings.common.policy) {
            notes.push(format!(
                "`policy` is now \"{}\": the calls in flight under \"{}\" keep their places there, and are not counted against the limit until they end",
                policy(settings.common.policy),
                policy(was.common.policy)
            ));
        }
        notes
    }

    fn settings(&self) -> &LimiterSettings {
        self.config.get()
    }

    fn telemetry(&self) -> &Telemetry {
        &self.telemetry
    }

    const KEYED: bool = true;

    fn evictable(&self) -> bool {
        self.in_use() == 0
    }

    fn status(&self) -> Option<Arc<dyn Part>> {
        Some(Arc::new(Places {
            permits_in_use: self.in_use(),
            permits_limit: self.limit(),
            adaptive: if self.config.get().adaptive.is_some() {
                self.adaptive.measured()
            } else {
                None
            },
        }))
    }

    fn telemetry_switched(&self) {
        self.register_meters();
    }
}

/// A place taken from a [`Limiter`], counted in its in-use gauge; dropping
/// it frees the place. Two words: the limiter, and what was taken from it (a
/// semaphore permit is forgotten when taken and given back here), so that a
/// call's guard stays small.
#[derive(Debug)]
struct Place<'a> {
    limiter: &'a Limiter,
    kind: Kind,
}

/// What a place holds, in one word beside the limiter: what was taken (the
/// low two bits), whether the call is an adaptive limit's sample (the next
/// bit), and for a sample that waited for its place, how long (µs, the
/// bits above). One scalar, as the plain enum it replaced, so that a fixed
/// limit's place is built, returned and matched as cheaply as before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Kind(u32);

impl Kind {
    /// The limiter is disabled: nothing was taken.
    const FREE: Kind = Kind(0);
    /// A place of a `reject` limiter's counter.
    const COUNTED: Kind = Kind(1);
    /// A permit of a `block` limiter's semaphore.
    const QUEUED: Kind = Kind(2);
    const TAKEN: u32 = 0b11;
    const SAMPLED: u32 = 0b100;
    const WAITED_SHIFT: u32 = 3;

    /// Whether a counter's place was taken.
    #[inline(always)]
    fn counted(self) -> bool {
        self.0 & Self::TAKEN == Self::COUNTED.0
    }

    /// Whether a semaphore's permit was taken.
    #[inline(always)]
    fn queued(self) -> bool {
        self.0 & Self::TAKEN == Self::QUEUED.0
    }

    /// Whether the call is an adaptive limit's sample.
    #[inline(always)]
    fn sampled(self) -> bool {
        self.0 & Self::SAMPLED != 0
    }

    /// The same place, a sample that waited `waited` µs for it; no sample
    /// if that does not fit (a wait of about nine minutes or more).
    fn sample(self, waited: u64) -> Kind {
        match u32::try_from(waited) {
            Ok(w) if w <= u32::MAX >> Self::WAITED_SHIFT => {
                Kind((self.0 & Self::TAKEN) | Self::SAMPLED | (w << Self::WAITED_SHIFT))
            }
            _ => self.unsampled(),
        }
    }

    /// For a sample: how long the call waited for its place, in µs.
    fn waited(self) -> u32 {
        self.0 >> Self::WAITED_SHIFT
    }

    /// The same place, no sample.
    fn unsampled(self) -> Kind {
        Kind(self.0 & Self::TAKEN)
    }
}

impl<'a> Place<'a> {
    #[inline(always)]
    fn new(limiter: &'a Limiter, kind: Kind) -> Self {
        // Made first: if counting it panics, its drop still frees it.
        let place = Self { limiter, kind };
        limiter.held(true);
        place
    }

    /// A semaphore permit, as a place.
    fn queued(limiter: &'a Limiter, permit: SemaphorePermit<'a>) -> Self {
        permit.forget();
        Self::new(limiter, Kind::QUEUED)
    }

    /// Whether the call is an adaptive limit's sample.
    #[inline(always)]
    fn sampled(&self) -> bool {
        self.kind.sampled()
    }
}

impl Drop for Place<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        // Counted out before it is freed: the gauge never shows more places
        // than the limit.
        self.limiter.held(false);
        if self.kind.counted() {
            self.limiter.taken.fetch_sub(1, Ordering::Release);
        } else if self.kind.queued() {
            self.limiter.give_back();
        }
    }
}

impl Limiter {
    pub(crate) fn new(settings: LimiterSettings, telemetry: Telemetry) -> Self {
        let limit = settings.initial();
        let window = settings.adaptive.map_or(Duration::ZERO, |a| a.window);
        let limiter = Self {
            telemetry,
            semaphore: Semaphore::new(limit as usize),
            semaphore_limit: AtomicU32::new(limit),
            debt: AtomicU32::new(0),
            taken: AtomicU32::new(0),
            config: Versions::new(settings),
            in_use: OnceLock::new(),
            limit_gauge: OnceLock::new(),
            shed: OnceLock::new(),
            unread_told: AtomicBool::new(false),
            adaptive: Adaptive::new(limit, window),
        };
        limiter.register_meters();
        limiter
    }

    /// Registers the gauges once metrics are switched on, set to the places
    /// held and the limit now.
    fn register_meters(&self) {
        if self.telemetry.metrics_on() {
            let gauge = self
                .in_use
                .get_or_init(|| self.telemetry.gauge("resilient_concurrency_in_use"));
            gauge.set(f64::from(self.in_use()));
            let limit = self
                .limit_gauge
                .get_or_init(|| self.telemetry.gauge("resilient_concurrency_limit"));
            limit.set(f64::from(self.limit()));
        }
    }

    /// The limit moved to `limit`: its gauge.
    fn set_limit_gauge(&self, limit: u32) {
        if self.telemetry.metrics_on() {
            if let Some(gauge) = self.limit_gauge.get() {
                gauge.set(f64::from(limit));
            }
        }
    }

    /// A place was taken (`true`) or freed: the in-use gauge.
    #[inline(always)]
    fn held(&self, taken: bool) {
        if self.telemetry.metrics_on() {
            if let Some(gauge) = self.in_use.get() {
                if taken {
                    gauge.increment(1.0);
                } else {
                    gauge.decrement(1.0);
                }
            }
        }
    }

    /// Sizes the semaphore's places to `limit`: more wake waiters at once;
    /// fewer are taken from the free places, and the rest from the places
    /// given back later (the debt).
    fn resize(&self, limit: u32) {
        let was = self.semaphore_limit.swap(limit, Ordering::AcqRel);
        if limit > was {
            let mut more = limit - was;
            // Places still owed are forgiven first.
            let _ = self
                .debt
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |d| {
                    let paid = d.min(limit - was);
                    more = limit - was - paid;
                    Some(d - paid)
                });
            self.semaphore.add_permits(more as usize);
        } else if limit < was {
            let fewer = was - limit;
            let forgotten = u32::try_from(self.semaphore.forget_permits(fewer as usize))
                .unwrap_or(fewer)
                .min(fewer);
            self.debt.fetch_add(fewer - forgotten, Ordering::AcqRel);
        }
    }

    /// A semaphore place comes back: into the semaphore, or against the
    /// debt of a limit made smaller.
    fn give_back(&self) {
        let owed = self
            .debt
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |d| d.checked_sub(1))
            .is_ok();
        if !owed {
            self.semaphore.add_permits(1);
        }
    }

    /// A place if one is free now; a call through it is an adaptive
    /// limit's sample if `settings` are adaptive.
    #[inline(always)]
    fn try_take(&self, settings: &LimiterSettings) -> Option<Place<'_>> {
        if !settings.common.enabled {
            return Some(Place::new(self, Kind::FREE));
        }
        if settings.adaptive.is_some() {
            return self.try_take_sampled(settings.common.policy);
        }
        match settings.common.policy {
            Policy::Reject => {
                let limit = settings.common.limit;
                self.taken
                    .fetch_update(Ordering::Acquire, Ordering::Relaxed, |n| {
                        (n < limit).then_some(n + 1)
                    })
                    .ok()
                    .map(|_| Place::new(self, Kind::COUNTED))
            }
            Policy::Block { .. } => self
                .semaphore
                .try_acquire()
                .ok()
                .map(|permit| Place::queued(self, permit)),
        }
    }

    /// [`try_take`](Self::try_take) for an adaptive limit, apart so that a
    /// fixed limit's stays as small as it was: against the limit in force,
    /// counting the places held for the window's peak.
    #[inline(never)]
    fn try_take_sampled(&self, policy: Policy) -> Option<Place<'_>> {
        match policy {
            Policy::Reject => {
                let limit = self.adaptive.current();
                let before = self
                    .taken
                    .fetch_update(Ordering::Acquire, Ordering::Relaxed, |n| {
                        (n < limit).then_some(n + 1)
                    })
                    .ok()?;
                let place = Place::new(self, Kind::COUNTED.sample(0));
                self.adaptive.held(before + 1);
                Some(place)
            }
            Policy::Block { .. } => {
                let permit = self.semaphore.try_acquire().ok()?;
                let mut place = Place::queued(self, permit);
                place.kind = place.kind.sample(0);
                self.adaptive.held(self.in_use());
                Some(place)
            }
        }
    }

    /// When a call under `settings` started, if it is timed: for the
    /// telemetry (metrics on), and always for an adaptive limit's sample.
    #[inline(always)]
    fn start(&self, settings: &LimiterSettings) -> Option<Instant> {
        if settings.adaptive.is_some() {
            Some(Instant::now())
        } else {
            self.telemetry.start()
        }
    }

    /// The limit in force under `settings`.
    #[inline]
    fn limit_of(&self, settings: &LimiterSettings) -> u32 {
        match settings.adaptive {
            None => settings.common.limit,
            Some(_) => self.adaptive.current(),
        }
    }

    pub(crate) fn limit(&self) -> u32 {
        self.limit_of(self.config.get())
    }

    pub(crate) fn in_use(&self) -> u32 {
        let settings = self.config.get();
        match settings.common.policy {
            Policy::Reject => self.taken.load(Ordering::Acquire),
            Policy::Block { .. } => {
                let free = u32::try_from(self.semaphore.available_permits()).unwrap_or(u32::MAX);
                self.semaphore_limit
                    .load(Ordering::Acquire)
                    .saturating_add(self.debt.load(Ordering::Acquire))
                    .saturating_sub(free)
            }
        }
    }

    /// A place for a retry under the settings' `retry_share`: one of the
    /// places retries may fill, if it is free now. It never waits: for a
    /// fixed `reject` limit a counter's place below the retries' share, in
    /// one compare-and-swap; otherwise a free place, while fewer places
    /// than the share are in use (checked before the place is taken:
    /// retries that arrive at the same moment may pass the share together,
    /// never the limit).
    #[cfg(all(feature = "tower", feature = "http"))]
    #[cold]
    #[inline(never)]
    fn try_take_retry(&self, settings: &LimiterSettings) -> Option<Place<'_>> {
        let Some(retries) = settings.retries.filter(|r| r.share.is_some()) else {
            return self.try_take(settings);
        };
        if !settings.common.enabled {
            return self.try_take(settings);
        }
        let places = retries.places(self.limit_of(settings));
        match (settings.common.policy, settings.adaptive) {
            (Policy::Reject, None) => self
                .taken
                .fetch_update(Ordering::Acquire, Ordering::Relaxed, |n| {
                    (n < places).then_some(n + 1)
                })
                .ok()
                .map(|_| Place::new(self, Kind::COUNTED)),
            _ if self.in_use() >= places => None,
            _ => self.try_take(settings),
        }
    }

    /// What a call (`attempt`) that found no free place at entry gets: a
    /// retry under a `retry_header` is refused at once (shed); another call
    /// is refused (`reject`) or waits (`block`). Out of line: the call let
    /// in at once carries none of it.
    #[cfg(all(feature = "tower", feature = "http"))]
    #[cold]
    #[inline(never)]
    fn full_at_entry<'a>(
        &'a self,
        spec: &'static str,
        settings: &'a LimiterSettings,
        started: Option<Instant>,
        attempt: Attempt,
    ) -> Enter<Held<'a>, Full<'a>> {
        let limit = self.limit_of(settings);
        match (attempt, settings.retries) {
            (Attempt::Retry, Some(retries)) => {
                self.shed(limit, retries);
                return Enter::Ready(Err(Self::reached(spec, limit)));
            }
            (Attempt::Unread, Some(_)) => self.tell_unread(),
            _ => {}
        }
        match settings.common.policy {
            Policy::Reject => {
                self.rejected(limit);
                Enter::Ready(Err(Self::reached(spec, limit)))
            }
            Policy::Block { .. } => Enter::Wait(Full {
                telemetry: &self.telemetry,
                settings,
                started,
            }),
        }
    }

    /// Tells the telemetry that a retry was refused by `retry_header`
    /// (`retries`) under `limit`: a rejection, and a shed retry.
    #[cfg(all(feature = "tower", feature = "http"))]
    #[cold]
    #[inline(never)]
    fn shed(&self, limit: u32, retries: RetryShedding) {
        if self.telemetry.metrics_on() {
            self.shed
                .get_or_init(|| {
                    self.telemetry
                        .counter("resilient_concurrency_shed_total", &[])
                })
                .increment(1);
        }
        let (header, places) = (retries.header, retries.places(limit));
        crate::telemetry::log_rejection!(
            "resilient::concurrency",
            &self.telemetry,
            None,
            "a retry (`{header}`) shed: {} of {limit} places taken, and retries may fill {places}",
            self.in_use()
        );
    }

    /// A call whose door reads no header found the limit full: if
    /// `settings` set a `retry_header`, said once, at WARN, since the
    /// setting cannot act on it. Out of line, on the full path only.
    #[cold]
    #[inline(never)]
    fn unread(&self, settings: &LimiterSettings) {
        if settings.retries.is_some() {
            self.tell_unread();
        }
    }

    #[cold]
    #[inline(never)]
    fn tell_unread(&self) {
        if self.unread_told.swap(true, Ordering::Relaxed) {
            return;
        }
        let (spec, path) = (self.telemetry.spec, self.telemetry.path);
        tracing::warn!(
            target: "resilient::concurrency",
            spec,
            path,
            "`retry_header` of `{path}` has no effect on this call: it found the limit full and came through a door that reads no request header (`#[concurrency_limit]`, a handle, or a layer applied without `reading_retry_header`), so it was treated as a first call; apply the limit to an HTTP service with `{spec}::layer().reading_retry_header()` or `StackLayer::spec_reading_retry_header::<{spec}>()`, or remove `retry_header` (told once per spec)"
        );
    }

    /// Tells the telemetry that a call found no place.
    fn rejected(&self, limit: u32) {
        crate::telemetry::log_rejection!(
            "resilient::concurrency",
            &self.telemetry,
            None,
            "all {limit} places taken"
        );
    }

    fn reached(spec: &'static str, limit: u32) -> Error {
        Error::ConcurrencyLimitReached { spec, limit }
    }

    /// A place as the policy says.
    async fn acquire(&self, spec: &'static str) -> Result<Place<'_>, Error> {
        let settings = self.config.get();
        // Free places are taken without a lock or a timer.
        match self.try_take(settings) {
            Some(place) => Ok(place),
            None => self.when_full(spec, settings).await,
        }
    }

    /// A place for a call that found none free: an error at once (`reject`),
    /// or one that comes free in time (`block`).
    async fn when_full(
        &self,
        spec: &'static str,
        settings: &LimiterSettings,
    ) -> Result<Place<'_>, Error> {
        let (limit, max_wait) = self.full(spec, settings)?;
        // Boxed: the wait's future (a semaphore queue entry and a timer)
        // would otherwise widen every call's future, and only a call that
        // must wait pays for it.
        let sampled = settings.adaptive.is_some();
        Box::pin(self.wait(spec, limit, max_wait, sampled)).await
    }

    /// What a call that found the limit full does: the limit's error
    /// (`reject`), or the limit in force and how long it may wait (`block`).
    fn full(
        &self,
        spec: &'static str,
        settings: &LimiterSettings,
    ) -> Result<(u32, Option<Duration>), Error> {
        let limit = self.limit_of(settings);
        match settings.common.policy {
            Policy::Reject => Err(Self::reached(spec, limit)),
            Policy::Block { max_wait } => Ok((limit, max_wait)),
        }
    }

    /// Waits for a place of a `block` limiter, at most `max_wait`.
    async fn wait(
        &self,
        spec: &'static str,
        limit: u32,
        max_wait: Option<Duration>,
        sampled: bool,
    ) -> Result<Place<'_>, Error> {
        let permit = match max_wait {
            None => self.semaphore.acquire().await.ok(),
            Some(max_wait) => tokio::time::timeout(max_wait, self.semaphore.acquire())
                .await
                .ok()
                .and_then(Result::ok),
        };
        self.queued(permit, spec, limit, sampled)
    }

    /// As [`when_full`](Self::when_full), blocking the thread (a blocking
    /// fn; see [`crate::blocking`] for when the wait is refused).
    fn when_full_blocking(
        &self,
        spec: &'static str,
        settings: &LimiterSettings,
    ) -> Result<Place<'_>, Error> {
        let (limit, max_wait) = self.full(spec, settings)?;
        let refused = || {
            tracing::warn!(
                spec,
                "a blocking fn found the concurrency limit `{spec}` full on a current-thread tokio runtime, where waiting for a place could wait for a task of that runtime forever: rejected at once; call blocking fns from `tokio::task::spawn_blocking` on a multi-thread runtime, or from a thread of their own (told once per process)"
            );
        };
        let permit = crate::blocking::wait_for(self.semaphore.acquire(), max_wait, refused)
            .and_then(Result::ok);
        self.queued(permit, spec, limit, settings.adaptive.is_some())
    }

    /// The place of a call that waited, if a permit came.
    fn queued<'a>(
        &'a self,
        permit: Option<tokio::sync::SemaphorePermit<'a>>,
        spec: &'static str,
        limit: u32,
        sampled: bool,
    ) -> Result<Place<'a>, Error> {
        let mut place = permit
            .map(|permit| Place::queued(self, permit))
            .ok_or_else(|| Self::reached(spec, limit))?;
        if sampled {
            place.kind = place.kind.sample(0);
            self.adaptive.held(self.in_use());
        }
        Ok(place)
    }

    /// A sampled call ended with `success` or not: timed from `started`
    /// (what its `Held` kept), its place taken `waited` µs after that; the
    /// time since `started` if the telemetry times calls.
    #[inline]
    fn sampled_end(&self, started: Instant, waited: u32, success: bool) -> Option<Duration> {
        let now = Instant::now();
        let from = self
            .adaptive
            .since_origin(started)
            .saturating_add(u64::from(waited) * 1_000);
        if self
            .adaptive
            .sample(from, self.adaptive.since_origin(now), success)
        {
            self.close_window(now);
        }
        self.telemetry
            .timed()
            .then(|| now.saturating_duration_since(started))
    }

    /// Closes the adaptive limit's window, due at `now`, unless another
    /// call is closing it: the next limit, published.
    #[cold]
    fn close_window(&self, now: Instant) {
        let Some(mut estimator) = self.adaptive.try_lock() else {
            return;
        };
        let Some(settings) = self.config.get().adaptive else {
            return;
        };
        let Some(window) = self
            .adaptive
            .close(&mut estimator, now, settings.window, self.in_use())
        else {
            return;
        };
        let latency = window.mean;
        let was = estimator.limit();
        let why = estimator.update(window, settings.bounds());
        self.adaptive.set_slow(estimator.slow(settings.tolerance));
        let limit = estimator.limit();
        if limit != was {
            self.adaptive.set_current(limit);
            self.resize(limit);
            self.set_limit_gauge(limit);
        }
        if (limit != was || why.measured()) && self.telemetry.logging() {
            let (spec, path, key) = (
                self.telemetry.spec,
                self.telemetry.path,
                self.telemetry.key(),
            );
            let baseline = estimator.baseline().unwrap_or(latency);
            tracing::debug!(
                target: "resilient::concurrency",
                spec, path, key, limit, was, latency_us = latency, baseline_us = baseline,
                "adaptive limit {was} -> {limit}: window mean {:?} against baseline {:?} ({})",
                Duration::from_micros(latency),
                Duration::from_micros(baseline),
                why.words()
            );
        }
    }
}

/// Access to a concurrency limit spec's shared limiter; cheap to clone.
///
/// # Example
///
/// ```
/// use resilient_core::prelude::*;
/// use resilient_core::Registry;
///
/// #[derive(ConcurrencyLimitSpec)]
/// #[spec("resilient.concurrency.pet")]
/// pub struct PetLimit;
///
/// #[derive(Debug, thiserror::Error)]
/// pub enum PetError {
///     #[error("the store is down")]
///     Down,
///     #[error(transparent)]
///     Resilience(#[from] resilient_core::Error),
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let settings = config::Config::builder()
/// #     .add_source(config::File::from_str(
/// #         "[resilient.concurrency.pet]\nlimit = 2",
/// #         config::FileFormat::Toml,
/// #     ))
/// #     .build()?;
/// # let registry = resilient_config::build(Registry::builder().spec::<PetLimit>(), &settings)?;
/// # let _guard = registry.set_default();
/// let limit = PetLimit::get()?;
/// let held = limit.try_acquire().ok_or("a permit is free")?;
/// assert_eq!((limit.in_use(), limit.available()), (1, 1));
/// drop(held);
/// let found: Result<u32, PetError> = limit.call(|| async { Ok(7) }).await;
/// assert_eq!(found?, 7);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct ConcurrencyLimitHandle<S> {
    inner: Shared<Limiter>,
    _spec: PhantomData<fn() -> S>,
}

impl<S> Clone for ConcurrencyLimitHandle<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            _spec: PhantomData,
        }
    }
}

/// A running call's place; dropping it frees the place.
#[derive(Debug)]
#[must_use = "the place is freed as soon as the permit is dropped"]
pub struct ConcurrencyPermit<'a> {
    _place: Place<'a>,
}

impl<'a> ConcurrencyPermit<'a> {
    /// `place`, held by a caller whose outcome the limiter never learns:
    /// no sample of an adaptive limit.
    fn new(mut place: Place<'a>) -> Self {
        place.kind = place.kind.unsampled();
        Self { _place: place }
    }
}

impl<S: ConcurrencyLimitSpec> ConcurrencyLimitHandle<S> {
    /// The spec's validated settings, as running now: the switch, the
    /// policy and the limit as one number (with `type = "adaptive"`, its
    /// `max`; see [`adaptive`](Self::adaptive) for the rest).
    pub fn settings(&self) -> &ConcurrencyLimitSettings {
        &self.inner.config.get().common
    }

    /// The adaptive limit's settings, as running now; `None` for a fixed
    /// limit.
    pub fn adaptive(&self) -> Option<&AdaptiveSettings> {
        self.inner.config.get().adaptive.as_ref()
    }

    /// The limit in force now: `limit`, or where an adaptive limit stands.
    pub fn limit(&self) -> u32 {
        self.inner.limit()
    }

    /// A place if one is free now, whatever the policy. A call that finds
    /// none is counted as rejected, as the attribute's is. A permit is no
    /// sample of an adaptive limit (its outcome is not known): the limit
    /// learns from calls through [`call`](Self::call) and the attribute.
    pub fn try_acquire(&self) -> Option<ConcurrencyPermit<'_>> {
        let settings = self.inner.config.get();
        match self.inner.try_take(settings) {
            Some(place) => Some(ConcurrencyPermit::new(place)),
            None => {
                self.inner.rejected(self.inner.limit_of(settings));
                None
            }
        }
    }

    /// A place as the policy says: at once or fail (`reject`), or after
    /// waiting (`block`, at most `max_wait`). No sample of an adaptive
    /// limit, as [`try_acquire`](Self::try_acquire).
    ///
    /// # Errors
    ///
    /// [`Error::ConcurrencyLimitReached`] when no place could be had.
    pub async fn acquire(&self) -> Result<ConcurrencyPermit<'_>, Error> {
        match self.inner.acquire(S::NAME).await {
            Ok(place) => Ok(ConcurrencyPermit::new(place)),
            Err(e) => {
                if let Error::ConcurrencyLimitReached { limit, .. } = e {
                    self.inner.rejected(limit);
                }
                Err(e)
            }
        }
    }

    /// Places taken now.
    pub fn in_use(&self) -> u32 {
        self.inner.in_use()
    }

    /// Places free now.
    pub fn available(&self) -> u32 {
        self.inner.limit().saturating_sub(self.inner.in_use())
    }

    /// Runs `f` holding a place for the whole life of its future; with
    /// `type = "adaptive"`, its latency and outcome are a sample.
    pub async fn call<T, E, F, Fut>(&self, f: F) -> Result<T, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: From<Error>,
    {
        run(
            const { &Key::of::<S>() },
            Some(CallInstance::Borrowed(&self.inner)),
            || crate::outcome::lifted(f()),
        )
        .await
        .map_err(|fail| fail.into_error(E::from))
    }
}

/// How a limiter answers a call that asks to enter.
#[doc(hidden)]
pub enum Enter<G, W> {
    /// At once: let in, or the error that ends the call.
    Ready(Result<G, Error>),
    /// The call must wait (`W` says for what) before it knows.
    Wait(W),
}

/// What a call says of itself, for a limit's `retry_header`.
#[cfg(all(feature = "tower", feature = "http"))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// Its door reads no header (an attribute, a handle, a layer applied
    /// without `reading_retry_header`), or the spec sets none.
    Unread,
    /// A first call: the header is absent, or says 0.
    First,
    /// A retry: the header says 1 or more, or cannot be read as a count.
    Retry,
}

#[cfg(all(feature = "tower", feature = "http"))]
impl Attempt {
    /// The attempt a request's `retry_header` value announces: absent or
    /// `0`, a first call; a count of 1 or more, a retry; anything else (not
    /// a whole number, empty, not ASCII), a retry too: a client that sends
    /// the header is retrying, and a value that cannot be read must not
    /// let a retry pass as a first call.
    #[cfg(all(feature = "tower", feature = "http"))]
    #[inline]
    pub(crate) fn of(value: Option<&http::HeaderValue>) -> Self {
        let Some(value) = value else {
            return Attempt::First;
        };
        match value.to_str().ok().map(|v| v.trim().parse::<u64>()) {
            Some(Ok(0)) => Attempt::First,
            _ => Attempt::Retry,
        }
    }
}

/// One call under a concurrency limit, as the generated code makes it:
/// [`try_enter`](LimitCall::try_enter) (and [`wait`](LimitCall::wait) when
/// full), then [`Held::exit`] with the outcome of the layers inside.
#[doc(hidden)]
pub struct LimitCall<'a> {
    key: &'static Key<Limiter>,
    instance: Option<CallInstance<'a, Limiter>>,
}

/// A call that found the limit full, and when it started (if timed: a
/// call dropped while it waits is then counted as cancelled).
#[doc(hidden)]
pub struct Full<'a> {
    telemetry: &'a Telemetry,
    settings: &'a LimiterSettings,
    started: Option<Instant>,
}

/// A place taken, held until the call ends or is dropped. `started` is
/// when the call entered, if it is timed: for the telemetry (metrics on),
/// and always for an adaptive limit's sample (which starts `waited` µs
/// later, when the place was taken).
#[doc(hidden)]
pub struct Held<'a> {
    place: Place<'a>,
    started: Option<Instant>,
}

impl<'a> LimitCall<'a> {
    #[inline]
    pub(crate) fn new(
        key: &'static Key<Limiter>,
        instance: Option<CallInstance<'a, Limiter>>,
    ) -> Self {
        Self { key, instance }
    }

    /// A free place, taken without entering an async fn; `Wait` when the
    /// limit is full and its policy is to wait.
    #[inline(always)]
    pub fn try_enter(&self) -> Enter<Held<'_>, Full<'_>> {
        let Some(instance) = &self.instance else {
            return Enter::Ready(Err(self.key.not_configured()));
        };
        let limiter = &**instance;
        let settings = limiter.config.get();
        let started = limiter.start(settings);
        match limiter.try_take(settings) {
            Some(place) => Enter::Ready(Ok(Held::new(started, place))),
            None => match settings.common.policy {
                Policy::Reject => {
                    let limit = limiter.limit_of(settings);
                    limiter.unread(settings);
                    limiter.rejected(limit);
                    Enter::Ready(Err(Limiter::reached(self.key.name, limit)))
                }
                Policy::Block { .. } => {
                    limiter.unread(settings);
                    Enter::Wait(Full {
                        telemetry: &limiter.telemetry,
                        settings,
                        started,
                    })
                }
            },
        }
    }

    /// The settings' `retry_header`, if the spec has settings and one is
    /// set: what a door that reads requests reads.
    #[cfg(all(feature = "tower", feature = "http"))]
    #[inline(always)]
    pub(crate) fn retry_header(&self) -> Option<&'static str> {
        let retries = self.instance.as_deref()?.config.get().retries?;
        Some(retries.header)
    }

    /// [`try_enter`](Self::try_enter) for a call through a door that read
    /// what `attempt` it is: a retry is admitted as the spec's
    /// `retry_header` and `retry_share` say. Apart from `try_enter`, so
    /// that the doors that read no header run the code they ran before.
    #[cfg(all(feature = "tower", feature = "http"))]
    #[inline(always)]
    pub(crate) fn try_enter_as(&self, attempt: Attempt) -> Enter<Held<'_>, Full<'_>> {
        let Some(instance) = &self.instance else {
            return Enter::Ready(Err(self.key.not_configured()));
        };
        let limiter = &**instance;
        let settings = limiter.config.get();
        let started = limiter.start(settings);
        let taken = match attempt {
            Attempt::Retry => limiter.try_take_retry(settings),
            Attempt::Unread | Attempt::First => limiter.try_take(settings),
        };
        match taken {
            Some(place) => Enter::Ready(Ok(Held::new(started, place))),
            None => limiter.full_at_entry(self.key.name, settings, started, attempt),
        }
    }

    /// Waits for a place, as the limit's policy (when the call found it
    /// full) says.
    pub async fn wait(&self, full: Full<'_>) -> Result<Held<'_>, Error> {
        let Some(instance) = &self.instance else {
            return Err(self.key.not_configured());
        };
        let limiter = &**instance;
        let result = limiter.when_full(self.key.name, full.settings).await;
        Self::waited(limiter, full, result)
    }

    /// As [`wait`](Self::wait), blocking the thread (a blocking fn; see
    /// [`crate::blocking`]).
    pub fn wait_blocking(&self, full: Full<'_>) -> Result<Held<'_>, Error> {
        let Some(instance) = &self.instance else {
            return Err(self.key.not_configured());
        };
        let limiter = &**instance;
        let result = limiter.when_full_blocking(self.key.name, full.settings);
        Self::waited(limiter, full, result)
    }

    /// A call that waited, with what its wait gave.
    fn waited<'l>(
        limiter: &'l Limiter,
        mut full: Full<'_>,
        result: Result<Place<'l>, Error>,
    ) -> Result<Held<'l>, Error> {
        // Counted from here on: as held, or as rejected.
        let started = full.started.take();
        match result {
            Ok(mut place) => {
                let started = if place.sampled() {
                    // The sample starts now, with the place; the telemetry's
                    // time from the call's entry, if it is timed.
                    let now = Instant::now();
                    match started {
                        None => Some(now),
                        Some(at) => {
                            let waited = now.saturating_duration_since(at).as_micros();
                            place.kind =
                                place.kind.sample(u64::try_from(waited).unwrap_or(u64::MAX));
                            Some(at)
                        }
                    }
                } else {
                    started
                };
                Ok(Held::new(started, place))
            }
            Err(e) => {
                limiter.rejected(limiter.limit_of(full.settings));
                Err(e)
            }
        }
    }
}

impl Drop for Full<'_> {
    #[inline]
    fn drop(&mut self) {
        // Still timed: dropped while it waited for a place.
        if let Some(at) = self.started.take() {
            self.telemetry.ended(Outcome::Cancelled, Some(at.elapsed()));
        }
    }
}

impl<'a> Held<'a> {
    #[inline(always)]
    fn new(started: Option<Instant>, place: Place<'a>) -> Self {
        Self { place, started }
    }

    /// Passes on the outcome of the call; the place is freed when the guard
    /// is dropped, with the layer's block.
    #[inline(always)]
    pub fn exit<T, E>(&mut self, outcome: Result<T, Fail<E>>) -> Result<T, Fail<E>> {
        let limiter = self.place.limiter;
        let started = self.started.take();
        // A sample is always timed: an untimed call (a fixed limit, metrics
        // off) goes straight on, as it did before samples existed.
        if let Some(at) = started {
            if self.place.sampled() {
                let took = limiter.sampled_end(at, self.place.kind.waited(), outcome.is_ok());
                let ended = if outcome.is_ok() {
                    Outcome::Success
                } else {
                    Outcome::Failure
                };
                limiter.telemetry.ended(ended, took);
                return outcome;
            }
        }
        limiter.telemetry.done(outcome, started)
    }
}

/// A [`Held`] place, as plain data: what a stream keeps between polls, with
/// the limiter it came from beside it (see [`crate::stream`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeldParts {
    kind: Kind,
    started: Option<Instant>,
}

/// A [`Full`] call's start, as plain data.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FullParts {
    started: Option<Instant>,
}

impl<'a> Held<'a> {
    /// The place as plain data: nothing is freed or counted until
    /// [`from_parts`](Self::from_parts) makes it a guard again.
    pub(crate) fn into_parts(self) -> HeldParts {
        let parts = HeldParts {
            kind: self.place.kind,
            started: self.started,
        };
        std::mem::forget(self);
        parts
    }

    /// The guard `parts` came from, of `limiter`.
    pub(crate) fn from_parts(limiter: &'a Limiter, parts: HeldParts) -> Self {
        Self {
            place: Place {
                limiter,
                kind: parts.kind,
            },
            started: parts.started,
        }
    }
}

impl Full<'_> {
    /// The wait's start as plain data (see [`Held::into_parts`]).
    pub(crate) fn into_parts(self) -> FullParts {
        let parts = FullParts {
            started: self.started,
        };
        std::mem::forget(self);
        parts
    }
}

impl<'a> LimitCall<'a> {
    /// Another call of the same spec and instance.
    pub(crate) fn duplicate(&self) -> Self {
        Self {
            key: self.key,
            instance: self.instance.clone(),
        }
    }

    /// The limiter this call enters, if the spec has settings.
    pub(crate) fn limiter(&self) -> Option<&Limiter> {
        self.instance.as_deref()
    }

    /// Counts the wait that `parts` came from as cancelled: it was handed
    /// out and never started.
    pub(crate) fn abandon_wait(&self, parts: FullParts) {
        if let Some(limiter) = self.limiter() {
            drop(Full {
                telemetry: &limiter.telemetry,
                settings: limiter.config.get(),
                started: parts.started,
            });
        }
    }

    /// [`wait`](Self::wait) for the [`Full`] that `parts` came from.
    pub(crate) async fn wait_from_parts(&self, parts: FullParts) -> Result<Held<'_>, Error> {
        let Some(limiter) = self.limiter() else {
            return Err(self.key.not_configured());
        };
        let full = Full {
            telemetry: &limiter.telemetry,
            settings: limiter.config.get(),
            started: parts.started,
        };
        self.wait(full).await
    }
}

impl Drop for Held<'_> {
    #[inline]
    fn drop(&mut self) {
        // Still timed: dropped before its outcome.
        if let Some(at) = self.started.take() {
            let limiter = self.place.limiter;
            let took = if self.place.sampled() {
                // A cancelled call: a sample only if it was already slow.
                limiter.sampled_end(at, self.place.kind.waited(), false)
            } else {
                Some(at.elapsed())
            };
            limiter.telemetry.ended(Outcome::Cancelled, took);
        }
    }
}

/// One call under the limiter `instance`, for a handle.
pub(crate) async fn run<T, E, F, Fut>(
    key: &'static Key<Limiter>,
    instance: Option<CallInstance<'_, Limiter>>,
    f: F,
) -> Result<T, Fail<E>>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<T, Fail<E>>>,
{
    let call = LimitCall::new(key, instance);
    let entered = match call.try_enter() {
        Enter::Ready(entered) => entered,
        Enter::Wait(w) => call.wait(w).await,
    };
    let mut held = entered.map_err(Fail::Resilience)?;
    held.exit(f().await)
}
