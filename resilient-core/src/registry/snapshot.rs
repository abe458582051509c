//! The snapshot of a registry: every spec's effective settings and, where
//! its mechanism has one, its state now. Each mechanism gives its own parts;
//! the snapshot holds them without knowing their types.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use super::entry::SpecEntry;
use super::readiness::ReadinessRule;
use super::shared::BackendSnapshot;
use crate::keyed::KeySettings;
use crate::spec::SpecKind;

/// A part of a spec's snapshot (its settings, or its mechanism's state):
/// any `Debug` value, `serde::Serialize` too with the `serde` feature.
/// Read one back with [`SpecSnapshot::settings`] or
/// [`SpecSnapshot::status`], naming its type.
#[cfg(feature = "serde")]
pub trait Part: erased_serde::Serialize + fmt::Debug + Send + Sync + 'static {
    /// The part as `Any`, to be read back as its type.
    fn as_any(&self) -> &dyn Any;
}

/// A part of a spec's snapshot (its settings, or its mechanism's state):
/// any `Debug` value, `serde::Serialize` too with the `serde` feature.
/// Read one back with [`SpecSnapshot::settings`] or
/// [`SpecSnapshot::status`], naming its type.
#[cfg(not(feature = "serde"))]
pub trait Part: fmt::Debug + Send + Sync + 'static {
    /// The part as `Any`, to be read back as its type.
    fn as_any(&self) -> &dyn Any;
}

#[cfg(feature = "serde")]
impl<T: serde::Serialize + fmt::Debug + Send + Sync + 'static> Part for T {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(not(feature = "serde"))]
impl<T: fmt::Debug + Send + Sync + 'static> Part for T {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(feature = "serde")]
erased_serde::serialize_trait_object!(Part);

/// The state of every spec of a registry; see
/// [`Registry::snapshot`](crate::Registry::snapshot).
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Snapshot {
    /// One entry per spec, sorted by path.
    pub specs: Vec<SpecSnapshot>,
    /// The registry's shared backends (`resilient.redis`), each with its
    /// state and the specs that use it; empty (and left out of the JSON)
    /// without one.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Vec::is_empty"))]
    pub backends: Vec<BackendSnapshot>,
}

/// One spec in a [`Snapshot`]: what it is, the settings it runs with, and
/// its state now.
///
/// ```
/// # use resilient_core::{CircuitBreakerSpec, Registry, circuit_breaker};
/// # #[derive(CircuitBreakerSpec)] #[spec("resilient.circuitbreaker.pet")] pub struct PetBreaker;
/// # fn demo(registry: &Registry) {
/// for spec in registry.snapshot().specs {
///     if let Some(breaker) = spec.status::<circuit_breaker::Metrics>() {
///         println!("{}: {} ({:?} % failures)", spec.spec, breaker.state, breaker.failure_rate);
///     }
/// }
/// # }
/// ```
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct SpecSnapshot {
    /// The spec type's name.
    pub spec: &'static str,
    /// Its config path.
    pub path: &'static str,
    /// Its mechanism.
    pub kind: SpecKind,
    /// What its unhealthy states make of the service's readiness (its
    /// `readiness` key): a circuit breaker's; `None` for other kinds (left
    /// out of the JSON). See [`Snapshot::readiness`].
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub readiness: Option<ReadinessRule>,
    /// The mechanism's state now; see [`status`](Self::status).
    #[cfg_attr(
        feature = "serde",
        serde(skip_serializing_if = "Option::is_none", serialize_with = "some_part")
    )]
    status: Option<Arc<dyn Part>>,
    /// Its own instance's state in words when it is unhealthy (a breaker
    /// open, half-open or forced open), for readiness; not serialized (the
    /// status says it).
    #[cfg_attr(feature = "serde", serde(skip))]
    unhealthy: Option<&'static str>,
    /// The settings running now, with the `keys` table of a spec that
    /// takes `key = ..` (written inside them, as the config writes it); see
    /// [`settings`](Self::settings).
    settings: Settings,
    /// The keyed instances, for a spec that takes `key = ..`.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    keys: Option<KeysSnapshot>,
}

