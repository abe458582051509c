//! Reading one spec's section of the configuration.
//!
//! This module owns the value tree that settings are read from, the [`Problem`]
//! type that every validation rule reports, and [`Section`], the reader each
//! mechanism's settings use. It does not know where values come from: the
//! `resilient-config` crate turns a `config::Config` into a [`Value`] tree.
//!
//! A mechanism's `read` function asks the section for each key it knows, with
//! the key's rule. Whatever key was never asked for is reported as unknown, with
//! the nearest known key suggested, so the list of keys lives in one place.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

/// How settings show their durations when serialized: as the config
/// writes them (`"100ms"`), not as seconds and nanoseconds.
#[cfg(feature = "serde")]
pub(crate) mod ser {
    use std::time::Duration;

    pub(crate) fn duration<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&humantime::format_duration(*d))
    }

    pub(crate) fn option_duration<S: serde::Serializer>(
        d: &Option<Duration>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => duration(d, s),
            None => s.serialize_none(),
        }
    }
}

/// A configuration value, as read from a file or the environment.
///
/// Environment variables arrive as strings; numbers and booleans are therefore
/// also accepted in their string form (`"3"`, `"true"`).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A missing value (`config`'s `Nil`).
    Nil,
    /// `true` or `false`.
    Bool(bool),
    /// A whole number.
    Int(i128),
    /// A number with a fraction.
    Float(f64),
    /// A string, such as a duration (`"100ms"`).
    Str(String),
    /// A list of values.
    List(Vec<Value>),
    /// A table of keys to values.
    Table(BTreeMap<String, Value>),
}

/// Dropped without recursion: a value from a source that allows any depth
/// (a JSON file, a `config::Source` of the application's) can be nested
/// deeper than a thread's stack could follow, and is dropped wherever the
/// registry drops its copies.
impl Drop for Value {
    fn drop(&mut self) {
        let mut pending = Vec::new();
        take_children(self, &mut pending);
        while let Some(mut value) = pending.pop() {
            // Emptied first, so that dropping it here recurses no further.
            take_children(&mut value, &mut pending);
        }
    }
}

/// Moves the items of a list or table `value` into `into`, leaving it empty.
fn take_children(value: &mut Value, into: &mut Vec<Value>) {
    match value {
        Value::List(items) => into.append(items),
        Value::Table(t) => into.extend(std::mem::take(t).into_values()),
        _ => {}
    }
}

/// How deep a table or list may be nested below the root of the
/// configuration and still be read: far beyond any section's own depth (a
/// spec path of a few segments, then its nested tables), and far below what
/// the checks that follow a value could not follow on a thread's stack.
pub const MAX_DEPTH: usize = 64;

