//! What the registry needs of a mechanism: the [`Mechanism`] trait each
//! mechanism's instance implements, and what its keyed instances share
//! ([`KeyShare`]). Nothing here names a mechanism.

use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

use super::shared::Context;
use super::snapshot::Part;
use crate::settings::Section;
use crate::spec::SpecKind;
use crate::telemetry::{Outcome, Telemetry};

mod sealed {
    pub trait Sealed {}
}
pub(crate) use sealed::Sealed;

/// A resilience mechanism, as the registry sees it: the shared instance of
/// one spec, built from settings read from the spec's section, reconfigured
/// in place by a reload, and shown in the snapshot.
///
/// Implemented by the instance type of each mechanism of this crate
/// ([`retry::Retry`](crate::retry::Retry),
/// [`circuit_breaker::Breaker`](crate::circuit_breaker::Breaker), ...); the
/// registry, the telemetry and the snapshot know no mechanism but through
/// it. Sealed: only this crate implements it while its shape settles.
pub trait Mechanism: Sealed + Send + Sync + Sized + 'static {
    /// The kind of spec it serves.
    const KIND: SpecKind;

    /// The outcomes a call through it can have, for metrics.
    #[doc(hidden)]
    const OUTCOMES: &'static [Outcome];

    /// The settings of one spec, read from its section.
    type Settings: Part + Clone + PartialEq;

    /// Reads and validates a spec's section, recording every problem in
    /// `section`; `None` when there was one.
    fn read(section: &mut Section<'_>) -> Option<Self::Settings>;

    /// A new instance running `settings`.
    fn build(settings: Self::Settings, telemetry: Telemetry) -> Self;

    /// Runs `settings` from now on, for the calls that start afterwards,
    /// keeping the state that fits them. Returns what of the state did not
    /// carry over, in words, for the reload's log line (empty when all
    /// did).
    fn reconfigure(&self, settings: Self::Settings) -> Vec<String>;

    /// The settings running now.
    fn settings(&self) -> &Self::Settings;

    /// The instance's telemetry.
    fn telemetry(&self) -> &Telemetry;

    /// Its state now, for the snapshot; `None` for a mechanism without
    /// state worth showing.
    fn status(&self) -> Option<Arc<dyn Part>>;

    /// Whether a spec of this mechanism takes `key = ..` (one instance per
    /// key, see [`keyed`](crate::keyed)).
    #[doc(hidden)]
    const KEYED: bool = false;

    /// Whether its keyed instances can be "ejected" (a breaker that opens on
    /// its own), and so take `keys.max_open_percent`.
    #[doc(hidden)]
    const EJECTS: bool = false;

    /// A keyed instance just built learns what its keys share: the count
    /// of keys and of ejected ones (see [`KeyShare`]).
    #[doc(hidden)]
    fn join(&self, _share: &Arc<KeyShare>) {}

    /// A keyed instance was just dropped from its spec's keys (no call or
    /// handle holds it): what it holds of the share goes back now, not when
    /// its memory is freed (the map frees removed entries in batches).
    #[doc(hidden)]
    fn evicted(&self) {}

    /// Whether a fresh instance would be the same as this one now, so that a
    /// keyed instance can be dropped without losing anything a call would
    /// notice: a closed breaker, a limit with no place taken, a rate limiter
    /// with no permit spent in its window.
    #[doc(hidden)]
    fn evictable(&self) -> bool {
        true
    }

    /// Whether its state can be unhealthy (a breaker's), so that its spec
    /// takes a `readiness` rule.
    #[doc(hidden)]
    const READINESS: bool = false;

    /// Its state in words if it is unhealthy now (a breaker open,
    /// half-open or forced open: `"open"`, `"half_open"`,
    /// `"forced_open"`); `None` when healthy. A keyed instance that is not
    /// is listed in the snapshot's `keys.unhealthy`.
    #[doc(hidden)]
    fn unhealthy(&self) -> Option<&'static str> {
        None
    }

    /// What the registry's own sections built (a shared backend), given
    /// to each instance it builds.
    #[doc(hidden)]
    fn attach(&self, _context: &Context) {}

    /// A keyed instance just built, for `key`, takes what `base`, the
    /// spec's own instance, was attached to.
    #[doc(hidden)]
    fn inherit(&self, _base: &Self, _key: crate::keyed::KeyRef<'_>) {}

    /// A problem with `settings` in a registry whose own sections built
    /// `context` (a backend named and not configured), as key and rule.
    #[doc(hidden)]
    fn check(_settings: &Self::Settings, _context: &Context) -> Option<(&'static str, String)> {
        None
    }

    /// Its telemetry's switches were just set again (by a reload): a
    /// mechanism with metrics of its own registers them if metrics are now
    /// on, and brings its gauges up to date (they did not move while
    /// metrics were off).
    fn telemetry_switched(&self) {}
}

/// What the keyed instances of one spec share: how many keys there are,
/// and how many of them are ejected (breakers that opened on their own),
/// against `keys.max_open_percent`. Not a public API.
#[derive(Debug)]
pub struct KeyShare {
    /// Keys with an instance now, as the keyed store last counted them.
    pub(super) keys: AtomicUsize,
    ejected: AtomicUsize,
    /// `keys.max_open_percent`.
    pub(super) percent: AtomicU8,
    /// Ejections refused by the cap, since the start.
    held: AtomicU64,
}

impl KeyShare {
    pub(super) fn new(percent: u8) -> Self {
        Self {
            keys: AtomicUsize::new(0),
            ejected: AtomicUsize::new(0),
            percent: AtomicU8::new(percent),
            held: AtomicU64::new(0),
        }
    }

    /// Takes one ejection, if fewer than `max_open_percent` of the keys
    /// (at least one) are ejected now; counts a refusal otherwise.
    pub(crate) fn try_eject(&self) -> bool {
        let keys = self.keys.load(Ordering::Relaxed);
        let percent = usize::from(self.percent.load(Ordering::Relaxed));
        let allowed = (keys.saturating_mul(percent) / 100).max(1);
        let taken = self
            .ejected
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |e| {
                (e < allowed).then_some(e + 1)
            })
            .is_ok();
        if !taken {
            self.held.fetch_add(1, Ordering::Relaxed);
        }
        taken
    }

    /// Gives an ejection back: the breaker closed, or went.
    pub(crate) fn release(&self) {
        let _ = self
            .ejected
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |e| e.checked_sub(1));
    }

    /// Keys ejected now, and how many ejections the cap refused.
    pub(crate) fn ejections(&self) -> (usize, u64) {
        (
            self.ejected.load(Ordering::Relaxed),
            self.held.load(Ordering::Relaxed),
        )
    }
}
