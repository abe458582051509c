//! Configuration that no spec reads, and values that stand where the
//! tables of spec paths go.
//!
//! # Which configuration belongs to resilient
//!
//! The *roots* are the first segment of every spec path, and `resilient`
//! (the global telemetry switches' table): with specs at
//! `resilient.retry.pet` and `app.resilience.retry.card`, the roots are
//! `resilient` and `app`. `resilient` is resilient's whole: every table in
//! it must lead to a spec's section, so a table or a value there that no
//! spec reads (`[resilient.retyr.pet]`, an override of
//! `resilient.retry.pett.attempts`) is a problem, with the nearest spec
//! path suggested. Under a root of the application's own, the first level
//! is the application's too (`app.port`, `app.db`): only the tables that
//! lead to a spec's section are followed, and below them every table must
//! lead on (`[app.resilience.retyr.card]` is reported). Tables outside the
//! roots are never looked at. Inside a spec's own section, an unknown key
//! is the section reader's problem, and is not reported here again.
//!
//! Why the first segment: a section can only be found at its spec's path,
//! so a typo in any later segment leaves a table under the root that
//! nothing reads. The parents of the spec paths (`resilient.retry`) would
//! miss `[resilient.retyr.pet]`; their longest common prefix would change
//! with each spec added, so which typos are caught would depend on the
//! specs linked. A typo in the second segment under an application's root
//! (`[app.resilense.retry.card]`) is not reported here, since that level
//! is the application's; the spec's own missing section still is, with
//! the near one suggested.
//!
//! The check needs every spec that could read a section, so it runs for a
//! registry of every spec linked into the binary (`Registry::builder()`
//! with no `.spec::<S>()`, which `resilient_config::init` uses), at build
//! and at each reload. A registry that names its specs (a test's) knows
//! only those, and a test's configuration may hold the sections of other
//! tests: it is not checked.

use std::collections::BTreeMap;

use crate::settings::{self, Problem, Value};

/// The root that belongs to resilient whole: the global switches' table,
/// and the one the guide's spec paths start in.
pub(super) const RESERVED: &str = "resilient";

/// A path some part of resilient reads: a spec's section, or the global
/// telemetry switches.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Claim {
    pub(crate) name: &'static str,
    pub(crate) path: &'static str,
    /// A section that may be absent (the global telemetry switches, the
    /// Redis backend's): no one reports it missing, so a near miss of it
    /// is reported here.
    pub(crate) optional: bool,
}

impl Claim {
    /// Whose section it is, as a message says it.
    fn owner(&self) -> String {
        if self.optional {
            format!("the {}", self.name)
        } else {
            format!("`{}`", self.name)
        }
    }
}

/// The segments of a spec path before the `n`-th dot, as a `'static` slice
/// of it.
fn head(path: &'static str, n: usize) -> &'static str {
    match path.match_indices('.').nth(n) {
        Some((i, _)) => &path[..i],
        None => path,
    }
}

/// Reports, once each, a value that is not a table where the sections of
/// specs go (`resilient = "on"`), naming those specs; returns the paths of
/// the claims it covers, whose sections are not read (each would report
/// its own "has no section").
pub(crate) fn blocked(
    root: &Value,
    claims: &[Claim],
    problems: &mut Vec<Problem>,
) -> Vec<&'static str> {
    let mut at: BTreeMap<&'static str, (&Value, Vec<Claim>)> = BTreeMap::new();
    for claim in claims {
        let depth = claim.path.matches('.').count();
        for n in 0..depth {
            let prefix = head(claim.path, n);
            match settings::at(root, prefix) {
                Some(Value::Table(_)) => continue,
                None | Some(Value::Nil) => break,
                Some(value) => {
                    at.entry(prefix)
                        .or_insert((value, Vec::new()))
                        .1
                        .push(*claim);
                    break;
                }
            }
        }
    }
    let mut covered = Vec::new();
    for (prefix, (value, claims)) in at {
        let named: Vec<String> = claims
            .iter()
            .map(|c| format!("`{}` (`{}`)", c.name, c.path))
            .collect();
        problems.push(Problem {
            spec: "",
            path: prefix,
            key: String::new(),
            rule: format!(
                "must be a table: the sections of {} are under it; remove the value, or move it out of `{prefix}`",
                named.join(", ")
            ),
            found: Some(value.to_string()),
        });
        covered.extend(claims.iter().map(|c| c.path));
    }
    covered
}

/// Reports every table or value under the roots that no claim reads (see
/// the module docs); `origin` says where the value at a dotted path came
/// from, if its source tells.
pub(crate) fn unread(
    root: &Value,
    claims: &[Claim],
    origin: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<Problem>,
) {
    let mut roots: Vec<&'static str> = claims.iter().map(|c| head(c.path, 0)).collect();
    roots.push(RESERVED);
    roots.sort_unstable();
    roots.dedup();
    for name in roots {
        if let Some(Value::Table(t)) = settings::at(root, name) {
            walk(root, name, name, t, claims, origin, problems);
        }
    }
}

