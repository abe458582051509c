//! One instance per key: a breaker per host, a rate limit per tenant, a
//! concurrency limit per shard, all under one spec's settings.
//!
//! `key = <expression>` in `#[circuit_breakable]`, `#[rate_limited]` or
//! `#[concurrency_limit]` gives each value of the expression (over the fn's
//! arguments) an instance of its own, built on first use from the spec's
//! settings:
//!
//! ```
//! use resilient_core::{circuit_breakable, CircuitBreakerSpec};
//!
//! #[derive(CircuitBreakerSpec)]
//! #[spec("resilient.circuitbreaker.host")]
//! pub struct HostBreaker;
//!
//! # #[derive(Debug, thiserror::Error)] #[error("e")] pub struct E(#[from] resilient_core::Error);
//! #[circuit_breakable(HostBreaker, key = host)]
//! async fn fetch(host: &str, path: &str) -> Result<String, E> {
//!     Ok(format!("https://{host}{path}"))
//! }
//! ```
//!
//! The expression is read at each call. A literal in its place
//! (`key = "host"`, quoted as `#[fallback(method = "..")]` is, or
//! `key = 7`) is a compile error at the literal that names the unquoted
//! form: a constant key gives every call the same instance, which is what
//! no `key` does.
//!
//! A dead host opens its own breaker; the others stay closed. A call
//! without a key (another fn of the same spec without `key`, or the spec's
//! [handle](crate::CircuitBreakerSpec::get)) uses the spec's own instance,
//! which keyed calls reach only when the keys are full (below).
//!
//! # Keys
//!
//! The expression's value must implement [`PartitionKey`], which strings,
//! integers, `char`, `bool`, and IP and socket addresses do, and any
//! `Display` type does when wrapped in [`DisplayKey`] (`DisplayKey(&value)`,
//! so that the argument is not moved). A key is a text or a whole number
//! ([`KeyRef`]): two texts that are equal are one key whatever their types
//! (a `&str` host in one fn and a `String` in another reach one breaker),
//! and so are two equal numbers (a `u32` tenant id and a `u64` one); a
//! number and its text (`42` and `"42"`) are two keys (but a `u128` past
//! `i128::MAX`, keyed by its text, is its text's key). A number is looked
//! up as a number, never written out as text on the way; logs, events and
//! the snapshot show it in decimal. A `DisplayKey` of at most 64 bytes of
//! text is looked up without allocating.
//!
//! # Bounds
//!
//! The instances are bounded by the spec's `keys` table (see
//! [`KeySettings`]); no call to prune them is ever needed:
//!
//! ```toml
//! [resilient.circuitbreaker.host]
//! failure_rate_threshold = 50
//! minimum_required_calls = 4
//! wait_duration_in_open_state = "30s"
//! permitted_calls_in_half_open_state = 1
//! count_based = { window_size = 10 }
//! keys = { max = 1000, idle_timeout = "10m" }
//! ```
//!
//! - A key unused for `idle_timeout` is dropped at most an eighth of
//!   `idle_timeout` later, and starts afresh if it is seen again. A task
//!   on the tokio runtime looks for idle keys every eighth of
//!   `idle_timeout` while the spec has keys (a new key looks too), and a
//!   snapshot drops the keys idle past the timeout before it lists or
//!   counts them: it shows no key unused for longer than `idle_timeout`
//!   plus that eighth, whether or not anything looked in between. Keys
//!   made where no tokio runtime (or no timer) is at hand are looked at
//!   only by new keys and snapshots: a key's idleness then counts from the
//!   first look that found it unused.
//! - At `max` keys, a new key first evicts the least recently used keys
//!   that can go (an eighth of `max` at a time, to spread the work).
//! - A key is never evicted while a call or a handle holds its instance,
//!   nor while the instance holds what a fresh one would undo: a breaker in
//!   its open wait, forced open, or closed or disabled by hand against its
//!   settings; a limit with places taken; a rate limiter with permits spent
//!   in its current window. What an idle key may lose: a closed breaker's
//!   counted calls; an adaptive limit's learned limit (it learns again). A
//!   breaker past its open wait may go too (a host nobody calls any more
//!   must not hold its key forever), and so may a half-open one with no
//!   probe running: if the host comes back, it starts with a fresh closed
//!   breaker, which lets up to `minimum_required_calls` calls reach it
//!   rather than one probe.
//! - When `max` keys are all of that kind, a call with a new key runs under
//!   the spec's own instance until one frees: memory stays bounded, and the
//!   overflow is logged at WARN (at most once per 10 s) and counted in the
//!   snapshot. The keys that overflow share that one instance: together
//!   they get one key's limit, and one failing host among them opens the
//!   breaker the others (and calls without a key) go through. Size
//!   `keys.max` above the hosts or tenants active at once. After a look that found no key
//!   to drop, the next `max / 8 - 1` new keys go there without looking, for
//!   at most a second. A key that ran there and then gets a place of its
//!   own can, for as long as its calls on the spec's instance last, have
//!   calls in both.
//!
//! The lookup of an existing key takes no lock: a read of a lock-free map
//! under an epoch guard, and a clone of the instance's `Arc` for the call
//! (an atomic increment on the key's count, where a call without a key
//! writes nothing). A key's recency is written once per epoch, not per
//! call.
//!
//! # Telemetry
//!
//! Log lines of a keyed instance carry the field `key`; events of a keyed
//! instance name it ([`Event::StateTransition`](crate::telemetry::Event),
//! `Rejected`); the snapshot lists the keys (at most
//! [`KeysSnapshot::SHOWN`](crate::registry::KeysSnapshot::SHOWN) of them,
//! with their count). The WARN summary of rejections is the spec's, shared
//! by its keys. Metrics carry a `key` label only with
//! `keys.label_metrics = true`: each key is then a series of its own, which
//! a metrics backend pays for (a recorder keeps the series of evicted keys
//! too). Without it, keyed instances add to the spec's counters and
//! histograms and set no gauge: the gauges show the spec's own instance
//! only, so a spec called only with keys has gauges that say nothing of
//! them (use `label_metrics`, or the snapshot). A call that overflowed to
//! the spec's own instance is told of as that instance's (`key: None`).