/// The first value at or below `path` in `root` nested more than
/// [`MAX_DEPTH`] levels below the root: the dotted key of the value found
/// at that depth (below `path`; its first levels, then `…`) and how deep
/// the deepest value under it goes. Walks the tree without recursion, so any depth is measured.
pub(crate) fn too_deep(root: &Value, path: &str) -> Option<(String, usize)> {
    let start = at(root, path)?;
    let base = path.split('.').count();
    // Each value met, with its parent's index here and its own key: the
    // way back to `path` from a value found too deep.
    let mut trail: Vec<(usize, Step<'_>)> = Vec::new();
    let mut stack: Vec<(&Value, usize, usize, Step<'_>)> = vec![(start, base, 0, Step::Start)];
    while let Some((value, depth, parent, step)) = stack.pop() {
        let me = trail.len();
        trail.push((parent, step));
        if depth > MAX_DEPTH {
            let mut steps = Vec::new();
            let mut i = me;
            while let (up, step @ (Step::Key(_) | Step::Item(_))) = trail[i] {
                steps.push(step);
                i = up;
            }
            steps.reverse();
            // The first levels name the value; the rest only repeats.
            const SHOWN: usize = 8;
            let mut key = String::new();
            for step in steps.iter().take(SHOWN) {
                match step {
                    Step::Key(k) if key.is_empty() => key.push_str(k),
                    Step::Key(k) => {
                        key.push('.');
                        key.push_str(k);
                    }
                    Step::Item(n) => key.push_str(&format!("[{n}]")),
                    Step::Start => {}
                }
            }
            match steps.get(SHOWN) {
                Some(Step::Key(_)) => key.push_str(".…"),
                Some(_) => key.push('…'),
                None => {}
            }
            return Some((key, deepest(value, depth)));
        }
        match value {
            Value::Table(t) => {
                stack.extend(t.iter().map(|(k, v)| (v, depth + 1, me, Step::Key(k))));
            }
            Value::List(items) => {
                stack.extend(
                    items
                        .iter()
                        .enumerate()
                        .map(|(n, v)| (v, depth + 1, me, Step::Item(n))),
                );
            }
            _ => {}
        }
    }
    None
}

/// One step down a value tree, for [`too_deep`]'s way back.
#[derive(Debug, Clone, Copy)]
enum Step<'v> {
    Start,
    Key(&'v str),
    Item(usize),
}

/// The depth of the deepest value below `value`, itself at `depth`.
fn deepest(value: &Value, depth: usize) -> usize {
    let mut stack = vec![(value, depth)];
    let mut max = depth;
    while let Some((value, depth)) = stack.pop() {
        max = max.max(depth);
        match value {
            Value::Table(t) => stack.extend(t.values().map(|v| (v, depth + 1))),
            Value::List(items) => stack.extend(items.iter().map(|v| (v, depth + 1))),
            _ => {}
        }
    }
    max
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Nil => f.write_str("nothing"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Float(x) => write!(f, "{x}"),
            Value::Str(s) => write_str_value(f, s),
            Value::List(_) => f.write_str("a list"),
            Value::Table(_) => f.write_str("a table"),
        }
    }
}

/// How many characters of a string value a problem echoes: enough to
/// recognise it, not a whole file pasted into a setting.
const ECHO_MAX: usize = 80;

/// A string value, quoted; a long one cut after [`ECHO_MAX`] characters, with
/// its length, so that a huge value does not make a huge message.
fn write_str_value(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    match s.char_indices().nth(ECHO_MAX) {
        None => write!(f, "{s:?}"),
        Some((cut, _)) => {
            let quoted = format!("{:?}", &s[..cut]);
            let open = quoted.strip_suffix('"').unwrap_or(&quoted);
            write!(f, "{open}…\" ({} characters)", s.chars().count())
        }
    }
}

/// One thing wrong with one spec's configuration.
///
/// Its `Display` names the spec type, its path, the key, the rule that failed,
/// and the value found, so that a user reading it knows what to change.
///
/// A problem that no one spec owns (a section that no spec reads, a value
/// where the tables of several specs' paths go) has an empty `spec`: its
/// `path` and `key` then make the dotted path of the value, and it displays
/// as `` `resilient.retyr.pet` is read by no spec; .. ``.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The spec type's name, such as `PetRetry`.
    pub spec: &'static str,
    /// The spec's absolute config path, such as `resilient.retry.pet`.
    pub path: &'static str,
    /// The key below the path, dotted for nested keys (`backoff.multiplier`).
    /// Empty when the problem is the whole section.
    pub key: String,
    /// What is expected, or what is wrong, in words.
    pub rule: String,
    /// The value found, if there was one.
    pub found: Option<String>,
}

