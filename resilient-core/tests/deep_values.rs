//! A value nested far deeper than any section (a JSON file or an
//! application's own `config::Source` can nest to any depth) is one problem
//! at startup and a rejected reload: never a stack overflow that kills the
//! process. Each test runs on a test thread's own stack (2 MiB), far less
//! than following 100,000 levels would take.

#![allow(clippy::expect_used, clippy::unwrap_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::*;

use std::collections::BTreeMap;

use resilient_core::settings::{Value, MAX_DEPTH};
use resilient_core::{Registry, RetrySpec};

#[derive(RetrySpec)]
#[spec("deep.retry")]
struct DeepRetry;

/// `leaf` under `depth` tables, each keyed `a`.
fn nested(depth: usize, leaf: Value) -> Value {
    let mut value = leaf;
    for _ in 0..depth {
        value = Value::Table(BTreeMap::from([("a".to_owned(), value)]));
    }
    value
}

fn retry() -> Value {
    table([("attempts", int(2)), ("delay", s("10ms"))])
}

const LEVELS: usize = 100_000;

#[test]
fn a_value_nested_100_000_levels_deep_is_one_problem_at_startup() {
    let section = with(retry(), "extra", nested(LEVELS, int(1)));
    let problems = Registry::builder()
        .spec::<DeepRetry>()
        .build(&root(vec![("deep.retry", section)]))
        .expect_err("a value nested 100,000 levels deep is refused");
    assert_eq!(problems.len(), 1, "{problems:#?}");
    let p = &problems[0];
    assert_eq!((p.spec, p.path), ("DeepRetry", "deep.retry"));
    assert_eq!(
        p.key, "extra.a.a.a.a.a.a.a.…",
        "the key path, its first levels"
    );
    // `deep.retry.extra`, then the tables down to the leaf.
    let deepest = 3 + LEVELS;
    assert_eq!(
        p.to_string(),
        format!(
            "DeepRetry at `deep.retry`: key `extra.a.a.a.a.a.a.a.…` is nested {deepest} levels deep; \
             configuration is read to a depth of {MAX_DEPTH} levels from its root \
             (a section's settings are a few levels below its path): remove the value, or flatten it"
        )
    );
}

#[test]
fn a_reload_with_a_value_nested_100_000_levels_deep_is_rejected_and_keeps_the_settings() {
    let registry = registry::<DeepRetry>(retry());
    let section = with(
        with(retry(), "attempts", int(5)),
        "extra",
        nested(LEVELS, int(1)),
    );
    let problems = registry
        .reload(&root(vec![("deep.retry", section)]))
        .expect_err("refused");
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert_eq!(problems[0].key, "extra.a.a.a.a.a.a.a.…");
    let handle = registry.sync_scope(DeepRetry::get).unwrap();
    assert_eq!(handle.settings().attempts, 2, "the running settings stay");
    // The same reload without the deep value applies.
    let changed = registry
        .reload(&root(vec![(
            "deep.retry",
            with(retry(), "attempts", int(5)),
        )]))
        .expect("applied");
    assert_eq!(changed.specs[0].keys, ["attempts: 2 -> 5"]);
}

#[test]
fn a_deep_list_or_a_deep_table_outside_the_sections_under_resilient_is_refused_too() {
    let mut list = Value::Int(1);
    for _ in 0..LEVELS {
        list = Value::List(vec![list]);
    }
    let problems = Registry::builder()
        .spec::<DeepRetry>()
        .build(&root(vec![
            ("deep.retry", retry()),
            ("resilient.stray", list),
        ]))
        .expect_err("refused");
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert_eq!((problems[0].spec, problems[0].path), ("", "resilient"));
    assert_eq!(problems[0].key, "stray[0][0][0][0][0][0][0]…");
}

#[test]
fn a_value_at_the_greatest_depth_read_is_an_ordinary_unknown_key() {
    // `deep.retry.extra` is 3 levels; 61 more tables reach the bound.
    let section = with(retry(), "extra", nested(MAX_DEPTH - 3, int(1)));
    let problems = Registry::builder()
        .spec::<DeepRetry>()
        .build(&root(vec![("deep.retry", section)]))
        .expect_err("an unknown key");
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert_eq!(problems[0].key, "extra");
    assert!(problems[0].rule.starts_with("is not a known setting"));
}

#[test]
fn a_value_nested_100_000_levels_deep_drops_without_recursion() {
    let mut values = Vec::new();
    for _ in 0..4 {
        values.push(nested(LEVELS, int(1)));
    }
    drop(values);
}
