//! Each settings table is written three times: in the guide, in the settings
//! type's rustdoc, and in the reader, as the keys it asks for. The three are
//! the same set of keys (and the guide holds the rustdoc's rows word for word),
//! so they cannot drift apart.

use std::collections::BTreeSet;

use resilient_core::circuit_breaker::CircuitBreakerSettings;
use resilient_core::concurrency::ConcurrencyLimitSettings;
use resilient_core::hedging::HedgingSettings;
use resilient_core::keyed::KeySettings;
use resilient_core::rate_limiter::RateLimiterSettings;
use resilient_core::retry::RetrySettings;
use resilient_core::settings::{accepted_keys, Section, Value};
use resilient_core::telemetry::{GlobalTelemetry, TelemetrySettings};
use resilient_core::timeout::TimeoutSettings;

/// The guide's chapters, where the settings tables are (README.md keeps
/// none: it links to them).
const GUIDE: &str = concat!(
    include_str!("../guide/getting_started.md"),
    include_str!("../guide/configuration.md"),
    include_str!("../guide/retry.md"),
    include_str!("../guide/circuit_breaker.md"),
    include_str!("../guide/timeout.md"),
    include_str!("../guide/concurrency_limit.md"),
    include_str!("../guide/rate_limiter.md"),
    include_str!("../guide/redis.md"),
    include_str!("../guide/keyed.md"),
    include_str!("../guide/chaos.md"),
    include_str!("../guide/hedging.md"),
    include_str!("../guide/fallback.md"),
    include_str!("../guide/composition.md"),
    include_str!("../guide/tower.md"),
    include_str!("../guide/telemetry.md"),
    include_str!("../guide/operations.md"),
    include_str!("../guide/explain.md"),
    include_str!("../guide/testing.md"),
    include_str!("../guide/migrating.md"),
    include_str!("../guide/design.md"),
    include_str!("../guide/benchmarks.md"),
    include_str!("../guide/developing.md"),
);

fn table_rows(text: &str, strip: &str) -> Vec<String> {
    text.lines()
        .map(|l| {
            let l = l.trim_start();
            l.strip_prefix(strip)
                .or_else(|| l.strip_prefix("//!"))
                .unwrap_or(l)
                .trim()
        })
        .filter(|l| l.starts_with("| `"))
        .map(str::to_owned)
        .collect()
}

/// The key of a table row: its first cell, without the backticks.
fn key(row: &str) -> String {
    row.trim_start_matches('|')
        .split('|')
        .next()
        .unwrap_or("")
        .trim()
        .trim_matches('`')
        .to_owned()
}

/// The rows of the guide's table that holds every row of `rows`.
fn readme_table_of(rows: &[String]) -> Vec<String> {
    let mut tables: Vec<Vec<String>> = vec![Vec::new()];
    for line in GUIDE.lines() {
        let line = line.trim();
        if line.starts_with('|') {
            if let Some(t) = tables.last_mut() {
                if line.starts_with("| `") {
                    t.push(line.to_owned());
                }
            }
        } else if tables.last().is_some_and(|t| !t.is_empty()) {
            tables.push(Vec::new());
        }
    }
    let held = |t: &Vec<String>| rows.iter().filter(|r| t.contains(r)).count();
    let best = tables
        .iter()
        .max_by_key(|t| held(t))
        .cloned()
        .unwrap_or_default();
    for row in rows {
        assert!(
            best.contains(row),
            "the guide lacks the settings row: {row}"
        );
    }
    best
}

fn table(pairs: &[(&str, Value)]) -> Value {
    Value::Table(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect(),
    )
}

fn s(v: &str) -> Value {
    Value::Str(v.to_owned())
}

/// Which rows of a source's tables: `len` rows from the one of key `from`
/// (every row of the source when `None`).
struct Rows {
    from: Option<&'static str>,
    len: usize,
}

const ALL: Rows = Rows {
    from: None,
    len: usize::MAX,
};