/// How the problem of a key no reader of its table knows begins (the
/// registry finds these by it, to say where such a key was written).
pub(crate) const UNKNOWN_KEY: &str = "is not a known setting";

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.spec.is_empty() {
            let dot = if self.key.is_empty() { "" } else { "." };
            write!(f, "`{}{dot}{}` {}", self.path, self.key, self.rule)?;
        } else if self.key.is_empty() {
            write!(f, "{} at `{}`: {}", self.spec, self.path, self.rule)?;
        } else {
            write!(
                f,
                "{} at `{}`: key `{}` {}",
                self.spec, self.path, self.key, self.rule
            )?;
        }
        if let Some(found) = &self.found {
            write!(f, " (found {found})")?;
        }
        Ok(())
    }
}

/// The rule of a duration written with a minus sign.
const NEGATIVE: &str = "must not be negative: a duration is a wait or a limit, from \"0s\" up";

/// The rule of a duration too large (or too precise) for `Duration`.
const OUT_OF_RANGE: &str = "is out of range: a duration is at most about 584 billion years, in whole nanoseconds; use a smaller value";

/// A reader over one table of a spec's section that records every problem.
///
/// Each accessor takes the key and returns the value if it is present and valid;
/// otherwise it records a [`Problem`] and returns `None`. [`Section::finish`]
/// reports the keys nobody asked for.
#[derive(Debug)]
pub struct Section<'a> {
    spec: &'static str,
    path: &'static str,
    prefix: String,
    table: Option<&'a BTreeMap<String, Value>>,
    /// The keys a reader asked for: the settings of this table.
    known: Vec<&'static str>,
    /// The keys of each nested table among `known`, dotted below it: what
    /// the list of known settings shows for a table.
    nested: Vec<(&'static str, Vec<String>)>,
    /// Names other libraries give to settings of this table (see
    /// [`Section::alias`]).
    aliases: Vec<Alias>,
    /// Keys reported in a rule of their own (written one level too high):
    /// not settings here, and not reported again as unknown.
    handled: Vec<&'static str>,
    problems: &'a mut Vec<Problem>,
    /// Every key asked for, dotted from the section: what a reader
    /// accepts (see [`accepted_keys`]).
    asked: Option<&'a RefCell<Vec<String>>>,
}

impl<'a> Section<'a> {
    /// Starts reading the section of `spec` found at `path` in `root`.
    ///
    /// A missing section, or a value that is not a table, is recorded as a
    /// problem; the reader then yields `None` for every key.
    pub fn root(
        spec: &'static str,
        path: &'static str,
        root: &'a Value,
        problems: &'a mut Vec<Problem>,
    ) -> Self {
        let table = match at(root, path) {
            Some(Value::Table(t)) => Some(t),
            None | Some(Value::Nil) => {
                let rule = match nearest_section(root, path) {
                    Some(near) => format!(
                        "has no section in the configuration; did you mean `{near}`? (the section must be at `{path}`, the path in `#[spec(..)]`)"
                    ),
                    None => "has no section in the configuration; add one (every spec linked into the binary needs its own section, nothing is inherited)".into(),
                };
                problems.push(Problem {
                    spec,
                    path,
                    key: String::new(),
                    rule,
                    found: None,
                });
                None
            }
            Some(other) => {
                problems.push(Problem {
                    spec,
                    path,
                    key: String::new(),
                    rule: "must be a table of settings".into(),
                    found: Some(other.to_string()),
                });
                None
            }
        };
        Self {
            spec,
            path,
            prefix: String::new(),
            table,
            known: Vec::new(),
            nested: Vec::new(),
            aliases: Vec::new(),
            handled: Vec::new(),
            problems,
            asked: None,
        }
    }

    /// Starts reading the optional section of `name` at `path` in `root`:
    /// as [`root`](Self::root), but a missing section is no problem (every
    /// key then takes its default).
    pub fn optional(
        name: &'static str,
        path: &'static str,
        root: &'a Value,
        problems: &'a mut Vec<Problem>,
    ) -> Self {
        match at(root, path) {
            None | Some(Value::Nil) => Self {
                spec: name,
                path,
                prefix: String::new(),
                table: None,
                known: Vec::new(),
                nested: Vec::new(),
                aliases: Vec::new(),
                handled: Vec::new(),
                problems,
                asked: None,
            },
            Some(_) => Self::root(name, path, root, problems),
        }
    }

