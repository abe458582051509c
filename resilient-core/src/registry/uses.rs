//! What the attributes record of each annotated fn: the spec it uses and
//! how (with a key, its shape, with a chaos outcome), so that startup can
//! name a setting that none of the fns using a spec can make act.
//!
//! The check is a WARN, not a problem: a handle (`for_key`, a stream's own
//! timeout) or a layer may use the setting where no attribute shows it.
//! It looks only at specs that annotated fns use, and says nothing of a
//! spec reached through handles and layers alone.

use std::any::TypeId;

use super::entry::SpecEntry;
use crate::settings::{self, Value};
use crate::spec::SpecKind;

/// The shape of an annotated fn. Not a public API.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// An `async fn`.
    Async,
    /// A plain fn that returns a `Result`.
    Blocking,
    /// A fn that returns a stream.
    Stream,
}

/// One spec used by one annotated fn, recorded by the attribute. Not a
/// public API.
#[doc(hidden)]
#[derive(Debug)]
pub struct Use {
    /// The spec type's [`TypeId`].
    pub spec: fn() -> TypeId,
    /// The fn's path, for the message (`module_path!()` and its name).
    pub module: &'static str,
    /// The fn's name.
    pub name: &'static str,
    /// Whether the attribute has `key = ..`.
    pub keyed: bool,
    /// The fn's shape.
    pub shape: Shape,
    /// Whether a `#[chaos]` names an `outcome`.
    pub outcome: bool,
}

inventory::collect!(Use);

/// A setting of `kind` that acts only through some uses.
struct Rule {
    kind: Option<SpecKind>,
    key: &'static str,
    acts: fn(&Use) -> bool,
    why: &'static str,
}

const RULES: [Rule; 3] = [
    Rule {
        kind: None,
        key: "keys",
        acts: |u| u.keyed,
        why: "bounds the instances of a keyed use, and none of the annotated fns that use the spec gives `key = ..`: add `key = ..` to the attribute of the fn that needs one instance per key, or remove `keys` (a handle's `for_key` reads it too: if one does, keep it)",
    },
    Rule {
        kind: Some(SpecKind::TIMEOUT),
        key: "idle",
        acts: |u| u.shape == Shape::Stream,
        why: "limits the wait between a stream's items, and every annotated fn that uses the spec returns a single value: remove `idle`, or use the spec on a fn that returns a stream",
    },
    Rule {
        kind: Some(SpecKind::CHAOS),
        key: "outcome_rate",
        acts: |u| u.outcome,
        why: "replaces a call's outcome with the fn named by `#[chaos(.., outcome = ..)]`, and no annotated fn that uses the spec names one: add `outcome = ..` to its `#[chaos]`, or remove `outcome_rate`",
    },
];

/// The settings of the specs of `sections` (each spec with its section as
/// read) that no annotated fn using the spec can make act, as WARN lines.
pub(crate) fn no_effect<'a>(
    sections: impl Iterator<Item = (&'a SpecEntry, &'a Value)>,
) -> Vec<String> {
    let uses: Vec<&Use> = inventory::iter::<Use>.into_iter().collect();
    let mut lines = Vec::new();
    for (entry, raw) in sections {
        let id = (entry.type_id)();
        let mine: Vec<&Use> = uses.iter().copied().filter(|u| (u.spec)() == id).collect();
        if mine.is_empty() {
            continue;
        }
        for rule in &RULES {
            let kind_fits = match rule.kind {
                Some(kind) => kind == entry.kind,
                None => entry.keyed(),
            };
            let written = !matches!(settings::at(raw, rule.key), None | Some(Value::Nil));
            if !kind_fits || !written || mine.iter().any(|u| (rule.acts)(u)) {
                continue;
            }
            let fns: Vec<String> = mine
                .iter()
                .map(|u| format!("`{}::{}`", u.module, u.name))
                .collect();
            lines.push(format!(
                "`{}.{}` has no effect: it {} (`{}` is used by {})",
                entry.path,
                rule.key,
                rule.why,
                entry.name,
                fns.join(", ")
            ));
        }
    }
    lines
}