use std::borrow::Cow;
use std::fmt::{self, Write as _};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use crate::settings::Section;

/// A value that can key an instance: a text or a whole number.
///
/// Implemented for strings, integers, `char`, `bool`, IP and socket
/// addresses, and references to any of them; wrap any other `Display` type
/// in [`DisplayKey`], or implement it for your type:
///
/// ```
/// use resilient_core::keyed::{KeyRef, PartitionKey};
///
/// pub struct TenantId(u32);
///
/// impl PartitionKey for TenantId {
///     fn with_key<R>(&self, f: impl FnOnce(KeyRef<'_>) -> R) -> R {
///         self.0.with_key(f)
///     }
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot key an instance",
    label = "a key must be a string, an integer, or implement `PartitionKey`",
    note = "key by a string or an integer, such as a field (`key = req.tenant_id`), or an IP address; wrap a `Display` type as `resilient_core::keyed::DisplayKey(&value)`; or implement `resilient_core::keyed::PartitionKey` for `{Self}`"
)]
pub trait PartitionKey {
    /// Calls `f` with the key.
    fn with_key<R>(&self, f: impl FnOnce(KeyRef<'_>) -> R) -> R;
}

/// A key as a call gives it: a text, or a whole number (looked up without
/// being written out as text). The two are apart: `"42"` and `42` are two
/// keys. Logs, events and the snapshot show a number in decimal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyRef<'a> {
    /// A text key.
    Text(&'a str),
    /// A whole-number key (any integer type; `u128` above `i128::MAX` is
    /// keyed by its text).
    Int(i128),
}

/// Hashed as the keyed map's own keys are: the text's bytes, or the
/// number, in one write each (a text and a number that hash alike are still
/// two keys: they never compare equal).
impl std::hash::Hash for KeyRef<'_> {
    #[inline]
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        match self {
            KeyRef::Text(t) => state.write(t.as_bytes()),
            KeyRef::Int(n) => state.write_i128(*n),
        }
    }
}

impl KeyRef<'_> {
    /// The key as text: what logs, events and the snapshot show.
    pub fn to_text(self) -> Arc<str> {
        match self {
            KeyRef::Text(t) => Arc::from(t),
            KeyRef::Int(n) => Arc::from(itoa::Buffer::new().format(n)),
        }
    }
}

