//! Registry-level sections that are no spec's: read once per registry,
//! their value handed to every instance it builds (a shared backend, say).
//! A mechanism names what it needs by type; the registry names none.

use std::any::{Any, TypeId};
use std::sync::Arc;

use super::readiness::ReadinessRule;
use crate::error::State;
use crate::settings::{Problem, Value};
use crate::telemetry::{BackendState, Listeners, Recorded, Switches};

/// A spec that uses a shared backend, and what its calls get while the
/// backend is down: in a [`BackendSnapshot`]. Also `backend::BackendUse`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct BackendUse {
    /// The spec's name.
    pub spec: &'static str,
    /// Its config path.
    pub path: &'static str,
    /// Its `on_backend_failure` (a retry spec's
    /// `retry_budget.on_backend_failure`): `"deny"`, `"allow"` or
    /// `"local"`.
    pub on_backend_failure: &'static str,
}

/// A registry's shared backend in its snapshot: whether it answers, since
/// when, and the specs that use it with their policy while it does not
/// (see [`Snapshot::backends`](crate::Snapshot::backends)). Also
/// `backend::BackendSnapshot`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct BackendSnapshot {
    /// Which backend: `"redis"`.
    pub backend: &'static str,
    /// Its section's path.
    pub path: &'static str,
    /// Where it is, without its password.
    pub url: String,
    /// Whether it answers now.
    pub state: BackendState,
    /// When it entered `state`, in ms since the Unix epoch; `None` while
    /// unknown.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub since_ms: Option<u64>,
    /// Decisions that failed since the start.
    pub failures: u64,
    /// Its own circuit breaker's state: while open, no decision is tried
    /// and each spec's policy applies at once.
    pub breaker: State,
    /// What it down makes of the service's readiness (the section's
    /// `readiness`).
    pub readiness: ReadinessRule,
    /// The specs that use it, in path order, and their policy while it is
    /// down.
    pub used_by: Vec<BackendUse>,
}

/// A registry-level section, recorded with `inventory::submit!` by the
/// module that reads it.
#[derive(Clone, Copy)]
pub(crate) struct SectionEntry {
    /// The name its problems go by.
    pub(crate) name: &'static str,
    /// Its absolute config path.
    pub(crate) path: &'static str,
    /// Reads and validates the section of `root` (absent is fine: `None`
    /// then), recording every problem; builds what it describes, its
    /// telemetry reporting to `listeners` with the global `switches`.
    pub(crate) build: BuildSection,
    /// The WARN of the section present while none of the specs' sections
    /// (as read) would use it, if it can have no effect then.
    pub(crate) unused: fn(sections: &[&Value]) -> Option<String>,
    /// What it built, as the snapshot shows it, given the specs' sections
    /// as read (name, path, section); `None` when it shows nothing.
    pub(crate) snapshot: ShowSection,
    /// The recent events of what it built (its own telemetry's) newer than
    /// `after`, into `out`.
    pub(crate) recent: fn(part: &(dyn Any + Send + Sync), after: u64, out: &mut Vec<Recorded>),
}

/// What a registry-level section built, by its type.
pub(crate) type Part = Arc<dyn Any + Send + Sync>;

/// The specs' sections as read: each spec's name, path and section.
pub(crate) type Sections<'a> = [(&'static str, &'static str, &'a Value)];

/// See [`SectionEntry::snapshot`].
pub(crate) type ShowSection =
    fn(part: &(dyn Any + Send + Sync), sections: &Sections<'_>) -> Option<BackendSnapshot>;

/// See [`SectionEntry::build`].
pub(crate) type BuildSection = fn(
    root: &Value,
    problems: &mut Vec<Problem>,
    listeners: &Arc<Listeners>,
    switches: Switches,
) -> Option<Part>;

inventory::collect!(SectionEntry);

impl std::fmt::Debug for SectionEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SectionEntry")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SectionEntry {
    /// Every such section linked into this binary.
    pub(crate) fn all() -> impl Iterator<Item = &'static SectionEntry> {
        inventory::iter::<SectionEntry>.into_iter()
    }
}