/// Checks that the rustdoc table of `source` (the `rows`), the
/// guide's table holding them, and the keys `read` accepts in `probes` are
/// one set.
fn check(source: &str, rows: Rows, probes: &[Value], read: fn(&mut Section<'_>)) {
    let docs = table_rows(source, "///");
    let start = match rows.from {
        Some(first) => docs
            .iter()
            .position(|r| key(r) == first)
            .unwrap_or_else(|| panic!("no docs row for `{first}`")),
        None => 0,
    };
    let docs = &docs[start..start.saturating_add(rows.len).min(docs.len())];
    let readme = readme_table_of(docs);
    let docs: BTreeSet<String> = docs.iter().map(|r| key(r)).collect();
    let readme: BTreeSet<String> = readme.iter().map(|r| key(r)).collect();
    let asked: BTreeSet<String> = probes.iter().flat_map(|p| accepted_keys(p, read)).collect();
    // A table is no key of its own: its keys are (`backoff` is asked for
    // when absent; `backoff.multiplier` when it is there).
    let reader: BTreeSet<String> = asked
        .iter()
        .filter(|k| {
            !asked
                .iter()
                .any(|other| other.starts_with(&format!("{k}.")))
        })
        // A table per retry cause, one row for all of them.
        .map(
            |k| match k.strip_prefix("cause.").and_then(|c| c.split_once('.')) {
                Some((_, rest)) => format!("cause.<cause>.{rest}"),
                None => k.clone(),
            },
        )
        .collect();
    assert_eq!(readme, docs, "the guide's table and the rustdoc's");
    assert_eq!(
        reader, docs,
        "the keys the reader accepts and the rustdoc's"
    );
}

#[test]
fn retry_keys_are_one_set() {
    let probe = table(&[
        ("backoff", table(&[])),
        ("jitter", table(&[("type", s("full"))])),
        ("retry_budget", table(&[])),
        ("throttle", table(&[])),
        (
            "cause",
            table(&[
                ("transient", table(&[])),
                ("throttled", table(&[])),
                ("timeout", table(&[])),
            ]),
        ),
    ]);
    check(
        include_str!("../src/retry/settings.rs"),
        ALL,
        &[probe],
        |s| {
            let _ = RetrySettings::read(s);
        },
    );
}

#[test]
fn hedging_keys_are_one_set() {
    let probe = table(&[("hedging_budget", table(&[]))]);
    check(include_str!("../src/hedging/mod.rs"), ALL, &[probe], |s| {
        let _ = HedgingSettings::read(s);
    });
}

#[test]
fn circuit_breaker_keys_are_one_set() {
    let probes: Vec<Value> = [
        "ring_buffer",
        "striped_approx",
        "fixed_window",
        "time_based",
    ]
    .into_iter()
    .map(|kind| {
        table(&[
            ("type", s(kind)),
            (
                "count_based",
                table(&[
                    ("window_size", Value::Int(10)),
                    ("striped_approx", table(&[])),
                ]),
            ),
            ("time_based", table(&[])),
            ("slow_call", table(&[])),
        ])
    })
    .collect();
    check(
        include_str!("../src/circuit_breaker/settings.rs"),
        ALL,
        &probes,
        |s| {
            let _ = CircuitBreakerSettings::read(s);
        },
    );
}

#[test]
fn timeout_keys_are_one_set() {
    check(
        include_str!("../src/timeout/mod.rs"),
        ALL,
        &[table(&[])],
        |s| {
            let _ = TimeoutSettings::read(s);
        },
    );
}

#[test]
fn concurrency_keys_are_one_set() {
    check(
        include_str!("../src/concurrency/mod.rs"),
        ALL,
        &[table(&[]), table(&[("policy", s("block"))])],
        |s| {
            let _ = ConcurrencyLimitSettings::read(s);
        },
    );
}

#[test]
fn rate_limiter_keys_are_one_set() {
    check(
        include_str!("../src/rate_limiter/mod.rs"),
        ALL,
        &[table(&[])],
        |s| {
            let _ = RateLimiterSettings::read(s);
        },
    );
}

#[test]
fn keys_table_keys_are_one_set() {
    check(
        include_str!("../src/keyed.rs"),
        ALL,
        &[table(&[("keys", table(&[]))])],
        |s| {
            let _ = KeySettings::read(s, true);
        },
    );
}

#[test]
fn telemetry_keys_are_one_set() {
    let source = include_str!("../src/telemetry/mod.rs");
    let switches = table(&[("logging", table(&[])), ("metrics", table(&[]))]);
    // A spec's own switches (read from its section), then the global ones.
    let rows = |from| Rows {
        from: Some(from),
        len: 3,
    };
    check(
        source,
        rows("telemetry.logging.enabled"),
        &[table(&[("telemetry", switches.clone())])],
        |s| {
            let _ = TelemetrySettings::read(s);
        },
    );
    check(source, rows("logging.enabled"), &[switches], |s| {
        let _ = GlobalTelemetry::read(s);
    });
}

#[test]
fn readme_logs_and_metrics_tables_hold_the_telemetry_docs() {
    // The log lines (but the row "same") and the metrics, word for word.
    let docs = table_rows(include_str!("../src/telemetry/mod.rs"), "///");
    let readme = table_rows(GUIDE, "");
    assert!(docs.len() >= 10 + 9, "the telemetry docs lost a table");
    for row in &docs {
        assert!(readme.contains(row), "the guide lacks the row: {row}");
    }
}

#[test]
fn redis_backend_keys_are_one_set() {
    check(
        include_str!("../src/backend/mod.rs"),
        ALL,
        &[table(&[])],
        |s| {
            let _ = resilient_core::backend::RedisSettings::read(s);
        },
    );
}

#[test]
fn readme_holds_the_readiness_row() {
    let docs = table_rows(include_str!("../src/registry/readiness.rs"), "///");
    assert_eq!(docs.len(), 1, "the readiness key's row");
    let readme = table_rows(GUIDE, "");
    assert!(
        readme.contains(&docs[0]),
        "the guide lacks the row: {}",
        docs[0]
    );
}

/// Every metric name registered in the crate's source (a `"resilient_…"`
/// literal), read from the files.
fn metric_names_in_source() -> BTreeSet<String> {
    fn walk(dir: &std::path::Path, out: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                let mut rest = text.as_str();
                while let Some(at) = rest.find("\"resilient_") {
                    let name: String = rest[at + 1..]
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    if rest[at + 1 + name.len()..].starts_with('"') {
                        out.insert(name.clone());
                    }
                    rest = &rest[at + 1 + name.len()..];
                }
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut out,
    );
    out
}

#[test]
fn readme_metrics_table_lists_every_metric_the_source_registers_and_no_other() {
    let documented: BTreeSet<String> = table_rows(GUIDE, "")
        .iter()
        .filter_map(|r| {
            let name = key(r);
            name.starts_with("resilient_").then_some(name)
        })
        .collect();
    let source = metric_names_in_source();
    assert!(source.len() >= 16, "{source:?}");
    assert_eq!(
        documented, source,
        "the guide's metrics table and the source"
    );
}