impl PartitionKey for str {
    #[inline]
    fn with_key<R>(&self, f: impl FnOnce(KeyRef<'_>) -> R) -> R {
        f(KeyRef::Text(self))
    }
}

macro_rules! by_deref {
    ($($t:ty),*) => {$(
        impl PartitionKey for $t {
            #[inline]
            fn with_key<R>(&self, f: impl FnOnce(KeyRef<'_>) -> R) -> R {
                f(KeyRef::Text(self))
            }
        }
    )*};
}

by_deref!(String, Box<str>, Arc<str>, Rc<str>, Cow<'_, str>);

impl<T: PartitionKey + ?Sized> PartitionKey for &T {
    #[inline]
    fn with_key<R>(&self, f: impl FnOnce(KeyRef<'_>) -> R) -> R {
        (**self).with_key(f)
    }
}

impl<T: PartitionKey + ?Sized> PartitionKey for &mut T {
    #[inline]
    fn with_key<R>(&self, f: impl FnOnce(KeyRef<'_>) -> R) -> R {
        (**self).with_key(f)
    }
}

macro_rules! integers {
    ($($t:ty),*) => {$(
        impl PartitionKey for $t {
            #[inline]
            fn with_key<R>(&self, f: impl FnOnce(KeyRef<'_>) -> R) -> R {
                f(KeyRef::Int(i128::from(*self)))
            }
        }
    )*};
}

integers!(u8, u16, u32, u64, i8, i16, i32, i64, i128);

impl PartitionKey for usize {
    #[inline]
    fn with_key<R>(&self, f: impl FnOnce(KeyRef<'_>) -> R) -> R {
        (*self as u64).with_key(f)
    }
}

impl PartitionKey for isize {
    #[inline]
    fn with_key<R>(&self, f: impl FnOnce(KeyRef<'_>) -> R) -> R {
        (*self as i64).with_key(f)
    }
}

impl PartitionKey for u128 {
    #[inline]
    fn with_key<R>(&self, f: impl FnOnce(KeyRef<'_>) -> R) -> R {
        match i128::try_from(*self) {
            Ok(n) => f(KeyRef::Int(n)),
            Err(_) => f(KeyRef::Text(itoa::Buffer::new().format(*self))),
        }
    }
}

impl PartitionKey for char {
    fn with_key<R>(&self, f: impl FnOnce(KeyRef<'_>) -> R) -> R {
        f(KeyRef::Text(self.encode_utf8(&mut [0; 4])))
    }
}

impl PartitionKey for bool {
    fn with_key<R>(&self, f: impl FnOnce(KeyRef<'_>) -> R) -> R {
        f(KeyRef::Text(if *self { "true" } else { "false" }))
    }
}

macro_rules! by_display {
    ($($t:ty),*) => {$(
        impl PartitionKey for $t {
            fn with_key<R>(&self, f: impl FnOnce(KeyRef<'_>) -> R) -> R {
                DisplayKey(self).with_key(f)
            }
        }
    )*};
}

by_display!(IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr);

/// A `Display` value as a key: its text, formatted on the stack when it
/// fits in 64 bytes.
///
/// ```
/// # use resilient_core::{circuit_breakable, CircuitBreakerSpec};
/// # #[derive(CircuitBreakerSpec)] #[spec("resilient.circuitbreaker.region")] pub struct RegionBreaker;
/// # #[derive(Debug, thiserror::Error)] #[error("e")] pub struct E(#[from] resilient_core::Error);
/// use resilient_core::keyed::DisplayKey;
///
/// #[derive(Clone, Copy)]
/// pub enum Region { Eu, Us }
///
/// impl std::fmt::Display for Region {
///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
///         f.write_str(match self { Region::Eu => "eu", Region::Us => "us" })
///     }
/// }
///
/// #[circuit_breakable(RegionBreaker, key = DisplayKey(region))]
/// async fn ship(region: Region) -> Result<(), E> { Ok(()) }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct DisplayKey<T>(pub T);

impl<T: fmt::Display> PartitionKey for DisplayKey<T> {
    fn with_key<R>(&self, f: impl FnOnce(KeyRef<'_>) -> R) -> R {
        let mut text = Text::Inline([0; INLINE], 0);
        // A `Display` impl that fails keys by what it wrote until then.
        let _ = write!(text, "{}", self.0);
        f(KeyRef::Text(text.as_str()))
    }
}

const INLINE: usize = 64;

/// A key's text as it is formatted: on the stack, or on the heap past
/// [`INLINE`] bytes.
enum Text {
    Inline([u8; INLINE], usize),
    Heap(String),
}

impl Text {
    fn as_str(&self) -> &str {
        match self {
            // Only whole `&str`s are copied in: always UTF-8.
            Text::Inline(buf, len) => std::str::from_utf8(&buf[..*len]).unwrap_or_default(),
            Text::Heap(s) => s,
        }
    }
}

impl fmt::Write for Text {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        match self {
            Text::Inline(buf, len) => match buf.get_mut(*len..*len + s.len()) {
                Some(to) => {
                    to.copy_from_slice(s.as_bytes());
                    *len += s.len();
                }
                None => {
                    let mut heap = String::with_capacity(*len + s.len());
                    heap.push_str(std::str::from_utf8(&buf[..*len]).unwrap_or_default());
                    heap.push_str(s);
                    *self = Text::Heap(heap);
                }
            },
            Text::Heap(h) => h.push_str(s),
        }
        Ok(())
    }
}

/// How many keyed instances a spec keeps, and for how long: the spec's
/// optional `keys` table (breakers, concurrency limits, rate limiters).
///
/// | key | default | rule |
/// |---|---|---|
/// | `keys.max` | `1000` | a whole number in 1..=1000000: the most keys with an instance at once (a breaker's instance holds its own window: when the windows of `keys.max` keys may hold more than 1 GiB, a WARN at startup says how much) |
/// | `keys.idle_timeout` | `"10m"` | more than `0s`: a key unused this long is dropped, at most an eighth of it later |
/// | `keys.label_metrics` | `false` | `true` labels the instances' metrics with `key` (one series per key) |
/// | `keys.max_open_percent` | `100` | a whole number in 1..=100, breakers only: the most keys whose breakers may be open at once, in percent of the keys (at least one); a breaker that would open past it stays closed |
///
/// The settings apply to the keyed instances only: a spec used without
/// `key` ignores them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct KeySettings {
    /// The most keys with an instance at once.
    pub max: u32,
    /// How long a key may go unused before it can be dropped.
    #[cfg_attr(
        feature = "serde",
        serde(serialize_with = "crate::settings::ser::duration")
    )]
    pub idle_timeout: Duration,
    /// Whether the instances' metrics carry a `key` label.
    pub label_metrics: bool,
    /// Breakers only: the most keys whose breakers may have opened on their
    /// own at once, in percent of the keys (at least one key may).
    pub max_open_percent: u8,
}

impl Default for KeySettings {
    fn default() -> Self {
        Self {
            max: 1000,
            idle_timeout: Duration::from_secs(600),
            label_metrics: false,
            max_open_percent: 100,
        }
    }
}

/// The most `keys.max` accepts: an instance per key is 400 bytes to 1 KB
/// and more (a breaker's window), and a bound beyond this is no bound.
const MAX_KEYS: u64 = 1_000_000;

impl KeySettings {
    /// Reads and validates a spec's `keys` table, recording every problem
    /// found; the defaults when the table is absent. `breaker`: whether the
    /// spec is a circuit breaker's, which alone takes `max_open_percent`.
    pub fn read(s: &mut Section<'_>, breaker: bool) -> Option<Self> {
        let defaults = Self::default();
        s.table("keys", |t| {
            let max = t.int("max", Some(u64::from(defaults.max)), 1, MAX_KEYS);
            let idle = match t.duration("idle_timeout", false) {
                None => Some(defaults.idle_timeout),
                Some(Some(d)) if d.is_zero() => {
                    t.invalid("idle_timeout", "must be more than 0s");
                    None
                }
                Some(d) => d,
            };
            let label_metrics = t.bool("label_metrics", defaults.label_metrics);
            let max_open_percent = if breaker {
                t.alias("max_ejection_percent", "max_open_percent", |_| {
                    "Envoy's outlier detection cap, for the keys of one breaker spec; unlike Envoy's 10, the default is 100 (no cap)".into()
                });
                t.int("max_open_percent", Some(100), 1, 100)
            } else {
                Some(100)
            };
            Some(Self {
                max: u32::try_from(max?).ok()?,
                idle_timeout: idle?,
                label_metrics: label_metrics?,
                max_open_percent: u8::try_from(max_open_percent?).ok()?,
            })
        })
        .unwrap_or(Some(defaults))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(k: impl PartitionKey) -> String {
        k.with_key(|k| k.to_text().to_string())
    }

    fn owned(k: impl PartitionKey) -> (bool, String) {
        k.with_key(|k| (matches!(k, KeyRef::Int(_)), k.to_text().to_string()))
    }

    #[test]
    fn strings_are_text_keys_and_integers_number_keys() {
        assert_eq!(owned("7"), (false, "7".into()));
        assert_eq!(owned(String::from("7")), (false, "7".into()));
        assert_eq!(owned(7u8), (true, "7".into()));
        assert_eq!(owned(-7i64), (true, "-7".into()));
        assert_eq!(owned(usize::MAX), (true, usize::MAX.to_string()));
        assert_eq!(owned(i128::MIN), (true, i128::MIN.to_string()));
        assert_eq!(owned(u128::MAX), (false, u128::MAX.to_string()));
        assert!(7u16.with_key(|a| 7u64.with_key(|b| a == b)));
        assert_eq!(text('é'), "é");
        assert_eq!(text(true), "true");
        assert_eq!(text(IpAddr::from([10, 0, 0, 1])), "10.0.0.1");
        assert_eq!(text(DisplayKey(3.5)), "3.5");
    }

    #[test]
    fn a_long_display_key_moves_to_the_heap_whole() {
        let long = "ab".repeat(50);
        assert_eq!(
            text(DisplayKey(format_args!("{long}!"))),
            format!("{long}!")
        );
        let edge = "x".repeat(INLINE);
        assert_eq!(text(DisplayKey(&edge)), edge);
        assert_eq!(
            text(DisplayKey(format_args!("{edge}é"))),
            format!("{edge}é")
        );
    }
}
