//! What the attributes record of each annotated fn: the spec it uses and
//! how (with a key, its shape, with a chaos outcome), so that startup can
//! name a setting that none of the fns using a spec can make act.
//!
//! The check is a WARN, not a problem: a handle (`for_key`, a stream's own
//! timeout) or a layer may use the setting where no attribute shows it.
//! It looks only at specs that annotated fns use, and says nothing of a
//! spec reached through handles and layers alone.

use std::any::{Any, TypeId};

use super::entry::SpecEntry;
use crate::keyed::KeySettings;
use crate::settings::{self, Problem, Value};
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

/// A resilience attribute, as the macros name it. Not a public API.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attr {
    /// `#[retryable]`.
    Retry,
    /// `#[circuit_breakable]`.
    CircuitBreaker,
    /// `#[timeout]`.
    Timeout,
    /// `#[concurrency_limit]`.
    ConcurrencyLimit,
    /// `#[rate_limited]`.
    RateLimiter,
    /// `#[fallback]`.
    Fallback,
    /// `#[chaos]`.
    Chaos,
    /// `#[hedged]`.
    Hedging,
}

/// One attribute of an annotated fn, as its chain records it. Not a public
/// API.
#[doc(hidden)]
#[derive(Debug)]
pub struct Link {
    /// The attribute.
    pub attr: Attr,
    /// The spec type's [`TypeId`]; `None` for `#[fallback]`, and for a spec
    /// named by a generic parameter (an item cannot name it).
    pub spec: Option<fn() -> TypeId>,
    /// The `key = ..` expression as written; empty without one.
    pub key: &'static str,
    /// `#[chaos(.., outcome = ..)]`: the fn named; empty without one.
    pub outcome: &'static str,
    /// `#[fallback(method = "..", ..)]`: the method as written, then what
    /// it answers as written (`on = rejection`, `when = PetError::gave_up`;
    /// empty for every failure).
    pub fallback: (&'static str, &'static str),
}

/// An annotated fn's chain, outermost attribute first, recorded by its
/// attributes. Not a public API.
#[doc(hidden)]
#[derive(Debug)]
pub struct FnChain {
    /// `module_path!()` where the fn is.
    pub module: &'static str,
    /// The fn's name.
    pub name: &'static str,
    /// The fn's shape.
    pub shape: Shape,
    /// Its attributes, outermost first.
    pub links: &'static [Link],
}

inventory::collect!(FnChain);

impl FnChain {
    /// Every annotated fn linked into this binary.
    pub(crate) fn all() -> impl Iterator<Item = &'static FnChain> {
        inventory::iter::<FnChain>.into_iter()
    }
}

/// One spec used by one annotated fn.
struct Use<'c> {
    chain: &'c FnChain,
    link: &'c Link,
}

/// A setting of `kind` that acts only through some uses.
struct Rule {
    kind: Option<SpecKind>,
    key: &'static str,
    acts: fn(&Use<'_>) -> bool,
    why: &'static str,
}

const RULES: [Rule; 3] = [
    Rule {
        kind: None,
        key: "keys",
        acts: |u| !u.link.key.is_empty(),
        why: "bounds the instances of a keyed use, and none of the annotated fns that use the spec gives `key = ..`: add `key = ..` to the attribute of the fn that needs one instance per key, or remove `keys`, unless a handle's `for_key` or a `StackLayer`'s `.keyed::<S, _>(..)` keys the spec (they read it too, and this check does not see them)",
    },
    Rule {
        kind: Some(SpecKind::TIMEOUT),
        key: "idle",
        acts: |u| u.chain.shape == Shape::Stream,
        why: "limits the wait between a stream's items, and every annotated fn that uses the spec returns a single value: remove `idle`, or use the spec on a fn that returns a stream",
    },
    Rule {
        kind: Some(SpecKind::CHAOS),
        key: "outcome_rate",
        acts: |u| !u.link.outcome.is_empty(),
        why: "replaces a call's outcome with the fn named by `#[chaos(.., outcome = ..)]`, and no annotated fn that uses the spec names one: add `outcome = ..` to its `#[chaos]`, or remove `outcome_rate`",
    },
];

/// The settings of the specs of `sections` (each spec with its section as
/// read) that no annotated fn using the spec can make act, as WARN lines.
pub(crate) fn no_effect<'a>(
    sections: impl Iterator<Item = (&'a SpecEntry, &'a Value)>,
) -> Vec<String> {
    let uses: Vec<Use<'_>> = FnChain::all()
        .flat_map(|chain| chain.links.iter().map(move |link| Use { chain, link }))
        .collect();
    let mut lines = Vec::new();
    for (entry, raw) in sections {
        let id = (entry.type_id)();
        let mine: Vec<&Use<'_>> = uses
            .iter()
            .filter(|u| u.link.spec.is_some_and(|spec| spec() == id))
            .collect();
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
                .map(|u| format!("`{}::{}`", u.chain.module, u.chain.name))
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

/// A check of specs against each other, registered by a module above the
/// registry (which names no mechanism): given every spec of a registry
/// with its settings (as read, before they apply), what it finds.
pub(crate) struct CrossCheck {
    pub(crate) run: fn(&[Checked<'_>]) -> Vec<Finding>,
}

/// A spec with its settings, as read, for a [`CrossCheck`], and its `keys`
/// table (or its defaults) if it takes `key = ..`.
pub(crate) type Checked<'a> = (
    &'a SpecEntry,
    &'a (dyn Any + Send + Sync),
    Option<&'a KeySettings>,
);

inventory::collect!(CrossCheck);

/// What a [`CrossCheck`] finds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Finding {
    /// The combination cannot do what it says: the registry is not built
    /// (a reload is refused).
    Problem(Problem),
    /// It may be meant: logged at WARN.
    Warn(String),
}

impl Finding {
    /// What tells two findings apart (the same pair of specs in two fns
    /// is one finding).
    pub(crate) fn key(&self) -> String {
        match self {
            Finding::Problem(p) => p.to_string(),
            Finding::Warn(w) => w.clone(),
        }
    }
}

/// Runs every [`CrossCheck`] over `specs`: problems into `problems`,
/// warnings returned.
pub(crate) fn cross_check(specs: &[Checked<'_>], problems: &mut Vec<Problem>) -> Vec<String> {
    let mut warnings = Vec::new();
    for check in inventory::iter::<CrossCheck> {
        for finding in (check.run)(specs) {
            match finding {
                Finding::Problem(p) => problems.push(p),
                Finding::Warn(w) => warnings.push(w),
            }
        }
    }
    warnings
}