/// What the registry-level sections of one registry built, by type: what a
/// mechanism's instance is given when it is built
/// ([`Mechanism::attach`](super::Mechanism::attach)). Not a public API.
#[doc(hidden)]
#[derive(Clone, Default)]
pub struct Context {
    /// What each section built, by its type, with the section's path.
    parts: Vec<(TypeId, &'static str, Part)>,
    /// The paths of the sections present, valid or not.
    present: Vec<&'static str>,
    /// Each section as it was when built (name, path, value), for a
    /// reload to tell that one changed.
    read: Vec<(&'static str, &'static str, Option<Value>)>,
    /// The near miss of each absent section (`resilient.rediss` for
    /// `resilient.redis`), for a spec that needs the section to name it.
    near: Vec<(&'static str, String)>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("parts", &self.parts.len())
            .finish()
    }
}

impl Context {
    /// Builds every registry-level section of `root`.
    pub(crate) fn build(
        root: &Value,
        problems: &mut Vec<Problem>,
        listeners: &Arc<Listeners>,
        switches: Switches,
    ) -> Self {
        let present = SectionEntry::all()
            .filter(|entry| crate::settings::at(root, entry.path).is_some())
            .map(|entry| entry.path)
            .collect();
        let parts = SectionEntry::all()
            .filter_map(|entry| {
                let part = (entry.build)(root, problems, listeners, switches)?;
                Some(((*part).type_id(), entry.path, part))
            })
            .collect();
        let read = SectionEntry::all()
            .map(|e| (e.name, e.path, crate::settings::at(root, e.path).cloned()))
            .collect();
        let near = SectionEntry::all()
            .filter(|e| crate::settings::at(root, e.path).is_none())
            .filter_map(|e| Some((e.path, crate::settings::nearest_section(root, e.path)?)))
            .collect();
        Self {
            parts,
            present,
            read,
            near,
        }
    }

    /// The WARN of each section present that none of `sections` (the
    /// specs' sections as read) uses.
    pub(crate) fn unused(&self, sections: &[&Value]) -> Vec<String> {
        SectionEntry::all()
            .filter(|e| self.present(e.path))
            .filter_map(|e| (e.unused)(sections))
            .collect()
    }

    /// The near miss of the absent section at `path`, if there is one.
    pub(crate) fn near(&self, path: &str) -> Option<&str> {
        self.near
            .iter()
            .find(|(p, _)| *p == path)
            .map(|(_, near)| near.as_str())
    }

    /// Drops the problem of a near miss of a section ("read by no spec")
    /// when a spec's problem already names it as the section it needs:
    /// one mistake, one problem.
    pub(crate) fn dedupe_near(&self, problems: &mut Vec<Problem>) {
        for (_, near) in &self.near {
            let named = format!("did you mean `[{near}]`?");
            if problems
                .iter()
                .any(|p| !p.spec.is_empty() && p.rule.contains(&named))
            {
                problems.retain(|p| {
                    !(p.spec.is_empty()
                        && p.key.len() + 1 + p.path.len() == near.len()
                        && near.starts_with(p.path)
                        && near.ends_with(p.key.as_str()))
                });
            }
        }
    }

    /// A problem for each section that differs in `root` from what was
    /// built: they are read when the registry is built, and a reload does
    /// not build them again.
    pub(crate) fn changed(&self, root: &Value) -> Vec<Problem> {
        self.read
            .iter()
            .filter(|(_, path, was)| crate::settings::at(root, path) != was.as_ref())
            .map(|(name, path, _)| Problem {
                spec: name,
                path,
                key: String::new(),
                rule: "changed, and it is read when the registry is built: restart the application to apply it (this reload changed nothing)".into(),
                found: None,
            })
            .collect()
    }

    /// Whether the section at `path` is in the configuration, valid or not.
    pub(crate) fn present(&self, path: &str) -> bool {
        self.present.contains(&path)
    }

    /// The part of type `T`, if its section was configured.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.parts
            .iter()
            .find(|(id, _, _)| *id == TypeId::of::<T>())
            .and_then(|(_, _, part)| Arc::clone(part).downcast::<T>().ok())
    }

    /// Each section that built something to show, as the snapshot shows it.
    pub(crate) fn snapshots(&self, sections: &Sections<'_>) -> Vec<BackendSnapshot> {
        self.parts
            .iter()
            .filter_map(|(_, path, part)| {
                let entry = SectionEntry::all().find(|e| e.path == *path)?;
                (entry.snapshot)(&**part, sections)
            })
            .collect()
    }

    /// The recent events of what the sections built, newer than `after`.
    pub(crate) fn recent(&self, after: u64, out: &mut Vec<Recorded>) {
        for (_, path, part) in &self.parts {
            if let Some(entry) = SectionEntry::all().find(|e| e.path == *path) {
                (entry.recent)(&**part, after, out);
            }
        }
    }
}
