//! What the runtime tests share: building settings as value trees, and
//! registries for the specs a test uses.

#![allow(dead_code, unreachable_pub)] // each test file uses a part

pub mod redis;

use std::collections::BTreeMap;

use resilient_core::registry::KeysSnapshot;
use resilient_core::settings::Value;
use resilient_core::{Registry, RegistryBuilder, Spec};

/// A string value.
pub fn s(v: &str) -> Value {
    Value::Str(v.to_owned())
}

/// A whole-number value.
pub fn int(v: i128) -> Value {
    Value::Int(v)
}

/// A number value.
pub fn float(x: f64) -> Value {
    Value::Float(x)
}

/// A boolean value.
pub fn boolean(b: bool) -> Value {
    Value::Bool(b)
}

/// A table of `pairs`.
pub fn table<const N: usize>(pairs: [(&str, Value); N]) -> Value {
    Value::Table(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

/// `base` with `key` set to `value`.
pub fn with(mut base: Value, key: &str, value: Value) -> Value {
    if let Value::Table(t) = &mut base {
        t.insert(key.to_owned(), value);
    }
    base
}

/// `section` placed at the dotted `path`.
pub fn nest(path: &str, section: Value) -> Value {
    let mut node = section;
    for part in path.rsplit('.') {
        node = Value::Table([(part.to_owned(), node)].into_iter().collect());
    }
    node
}

/// One tree holding every section at its path.
pub fn root(sections: Vec<(&str, Value)>) -> Value {
    let mut out = BTreeMap::new();
    for (path, section) in sections {
        merge(&mut out, nest(path, section));
    }
    Value::Table(out)
}

fn merge(into: &mut BTreeMap<String, Value>, mut from: Value) {
    let Value::Table(from) = &mut from else {
        return;
    };
    for (k, v) in std::mem::take(from) {
        match (into.get_mut(&k), v) {
            (Some(Value::Table(existing)), v @ Value::Table(_)) => merge(existing, v),
            (_, v) => {
                into.insert(k, v);
            }
        }
    }
}

/// A registry built with `builder` from `sections`; panics on invalid
/// settings.
pub fn build(builder: RegistryBuilder, sections: Vec<(&str, Value)>) -> Registry {
    match builder.build(&root(sections)) {
        Ok(r) => r,
        Err(problems) => panic!("invalid test settings: {problems:#?}"),
    }
}

/// `section` with metrics on.
pub fn metered(section: Value) -> Value {
    with(
        section,
        "telemetry",
        table([("metrics", table([("enabled", boolean(true))]))]),
    )
}

/// A count-based breaker's section: opens at `failure_rate` % of the last
/// `window` calls once `minimum_calls` are in, stays open `open_wait`, one
/// probe when half-open.
pub fn breaker_section(
    failure_rate: i128,
    minimum_calls: i128,
    open_wait: &str,
    window: i128,
) -> Value {
    table([
        ("failure_rate_threshold", int(failure_rate)),
        ("minimum_required_calls", int(minimum_calls)),
        ("wait_duration_in_open_state", s(open_wait)),
        ("permitted_calls_in_half_open_state", int(1)),
        ("count_based", table([("window_size", int(window))])),
    ])
}

/// A registry for spec `S` alone, with `section` at its path.
pub fn registry<S: Spec>(section: Value) -> Registry {
    build(Registry::builder().spec::<S>(), vec![(S::PATH, section)])
}
/// The keyed part of spec `S`'s snapshot, if it has keys.
pub fn keys_of<S: Spec>(r: &Registry) -> Option<KeysSnapshot> {
    r.snapshot()
        .specs
        .into_iter()
        .find(|s| s.spec == S::NAME)
        .and_then(|s| s.keys().cloned())
}

/// The keyed part of spec `S`'s snapshot; panics when it has no keys.
pub fn keys<S: Spec>(r: &Registry) -> KeysSnapshot {
    match keys_of::<S>(r) {
        Some(k) => k,
        None => panic!("`{}` has no keys in its snapshot", S::NAME),
    }
}

/// A runtime with two worker threads, as a server has: calls in spawned
/// tasks then really run on two threads.
pub fn two_workers() -> tokio::runtime::Runtime {
    match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("runtime: {e}"),
    }
}
pub mod capture;

/// A current-thread runtime on tokio's paused clock, for a test that
/// drives it with `block_on` (a `#[test]` that also sets a subscriber or a
/// registry of its own around it).
pub fn paused() -> tokio::runtime::Runtime {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("runtime: {e}"),
    }
}