/// A spec's settings in its snapshot: its mechanism's, and its `keys`
/// table if it takes `key = ..`.
#[derive(Debug, Clone)]
struct Settings {
    part: Arc<dyn Part>,
    keys: Option<KeyTable>,
}

/// A spec's `keys` table as the snapshot writes it: every key the spec
/// reads, `max_open_percent` for a breaker only (no other spec takes it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeyTable {
    settings: KeySettings,
    /// Whether the spec reads `max_open_percent` (a breaker's): only the
    /// serialized table tells.
    #[cfg_attr(not(feature = "serde"), allow(dead_code))]
    ejects: bool,
}

impl KeyTable {
    pub(crate) fn new(settings: KeySettings, ejects: bool) -> Self {
        Self { settings, ejects }
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for Settings {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        /// The mechanism's settings with `keys` after them, in one table.
        #[derive(serde::Serialize)]
        struct WithKeys<'a> {
            #[serde(flatten)]
            part: &'a dyn Part,
            keys: &'a KeyTable,
        }
        match &self.keys {
            None => serde::Serialize::serialize(&*self.part, s),
            Some(keys) => serde::Serialize::serialize(
                &WithKeys {
                    part: &*self.part,
                    keys,
                },
                s,
            ),
        }
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for KeyTable {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        /// A duration written as the config writes it (`"10m"`).
        struct Written(std::time::Duration);
        impl serde::Serialize for Written {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                crate::settings::ser::duration(&self.0, s)
            }
        }
        let k = &self.settings;
        let mut table = s.serialize_struct("keys", 3 + usize::from(self.ejects))?;
        table.serialize_field("max", &k.max)?;
        table.serialize_field("idle_timeout", &Written(k.idle_timeout))?;
        table.serialize_field("label_metrics", &k.label_metrics)?;
        if self.ejects {
            table.serialize_field("max_open_percent", &k.max_open_percent)?;
        } else {
            table.skip_field("max_open_percent")?;
        }
        table.end()
    }
}

#[cfg(feature = "serde")]
fn some_part<S: serde::Serializer>(part: &Option<Arc<dyn Part>>, s: S) -> Result<S::Ok, S::Error> {
    match part {
        Some(p) => serde::Serialize::serialize(&**p, s),
        None => s.serialize_none(),
    }
}

impl SpecSnapshot {
    pub(crate) fn new(
        entry: &SpecEntry,
        readiness: Option<ReadinessRule>,
        (status, unhealthy): (Option<Arc<dyn Part>>, Option<&'static str>),
        settings: Arc<dyn Part>,
        key_settings: Option<KeyTable>,
        keys: Option<KeysSnapshot>,
    ) -> Self {
        Self {
            spec: entry.name,
            path: entry.path,
            kind: entry.kind,
            readiness,
            status,
            unhealthy,
            settings: Settings {
                part: settings,
                keys: key_settings,
            },
            keys,
        }
    }

    /// Its own instance's state in words when it is unhealthy (a breaker
    /// `"open"`, `"half_open"`, `"forced_open"`); `None` when healthy, or
    /// of a kind whose state cannot be unhealthy.
    pub fn unhealthy(&self) -> Option<&'static str> {
        self.unhealthy
    }

    /// The spec's keyed instances (see [`keyed`](crate::keyed)): `None`
    /// while it has none (a spec used without `key`, or a kind of spec that
    /// takes no key). The spec's own instance is the one
    /// [`status`](Self::status) shows.
    pub fn keys(&self) -> Option<&KeysSnapshot> {
        self.keys.as_ref()
    }