    /// Records a problem with `key` (relative to this table).
    pub fn problem(&mut self, key: &str, rule: impl Into<String>, found: Option<&Value>) {
        let key = self.full_key(key);
        self.problems.push(Problem {
            spec: self.spec,
            path: self.path,
            key,
            rule: rule.into(),
            found: found.map(ToString::to_string),
        });
    }

    /// Records a problem with `key` (relative to this table), echoing its
    /// value as it was written: a rule on a value already parsed (a
    /// duration above a limit) must show `"1500d"`, not the parsed value
    /// formatted again (`"4years 1month .."`), which the user never wrote.
    pub fn invalid(&mut self, key: &str, rule: impl Into<String>) {
        let found = self.peek(key);
        self.problem(key, rule, found);
    }

    /// Records a problem with a key of the spec's section itself (not of
    /// this nested table).
    pub fn problem_at_root(&mut self, key: &str, rule: impl Into<String>, found: Option<&Value>) {
        self.problems.push(Problem {
            spec: self.spec,
            path: self.path,
            key: key.to_owned(),
            rule: rule.into(),
            found: found.map(ToString::to_string),
        });
    }

    fn full_key(&self, key: &str) -> String {
        if self.prefix.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.prefix)
        }
    }

    /// Whether the section itself was found.
    pub fn exists(&self) -> bool {
        self.table.is_some()
    }

    fn raw(&mut self, key: &'static str) -> Option<&'a Value> {
        if !self.known.contains(&key) {
            self.known.push(key);
            if let Some(asked) = self.asked {
                asked.borrow_mut().push(self.full_key(key));
            }
        }
        self.peek(key)
    }

    /// The value of `key` as it was written (for a rule that names another
    /// key's value), without marking it as a setting of this table.
    pub fn written(&self, key: &str) -> Option<String> {
        self.peek(key).map(ToString::to_string)
    }

    /// The value of `key` itself, without marking it as a setting of this
    /// table: for a rule on how a number was written (`10` or `10.0`),
    /// which [`written`](Self::written) does not tell apart.
    pub fn value(&self, key: &str) -> Option<&'a Value> {
        self.peek(key)
    }

    /// The value of `key`, without marking it as a setting of this table.
    fn peek(&self, key: &str) -> Option<&'a Value> {
        match self.table?.get(key) {
            None | Some(Value::Nil) => None,
            Some(v) => Some(v),
        }
    }

    /// Whether `key` is present (and not empty). Marks the key as known.
    pub fn has(&mut self, key: &'static str) -> bool {
        self.raw(key).is_some()
    }

    /// Whether `key` is present, without making it a setting of this table:
    /// for a key that a rule rejects here (the window table of another
    /// `type`), which the list of known settings must not offer. A key
    /// present is taken as reported by that rule, not as unknown.
    pub fn present(&mut self, key: &'static str) -> bool {
        let present = self.peek(key).is_some();
        if present && !self.handled.contains(&key) {
            self.handled.push(key);
        }
        present
    }

    /// Names `written`, what another library (Resilience4j, Kora, Spring,
    /// Polly) calls a setting, as this table's `meant`: written here, it is
    /// reported with `meant` and `note`, which says how the two differ (or
    /// that they do not), given the value found. Compared as keys are
    /// suggested, without case and underscores (`maxAttempts`,
    /// `maxattempts`). `meant` may be dotted, for a key of a nested table.
    pub fn alias(
        &mut self,
        written: &'static str,
        meant: &'static str,
        note: fn(&Value) -> String,
    ) {
        self.aliases.push(Alias {
            written,
            meant,
            note,
        });
    }

    /// Records that `key` is required and missing.
    fn missing(&mut self, key: &'static str, what: &str) {
        if self.table.is_some() {
            self.problem(key, format!("is required ({what})"), None);
        }
    }

    /// Reads a boolean, `default` when absent.
    pub fn bool(&mut self, key: &'static str, default: bool) -> Option<bool> {
        match self.raw(key) {
            None => Some(default),
            Some(Value::Bool(b)) => Some(*b),
            Some(v @ Value::Str(s)) => match s.trim().to_ascii_lowercase().as_str() {
                "true" => Some(true),
                "false" => Some(false),
                _ => {
                    self.problem(key, "must be `true` or `false`", Some(v));
                    None
                }
            },
            Some(v) => {
                self.problem(key, "must be `true` or `false`", Some(v));
                None
            }
        }
    }

    /// Reads a whole number in `min..=max`; `None` and a problem when absent
    /// and `default` is `None`.
    pub fn int(
        &mut self,
        key: &'static str,
        default: Option<u64>,
        min: u64,
        max: u64,
    ) -> Option<u64> {
        let rule = if max == u64::MAX {
            format!("must be a whole number ≥ {min}")
        } else {
            format!("must be a whole number in {min}..={max}")
        };
        let Some(v) = self.raw(key) else {
            if default.is_none() {
                self.missing(key, &rule);
            }
            return default;
        };
        let parsed: Option<i128> = match v {
            Value::Int(i) => Some(*i),
            Value::Float(x) if x.fract() == 0.0 && x.is_finite() => Some(*x as i128),
            Value::Str(s) => s.trim().parse().ok(),
            _ => None,
        };
        match parsed {
            Some(i) if i >= i128::from(min) && i <= i128::from(max) => u64::try_from(i).ok(),
            _ => {
                self.problem(key, rule, Some(v));
                None
            }
        }
    }

    /// Reads a text; `None` and a problem when it is not text, or when it
    /// is absent and `default` is `None`.
    pub fn text(&mut self, key: &'static str, default: Option<&str>) -> Option<String> {
        let Some(v) = self.raw(key) else {
            if default.is_none() {
                self.missing(key, "text");
            }
            return default.map(str::to_owned);
        };
        match v {
            Value::Str(s) => Some(s.trim().to_owned()),
            _ => {
                self.problem(key, "must be text", Some(v));
                None
            }
        }
    }

    /// Reads a finite number that `check` accepts; `rule` says what it accepts.
    pub fn float(
        &mut self,
        key: &'static str,
        default: Option<f64>,
        rule: &str,
        check: impl Fn(f64) -> bool,
    ) -> Option<f64> {
        let Some(v) = self.raw(key) else {
            if default.is_none() {
                self.missing(key, rule);
            }
            return default;
        };
        let parsed = match v {
            Value::Int(i) => Some(*i as f64),
            Value::Float(x) => Some(*x),
            Value::Str(s) => s.trim().parse().ok(),
            _ => None,
        };
        match parsed {
            Some(x) if x.is_finite() && check(x) => Some(x),
            _ => {
                self.problem(key, rule.to_owned(), Some(v));
                None
            }
        }
    }

    /// Reads a duration written as a string with a unit (`"100ms"`, `"2s"`,
    /// `"1m"`). Outer `None`: absent (and recorded when `required`); inner
    /// `None`: present but invalid (recorded).
    pub fn duration(&mut self, key: &'static str, required: bool) -> Option<Option<Duration>> {
        let Some(v) = self.raw(key) else {
            if required {
                self.missing(key, "a duration such as \"100ms\", \"2s\" or \"1m\"");
            }
            return None;
        };
        let rule = "must be a duration with a unit, such as \"100ms\", \"2s\" or \"1m\"";
        let parsed = match v {
            Value::Str(s) if s.trim().starts_with('-') => Err(NEGATIVE),
            Value::Str(s) => humantime::parse_duration(s.trim()).map_err(|e| match e {
                humantime::DurationError::NumberOverflow => OUT_OF_RANGE,
                _ => rule,
            }),
            Value::Int(0) => Ok(Duration::ZERO),
            Value::Int(i) if *i < 0 => Err(NEGATIVE),
            Value::Float(x) if *x < 0.0 => Err(NEGATIVE),
            _ => Err(rule),
        };
        match parsed {
            Ok(d) => Some(Some(d)),
            Err(rule) => {
                self.problem(key, rule, Some(v));
                Some(None)
            }
        }
    }

    /// Reads a percent: a whole number in 1..=100. A fraction such as `0.5`
    /// is taken for what it most likely is, a rate written as a fraction, and
    /// the message says how to write it.
    pub fn percent(&mut self, key: &'static str) -> Option<u64> {
        let fraction = match self.table.and_then(|t| t.get(key)) {
            Some(Value::Float(x)) if *x > 0.0 && *x < 1.0 => Some(*x),
            Some(Value::Str(s)) => s
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|x| *x > 0.0 && *x < 1.0),
            _ => None,
        };
        if let Some(x) = fraction {
            let v = self.raw(key);
            let as_percent = (x * 100.0).round().max(1.0);
            self.problem(
                key,
                format!("must be a whole number in 1..=100: it is a percent, not a fraction; write `{as_percent}` for {x}"),
                v,
            );
            return None;
        }
        self.int(key, None, 1, 100)
    }

    /// Reads a string that must be one of `choices`; `default` when absent.
    pub fn choice(
        &mut self,
        key: &'static str,
        choices: &[&'static str],
        default: &'static str,
    ) -> Option<&'static str> {
        let Some(v) = self.raw(key) else {
            return Some(default);
        };
        let found = match v {
            Value::Str(s) => choices.iter().find(|c| c.eq_ignore_ascii_case(s.trim())),
            _ => None,
        };
        if found.is_none() {
            let list = choices
                .iter()
                .map(|c| format!("\"{c}\""))
                .collect::<Vec<_>>()
                .join(" or ");
            self.problem(key, format!("must be {list}"), Some(v));
        }
        found.copied()
    }

    /// Reports `key` as belonging in the nested table `table`, if it is here:
    /// for a key users put one level too high (`delay_max` beside `delay`
    /// instead of under `backoff`), which a suggestion of the nearest key
    /// at this level would only mislead.
    pub fn misplaced(&mut self, key: &'static str, table: &'static str) {
        let Some(v) = self.peek(key) else { return };
        self.handled.push(key);
        let full = self.full_key(table);
        self.problem(
            key,
            format!("belongs under `{table}`: move it to `{full}.{key}` (a `[{}.{full}]` table in TOML)", self.path),
            Some(v),
        );
    }

    /// Reads a nested table; `None` when absent. A value that is not a table is
    /// recorded as a problem.
    pub fn table<R>(
        &mut self,
        key: &'static str,
        read: impl FnOnce(&mut Section<'_>) -> R,
    ) -> Option<R> {
        let Some(v) = self.raw(key) else {
            // Absent: its keys are still settings here, for the list of
            // known settings. The reader runs on nothing, and whatever it
            // would report is dropped.
            let mut dropped = Vec::new();
            let mut probe = Section {
                spec: self.spec,
                path: self.path,
                prefix: self.full_key(key),
                table: None,
                known: Vec::new(),
                nested: Vec::new(),
                aliases: Vec::new(),
                handled: Vec::new(),
                problems: &mut dropped,
                asked: None,
            };
            let _ = read(&mut probe);
            let keys = probe.described_keys();
            self.nested.push((key, keys));
            return None;
        };
        let Value::Table(t) = v else {
            self.problem(key, "must be a table", Some(v));
            return None;
        };
        let mut inner = Section {
            spec: self.spec,
            path: self.path,
            prefix: self.full_key(key),
            table: Some(t),
            known: Vec::new(),
            nested: Vec::new(),
            aliases: Vec::new(),
            handled: Vec::new(),
            problems: &mut *self.problems,
            asked: self.asked,
        };
        let out = read(&mut inner);
        let keys = inner.described_keys();
        inner.finish();
        self.nested.push((key, keys));
        Some(out)
    }

    /// The settings of this table, a nested table's as its keys dotted
    /// below it (`logging.enabled`).
    fn described_keys(&self) -> Vec<String> {
        let mut keys = Vec::new();
        for key in &self.known {
            match self.nested.iter().find(|(k, _)| k == key) {
                Some((_, inner)) if !inner.is_empty() => {
                    keys.extend(inner.iter().map(|i| format!("{key}.{i}")));
                }
                _ => keys.push((*key).to_owned()),
            }
        }
        keys
    }

    /// The list of known settings, as a problem shows it: each key once,
    /// a table with its keys (`` `backoff` (a table: `type`, `multiplier`) ``).
    fn known_list(&self) -> String {
        self.known
            .iter()
            .map(|key| match self.nested.iter().find(|(k, _)| k == key) {
                Some((_, inner)) if !inner.is_empty() => format!(
                    "`{key}` (a table: {})",
                    inner
                        .iter()
                        .map(|i| format!("`{i}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                _ => format!("`{key}`"),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Drops the "is required" problem of `meant` (dotted from the
    /// section), if there is one: a key misspelt is one mistake, not two.
    /// Whether there was one.
    fn drop_required(&mut self, meant: &str) -> bool {
        let before = self.problems.len();
        let (spec, path) = (self.spec, self.path);
        self.problems.retain(|p| {
            !(p.spec == spec
                && p.path == path
                && p.key == meant
                && p.rule.starts_with("is required"))
        });
        self.problems.len() < before
    }

    /// Reports every key of this table that no accessor asked for, with the
    /// nearest known key when one is close.
    pub fn finish(mut self) {
        let Some(table) = self.table else { return };
        for (key, value) in table {
            if self.known.contains(&key.as_str()) || self.handled.contains(&key.as_str()) {
                continue;
            }
            let squashed = squash(key);
            let alias = self
                .aliases
                .iter()
                .find(|a| squash(a.written) == squashed)
                .map(|a| (a.meant, a.note));
            let rule = match (alias, suggest(key, &self.known)) {
                (Some((meant, note)), _) => {
                    let required = if meant.contains('.') {
                        false
                    } else {
                        self.drop_required(&self.full_key(meant))
                    };
                    format!(
                        "did you mean `{meant}`?{} {}",
                        if required {
                            format!(" (`{meant}` is required)")
                        } else {
                            String::new()
                        },
                        note(value)
                    )
                }
                (None, Some(near)) => {
                    // A misspelt required key is one mistake: drop the
                    // separate "is required" problem for the key meant.
                    let meant = self.full_key(near);
                    if self.drop_required(&meant) {
                        format!("did you mean `{near}`? (`{near}` is required)")
                    } else {
                        format!("did you mean `{near}`?")
                    }
                }
                (None, None) => format!("known settings here: {}", self.known_list()),
            };
            let rule = format!("{UNKNOWN_KEY}; {rule}");
            let full = if self.prefix.is_empty() {
                key.clone()
            } else {
                format!("{}.{key}", self.prefix)
            };
            self.problems.push(Problem {
                spec: self.spec,
                path: self.path,
                key: full,
                rule,
                found: Some(value.to_string()),
            });
        }
    }
}

/// The keys `read` accepts in `section`: each key it asked for, dotted from
/// the section (a table's own key too). A reader asks for a table's keys
/// only when the table is there, and for some only under some settings (a
/// breaker's window by its `type`): read several sections for all of them.
/// Not a public API: what the tests compare the settings tables with.
#[doc(hidden)]
pub fn accepted_keys(section: &Value, read: impl FnOnce(&mut Section<'_>)) -> BTreeSet<String> {
    let asked = RefCell::new(Vec::new());
    let mut problems = Vec::new();
    let table = match section {
        Value::Table(t) => Some(t),
        _ => None,
    };
    let mut s = Section {
        spec: "probe",
        path: "probe",
        prefix: String::new(),
        table,
        known: Vec::new(),
        nested: Vec::new(),
        aliases: Vec::new(),
        handled: Vec::new(),
        problems: &mut problems,
        asked: Some(&asked),
    };
    read(&mut s);
    s.finish();
    asked.into_inner().into_iter().collect()
}

/// The value at the dotted `path` under `root`, if every part of it is there.
pub(crate) fn at<'v>(root: &'v Value, path: &str) -> Option<&'v Value> {
    path.split('.').try_fold(root, |node, part| match node {
        Value::Table(t) => t.get(part),
        _ => None,
    })
}

/// The existing section nearest to the missing `path`, compared along the
/// whole path: each segment the same or close (see [`suggest`]), so that
/// `resilient.retry.pett`, `resilient.retyr.pet` and `resilient.retyr.pett`
/// are all found for `resilient.retry.pet`.
pub(crate) fn nearest_section(root: &Value, path: &str) -> Option<String> {
    let parts: Vec<&str> = path.split('.').collect();
    let mut best: Option<(f64, Vec<String>)> = None;
    let mut trail = Vec::new();
    walk_near(root, &parts, 0.0, &mut trail, &mut best);
    best.map(|(_, found)| found.join("."))
}

/// [`nearest_section`]'s search below `node`, for the segments `rest`.
fn walk_near(
    node: &Value,
    rest: &[&str],
    score: f64,
    trail: &mut Vec<String>,
    best: &mut Option<(f64, Vec<String>)>,
) {
    let Value::Table(t) = node else { return };
    let Some((part, rest)) = rest.split_first() else {
        if !matches!(best, Some((s, _)) if *s >= score) {
            *best = Some((score, trail.clone()));
        }
        return;
    };
    for (key, next) in t {
        let close = if key == part {
            1.0
        } else {
            similarity(key, part)
        };
        if close < NEAR {
            continue;
        }
        // The path itself is never found: it is missing, or not a table.
        trail.push(key.clone());
        walk_near(next, rest, score + close, trail, best);
        trail.pop();
    }
}

/// `key` without case, underscores and dashes: how keys are compared for a
/// suggestion.
fn squash(key: &str) -> String {
    key.replace(['_', '-'], "").to_ascii_lowercase()
}

/// How close two keys are, from 0 to 1, compared [`squash`]ed.
pub(crate) fn similarity(a: &str, b: &str) -> f64 {
    strsim::normalized_damerau_levenshtein(&squash(a), &squash(b))
}

/// The [`similarity`] from which a key is suggested for another.
pub(crate) const NEAR: f64 = 0.6;

/// Another library's name for a setting: see [`Section::alias`].
#[derive(Debug)]
struct Alias {
    written: &'static str,
    meant: &'static str,
    note: fn(&Value) -> String,
}

/// The known key closest to `key`, compared without case and underscores so
/// that `delayStep` and `delaystep` (an environment override) find `delay_step`.
fn suggest<'k>(key: &str, known: &[&'k str]) -> Option<&'k str> {
    known
        .iter()
        .map(|k| (similarity(key, k), *k))
        .filter(|(score, _)| *score >= NEAR)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestion_ignores_case_and_underscores() {
        let known = ["delay", "delay_step", "attempts"];
        assert_eq!(suggest("delayStep", &known), Some("delay_step"));
        assert_eq!(suggest("delaystep", &known), Some("delay_step"));
        assert_eq!(suggest("atempts", &known), Some("attempts"));
        assert_eq!(suggest("zzz", &known), None);
    }
}
