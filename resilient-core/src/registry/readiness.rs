//! Readiness: what the state of the registry's specs makes of the
//! service's readiness, by each spec's `readiness` rule, computed from a
//! [`Snapshot`] (see [`Snapshot::readiness`]).
//!
//! An open breaker does not take the service out of rotation unless its
//! spec asks for it: the default rule is `degraded`, reported and never
//! failing. A breaker wired into a health check that failed on open took
//! Spinnaker's `echo` out of its load balancer (spinnaker/echo#706), which
//! is why Resilience4j keeps its health indicator opt-in and not failing
//! (`allowHealthIndicatorToFail`, false by default).

use std::sync::Arc;

use super::entry::SpecEntry;
use super::snapshot::{Snapshot, SpecSnapshot};
use crate::settings::Section;
use crate::telemetry::BackendState;

/// What an unhealthy state of a spec (a circuit breaker open, half-open or
/// forced open) makes of the service's readiness: the `readiness` key of a
/// circuit breaker spec's section.
///
/// | key | default | rule |
/// |---|---|---|
/// | `readiness` | `"degraded"` | `"ignore"`, `"degraded"` or `"not_ready"`: what this breaker open, half-open or forced open makes of the service's readiness (`Snapshot::readiness`); a keyed breaker's keys count as `not_ready` only when every key is unhealthy, else as `degraded` at most; circuit breaker specs only |
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize),
    serde(rename_all = "snake_case")
)]
#[non_exhaustive]
pub enum ReadinessRule {
    /// Not reported at all.
    Ignore,
    /// Reported as a reason, and the service is
    /// [`Ready::Degraded`]: still ready, a probe answers 200.
    #[default]
    Degraded,
    /// The service is [`Ready::NotReady`]: a probe answers 503 and the
    /// load balancer stops sending it traffic.
    NotReady,
}

impl ReadinessRule {
    /// The value as the config writes it.
    pub const fn label(self) -> &'static str {
        match self {
            ReadinessRule::Ignore => "ignore",
            ReadinessRule::Degraded => "degraded",
            ReadinessRule::NotReady => "not_ready",
        }
    }

    /// Reads `readiness` from a spec's section: `Some(None)` for a spec of
    /// a kind that takes none (and has none), `None` for a problem
    /// (recorded).
    pub(crate) fn read(s: &mut Section<'_>, entry: &SpecEntry) -> Option<Option<Self>> {
        if !entry.takes_readiness() {
            if s.present("readiness") {
                let kind = entry.kind;
                s.invalid(
                    "readiness",
                    format!(
                        "has no effect on a {kind} spec: only a circuit breaker's state (open, half-open, forced open) counts for readiness; remove the key, or set it in the section of the breaker whose state should count"
                    ),
                );
                return None;
            }
            return Some(None);
        }
        Self::read_key(s).map(Some)
    }

    /// Reads the key `readiness` of a section that takes it.
    pub(crate) fn read_key(s: &mut Section<'_>) -> Option<Self> {
        let choice = s.choice(
            "readiness",
            &["ignore", "degraded", "not_ready"],
            "degraded",
        )?;
        Some(match choice {
            "ignore" => ReadinessRule::Ignore,
            "not_ready" => ReadinessRule::NotReady,
            _ => ReadinessRule::Degraded,
        })
    }

    pub(crate) fn code(self) -> u8 {
        match self {
            ReadinessRule::Ignore => 1,
            ReadinessRule::Degraded => 2,
            ReadinessRule::NotReady => 3,
        }
    }

    pub(crate) fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(ReadinessRule::Ignore),
            2 => Some(ReadinessRule::Degraded),
            3 => Some(ReadinessRule::NotReady),
            _ => None,
        }
    }
}

/// Whether the service is ready, as the registry's state says: see
/// [`Snapshot::readiness`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize),
    serde(rename_all = "snake_case")
)]
#[non_exhaustive]
pub enum Ready {
    /// Nothing unhealthy that a rule reports.
    Ready,
    /// Something unhealthy whose rule is `degraded`: still ready.
    Degraded,
    /// Something unhealthy whose rule is `not_ready`.
    NotReady,
}

impl Ready {
    /// Whether a readiness probe should pass: `Ready` and `Degraded`.
    pub fn is_ready(self) -> bool {
        self != Ready::NotReady
    }

    /// The HTTP status a readiness probe answers with: 200, or 503 when
    /// not ready.
    pub fn http_status(self) -> u16 {
        if self.is_ready() {
            200
        } else {
            503
        }
    }
}