/// [`unread`] below the table `table` at `path`, under the root `top`.
fn walk(
    root: &Value,
    top: &'static str,
    path: &str,
    table: &BTreeMap<String, Value>,
    claims: &[Claim],
    origin: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<Problem>,
) {
    for (key, value) in table {
        if matches!(value, Value::Nil) {
            continue;
        }
        let here = format!("{path}.{key}");
        if claims.iter().any(|c| c.path == here) {
            continue;
        }
        let leads = claims.iter().any(|c| {
            c.path
                .strip_prefix(here.as_str())
                .is_some_and(|r| r.starts_with('.'))
        });
        if leads {
            // A value that is not a table here is reported by [`blocked`].
            if let Value::Table(t) = value {
                walk(root, top, &here, t, claims, origin, problems);
            }
            continue;
        }
        // Directly under a root of the application's own (`app` for specs
        // at `app.resilience.retry.pet`), the other keys are the
        // application's (`app.port`): only `resilient` is resilient's whole.
        if path == top && top != RESERVED {
            continue;
        }
        if let Some(problem) = unclaimed(root, top, &here, value, claims, origin) {
            problems.push(problem);
        }
    }
}

/// The problem of `value` at `path`, which no claim reads; `None` when the
/// spec it was meant for already reports it (its section is missing and
/// this is the near one it suggests).
fn unclaimed(
    root: &Value,
    top: &'static str,
    path: &str,
    value: &Value,
    claims: &[Claim],
    origin: &dyn Fn(&str) -> Option<String>,
) -> Option<Problem> {
    let parts: Vec<&str> = path.split('.').collect();
    // The claim whose leading segments are each the same or close.
    let best = claims
        .iter()
        .filter(|c| c.path.split('.').count() >= parts.len())
        .filter_map(|c| {
            let mut score = 0.0;
            for (written, meant) in parts.iter().zip(c.path.split('.')) {
                let close = if written == &meant {
                    1.0
                } else {
                    settings::similarity(written, meant)
                };
                if close < settings::NEAR {
                    return None;
                }
                score += close;
            }
            Some((score, c))
        })
        .fold(None::<(f64, &Claim)>, |best, (score, c)| match best {
            Some((s, _)) if s >= score => best,
            _ => Some((score, c)),
        })
        .map(|(_, c)| c);
    // Written as far as it follows the claim's path, for the message.
    let mut written: Vec<String> = parts.iter().map(|p| (*p).to_owned()).collect();
    let rule = match best {
        Some(claim) => {
            let mut node = value;
            for meant in claim.path.split('.').skip(parts.len()) {
                let Value::Table(t) = node else { break };
                let next = t
                    .iter()
                    .filter(|(k, _)| {
                        *k == meant || settings::similarity(k, meant) >= settings::NEAR
                    })
                    .max_by(|a, b| {
                        settings::similarity(a.0, meant)
                            .total_cmp(&settings::similarity(b.0, meant))
                    });
                let Some((k, v)) = next else { break };
                written.push(k.clone());
                node = v;
            }
            let whole = written.len() == claim.path.split('.').count();
            if whole
                && !claim.optional
                && matches!(settings::at(root, claim.path), None | Some(Value::Nil))
                && settings::nearest_section(root, claim.path).as_deref()
                    == Some(&written.join("."))
            {
                return None;
            }
            if whole {
                format!(
                    "is read by no spec; did you mean `{}` (the section of {})? A spec reads its section only at the path in its `#[spec(..)]`, so this has no effect",
                    claim.path,
                    claim.owner()
                )
            } else {
                format!(
                    "is read by no spec; did you mean `{}`? A spec reads its section only at the path in its `#[spec(..)]`, so this has no effect",
                    head(claim.path, parts.len() - 1)
                )
            }
        }
        None => {
            let parent = &path[..path.rfind('.').unwrap_or(0)];
            let mut under: Vec<&str> = claims
                .iter()
                .filter_map(|c| {
                    c.path
                        .strip_prefix(parent)?
                        .strip_prefix('.')?
                        .split('.')
                        .next()
                })
                .collect();
            under.sort_unstable();
            under.dedup();
            let under: Vec<String> = under.iter().map(|u| format!("`{u}`")).collect();
            format!(
                "is read by no spec: the specs' sections under `{parent}` go through {}; correct its path, or remove it (`{top}` holds resilient's settings only)",
                under.join(", ")
            )
        }
    };
    let written = written.join(".");
    let rule = match origin(&written) {
        Some(from) => format!("{rule} ({from})"),
        None => rule,
    };
    let key = written
        .strip_prefix(top)
        .and_then(|k| k.strip_prefix('.'))
        .unwrap_or(&written)
        .to_owned();
    Some(Problem {
        spec: "",
        path: top,
        key,
        rule,
        found: match value {
            Value::Table(_) => None,
            other => Some(other.to_string()),
        },
    })
}
