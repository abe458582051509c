//! An operator's actions on a circuit breaker named by its path (and key):
//! what an admin route calls ([`Registry::operate_breaker`]). Nothing here
//! runs unless the application calls it; a path or key that names no
//! breaker is refused, never created (Resilience4j's POST to an unknown
//! name creates a breaker).

use std::sync::Arc;

use super::{Action, Breaker, State};
use crate::registry::Registry;
use crate::spec::SpecKind;
use crate::telemetry::Event;

/// What an action did: [`Registry::operate_breaker`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Operated {
    /// The spec's name.
    pub spec: &'static str,
    /// Its config path.
    pub path: &'static str,
    /// The key whose breaker it acted on; `None` for the spec's own.
    #[cfg_attr(
        feature = "serde",
        serde(serialize_with = "some_key", skip_serializing_if = "Option::is_none")
    )]
    pub key: Option<Arc<str>>,
    /// The action.
    pub action: Action,
    /// The state before.
    pub from: State,
    /// The state after.
    pub to: State,
}

#[cfg(feature = "serde")]
fn some_key<S: serde::Serializer>(key: &Option<Arc<str>>, s: S) -> Result<S::Ok, S::Error> {
    match key {
        Some(key) => s.serialize_some(&**key),
        None => s.serialize_none(),
    }
}

/// Why an action was refused: nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OperateError {
    /// No spec of the registry is at the path.
    #[error("no spec at `{path}`; the circuit breakers are at {}", list(.breakers))]
    NoSpec {
        /// The path asked for.
        path: String,
        /// The paths of the registry's circuit breakers.
        breakers: Vec<&'static str>,
    },
    /// The spec at the path is not a circuit breaker.
    #[error("`{spec}` at `{path}` is a {kind} spec: only a circuit breaker can be forced open, closed, disabled or reset")]
    NotABreaker {
        /// The spec's name.
        spec: &'static str,
        /// Its path.
        path: &'static str,
        /// Its kind.
        kind: SpecKind,
    },
    /// The breaker has no instance for the key: it was never called with
    /// it, or the key was dropped (idle, or past `keys.max`).
    #[error("`{spec}` at `{path}` has no breaker for the key `{key}` (a key has one once a call used it, until it goes idle); nothing was created")]
    NoKey {
        /// The spec's name.
        spec: &'static str,
        /// Its path.
        path: &'static str,
        /// The key asked for.
        key: String,
    },
}

fn list(paths: &[&'static str]) -> String {
    if paths.is_empty() {
        return "none: the registry has no circuit breaker".into();
    }
    paths
        .iter()
        .map(|p| format!("`{p}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Registry {
    /// Acts on the circuit breaker of the spec at `path`, or on the
    /// breaker of its key `key` (an integer key written in decimal): what
    /// an admin route does (see the `admin` module with the `admin`
    /// feature). The action is logged at WARN (target
    /// `resilient::admin`), published as [`Event::Operated`] and kept
    /// among the spec's recent events; a change of state also publishes
    /// its [`Event::StateTransition`].
    ///
    /// A path or key that names no breaker is refused: nothing is made
    /// for it.
    ///
    /// ```
    /// # use resilient_core::Registry;
    /// use resilient_core::circuit_breaker::Action;
    /// # fn demo(registry: &Registry) -> Result<(), resilient_core::circuit_breaker::OperateError> {
    /// let done = registry.operate_breaker("resilient.circuitbreaker.pet", None, Action::ForceOpen)?;
    /// println!("{}: {} -> {}", done.spec, done.from, done.to);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`OperateError`] when no spec is at `path`, it is no circuit
    /// breaker, or it has no breaker for `key`.
    pub fn operate_breaker(
        &self,
        path: &str,
        key: Option<&str>,
        action: Action,
    ) -> Result<Operated, OperateError> {
        let Some((entry, base)) = self.instance_at::<Breaker>(path) else {
            return Err(match self.entry_at(path) {
                Some(entry) => OperateError::NotABreaker {
                    spec: entry.name,
                    path: entry.path,
                    kind: entry.kind,
                },
                None => OperateError::NoSpec {
                    path: path.to_owned(),
                    breakers: self.paths_of(SpecKind::CIRCUIT_BREAKER),
                },
            });
        };
        let breaker = match key {
            None => base,
            Some(key) => self
                .keyed_at::<Breaker>(path)
                .and_then(|keyed| keyed.existing(key))
                .ok_or_else(|| OperateError::NoKey {
                    spec: entry.name,
                    path: entry.path,
                    key: key.to_owned(),
                })?,
        };
        let from = breaker.state();
        match action {
            Action::ForceOpen => breaker.force_open(),
            Action::Disable => breaker.disable(),
            Action::Close => breaker.reset(),
            Action::Reset => {
                breaker.reset();
                breaker.forget_counts();
            }
        }
        let to = breaker.state();
        let t = &breaker.telemetry;
        let key = t.event_key();
        tracing::warn!(
            target: "resilient::admin",
            spec = entry.name, path = entry.path, key = key.as_deref(), action = action.label(), %from, %to,
            "circuit breaker {action} by an operator: {from} -> {to}"
        );
        t.emit(|| Event::Operated {
            spec: entry.name,
            path: entry.path,
            key: key.clone(),
            action,
            from,
            to,
        });
        Ok(Operated {
            spec: entry.name,
            path: entry.path,
            key,
            action,
            from,
            to,
        })
    }
}