/// The readiness of a service as the registry's state says, with each
/// reason: [`Snapshot::readiness`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Readiness {
    /// The verdict: the worst of the reasons' effects.
    pub status: Ready,
    /// Each unhealthy spec (or key, or backend) whose rule reports it, in
    /// path order.
    pub reasons: Vec<Reason>,
}

/// Something unhealthy in a [`Readiness`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Reason {
    /// The spec's name (the backend's, for a shared backend).
    pub spec: &'static str,
    /// Its config path.
    pub path: &'static str,
    /// The key of a keyed instance; `None` for the spec's own.
    #[cfg_attr(
        feature = "serde",
        serde(serialize_with = "some_key", skip_serializing_if = "Option::is_none")
    )]
    pub key: Option<Arc<str>>,
    /// Its state in words, as the snapshot writes it (`"open"`,
    /// `"half_open"`, `"forced_open"`; `"down"` for a backend).
    pub state: &'static str,
    /// The rule of its spec.
    pub rule: ReadinessRule,
    /// What it does to readiness: the rule, or `degraded` for a key of a
    /// keyed spec while some of its keys are healthy.
    pub effect: Ready,
}

#[cfg(feature = "serde")]
fn some_key<S: serde::Serializer>(key: &Option<Arc<str>>, s: S) -> Result<S::Ok, S::Error> {
    match key {
        Some(key) => s.serialize_some(&**key),
        None => s.serialize_none(),
    }
}

fn effect(rule: ReadinessRule) -> Ready {
    match rule {
        ReadinessRule::NotReady => Ready::NotReady,
        _ => Ready::Degraded,
    }
}

/// The reasons of one spec of a snapshot, into `out`.
fn spec_reasons(spec: &SpecSnapshot, out: &mut Vec<Reason>) {
    let Some(rule) = spec.readiness.filter(|r| *r != ReadinessRule::Ignore) else {
        return;
    };
    let reason = |key: Option<Arc<str>>, state, effect| Reason {
        spec: spec.spec,
        path: spec.path,
        key,
        state,
        rule,
        effect,
    };
    if let Some(state) = spec.unhealthy() {
        out.push(reason(None, state, effect(rule)));
    }
    let Some(keys) = spec.keys() else { return };
    // One bad host of many must not take every replica out of rotation
    // (each replica sees the same host): keys count in full only when
    // every one of them is unhealthy.
    let all = !keys.unhealthy.is_empty() && keys.unhealthy.len() >= keys.count;
    for key in &keys.unhealthy {
        if let Some(state) = key.unhealthy() {
            let effect = if all { effect(rule) } else { Ready::Degraded };
            out.push(reason(Some(Arc::clone(&key.key)), state, effect));
        }
    }
}

impl Snapshot {
    /// The service's readiness as this snapshot says, by each spec's
    /// `readiness` rule (a circuit breaker's; see [`ReadinessRule`]).
    ///
    /// A breaker open, half-open or forced open is a reason, unless its
    /// rule is `ignore`, and so is a shared backend that is down (its
    /// section's `readiness`, `degraded` by default); with `degraded` (the default) the service stays
    /// ready, with `not_ready` it is not. A keyed breaker's keys are
    /// reasons each, and count as `not_ready` only when every key of the
    /// spec is unhealthy: one host down must not take every replica out
    /// of rotation.
    ///
    /// ```
    /// # use resilient_core::{Registry, registry::Ready};
    /// # fn demo(registry: &Registry) {
    /// let readiness = registry.snapshot().readiness();
    /// let status = readiness.status.http_status(); // 200, or 503 when not ready
    /// for reason in &readiness.reasons {
    ///     println!("{} {}: {}", reason.spec, reason.state, reason.rule.label());
    /// }
    /// # }
    /// ```
    pub fn readiness(&self) -> Readiness {
        let mut reasons = Vec::new();
        for spec in &self.specs {
            spec_reasons(spec, &mut reasons);
        }
        for backend in &self.backends {
            if backend.state == BackendState::Down && backend.readiness != ReadinessRule::Ignore {
                reasons.push(Reason {
                    spec: backend.backend,
                    path: backend.path,
                    key: None,
                    state: backend.state.label(),
                    rule: backend.readiness,
                    effect: effect(backend.readiness),
                });
            }
        }
        let status = reasons
            .iter()
            .map(|r| r.effect)
            .max()
            .unwrap_or(Ready::Ready);
        Readiness { status, reasons }
    }
}