    /// The mechanism's state now, if it is a `T`: a breaker's
    /// [`circuit_breaker::Metrics`](crate::circuit_breaker::Metrics), a
    /// concurrency limit's [`concurrency::Places`](crate::concurrency::Places),
    /// a retry spec's [`retry::BudgetTokens`](crate::retry::BudgetTokens) when it has a
    /// budget, a rate limiter's
    /// [`rate_limiter::Permits`](crate::rate_limiter::Permits) when its
    /// permits are kept in the process. `None` for another type, or a
    /// mechanism without state.
    pub fn status<T: 'static>(&self) -> Option<&T> {
        let part: &dyn Part = self.status.as_deref()?;
        part.as_any().downcast_ref()
    }

    /// The settings the spec runs with, if they are a `T`: its
    /// mechanism's settings type (such as
    /// [`RetrySettings`](crate::retry::RetrySettings)), or, for a spec that
    /// takes `key = ..` (a breaker, a concurrency limit, a rate limiter),
    /// [`KeySettings`], its `keys` table (the defaults for the keys it
    /// leaves out). Serialized, the `keys` table sits inside the
    /// mechanism's settings, as in the config, with `max_open_percent` for
    /// a breaker only.
    pub fn settings<T: 'static>(&self) -> Option<&T> {
        // Through the `dyn Part`: the `Arc` around it is a `Part` too.
        let part: &dyn Part = &*self.settings.part;
        part.as_any().downcast_ref().or_else(|| {
            let keys: &dyn Any = &self.settings.keys.as_ref()?.settings;
            keys.downcast_ref()
        })
    }
}

/// The keyed instances of a spec, in its
/// [`SpecSnapshot`] (see
/// [`SpecSnapshot::keys`]).
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct KeysSnapshot {
    /// The keys with an instance now. Counted before `shown` is read, and
    /// without stopping calls: under load the two can differ by the keys
    /// made or dropped meanwhile.
    pub count: usize,
    /// Calls that found `max` keys none of which could go, and ran under
    /// the spec's own instance, since the start.
    pub overflowed: u64,
    /// Breakers only: keys whose breakers opened on their own and have not
    /// closed since (counted against `keys.max_open_percent`).
    pub ejected: usize,
    /// Breakers only: times a key's breaker would have opened and stayed
    /// closed, `keys.max_open_percent` of the keys being open already.
    pub held_closed: u64,
    /// Every key whose instance is unhealthy now (a breaker open,
    /// half-open or forced open), in text order, each with its state,
    /// whatever [`SHOWN`](Self::SHOWN) lists: what the spec's own instance,
    /// closed and unused, does not show.
    pub unhealthy: Vec<KeyStatus>,
    /// The first [`SHOWN`](Self::SHOWN) keys in text order (byte order:
    /// `"10"` before `"9"`), each with its instance's state; past `SHOWN`
    /// keys, the counts above are the whole picture.
    pub shown: Vec<KeyStatus>,
}

impl KeysSnapshot {
    /// The most keys a snapshot lists.
    pub const SHOWN: usize = 100;
}

/// One key of a [`KeysSnapshot`]: its text and its instance's state.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct KeyStatus {
    /// The key's text.
    #[cfg_attr(feature = "serde", serde(serialize_with = "text"))]
    pub key: Arc<str>,
    #[cfg_attr(
        feature = "serde",
        serde(skip_serializing_if = "Option::is_none", serialize_with = "some_part")
    )]
    status: Option<Arc<dyn Part>>,
    /// Its state in words when it is unhealthy, for readiness.
    #[cfg_attr(feature = "serde", serde(skip))]
    unhealthy: Option<&'static str>,
}

#[cfg(feature = "serde")]
fn text<S: serde::Serializer>(text: &Arc<str>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(text)
}

impl KeyStatus {
    pub(crate) fn new(
        key: Arc<str>,
        status: Option<Arc<dyn Part>>,
        unhealthy: Option<&'static str>,
    ) -> Self {
        Self {
            key,
            status,
            unhealthy,
        }
    }

    /// Its instance's state in words when it is unhealthy (a breaker
    /// `"open"`, `"half_open"`, `"forced_open"`); `None` when healthy.
    pub fn unhealthy(&self) -> Option<&'static str> {
        self.unhealthy
    }

    /// The instance's state now, if it is a `T` (as
    /// [`SpecSnapshot::status`] reads it): a breaker's
    /// [`circuit_breaker::Metrics`](crate::circuit_breaker::Metrics), a
    /// limit's [`concurrency::Places`](crate::concurrency::Places), a rate
    /// limiter's [`rate_limiter::Permits`](crate::rate_limiter::Permits)
    /// (kept in the process).
    pub fn status<T: 'static>(&self) -> Option<&T> {
        let part: &dyn Part = self.status.as_deref()?;
        part.as_any().downcast_ref()
    }
}
