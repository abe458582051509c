//! The adaptive limit's settings, as startup validation reports them: the
//! exact message of each rule, every problem at once, and the largest
//! values accepted run without overflow.

mod support;
use support::*;

mod adaptive_support;
use adaptive_support::{adaptive, TestResult};

use std::error::Error as StdError;
use std::time::Duration;

use resilient_core::concurrency::adaptive::AdaptiveSettings;
use resilient_core::concurrency::LimiterSettings;
use resilient_core::settings::Value;
use resilient_core::{ConcurrencyLimitSpec, Error, Registry, Spec};

#[derive(ConcurrencyLimitSpec)]
#[spec("adaptive.checked")]
struct Checked;

/// The problems of `section` for [`Checked`], as displayed.
fn problems(section: Value) -> Vec<String> {
    match Registry::builder()
        .spec::<Checked>()
        .build(&root(vec![(Checked::PATH, section)]))
    {
        Ok(_) => Vec::new(),
        Err(problems) => problems.iter().map(ToString::to_string).collect(),
    }
}

/// The settings `section` builds for [`Checked`].
fn settings(section: Value) -> Result<LimiterSettings, Box<dyn StdError>> {
    let r = Registry::builder()
        .spec::<Checked>()
        .build(&root(vec![(Checked::PATH, section)]))
        .map_err(|p| format!("{p:?}"))?;
    let snapshot = r.snapshot();
    let spec = snapshot.specs.first().ok_or("one spec")?;
    Ok(*spec
        .settings::<LimiterSettings>()
        .ok_or("limiter settings")?)
}

const AT: &str = "Checked at `adaptive.checked`: key";

#[test]
fn adaptive_defaults_and_the_cap_as_one_number() -> TestResult {
    let s = settings(adaptive([("max", int(50))]))?;
    assert_eq!(
        s.adaptive,
        Some(AdaptiveSettings {
            min: 1,
            max: 50,
            initial: 1,
            window: Duration::from_secs(1),
            tolerance: 1.1,
        })
    );
    assert_eq!(s.common.limit, 50);
    let s = settings(adaptive([("max", int(50)), ("min", int(5))]))?;
    assert_eq!(
        s.adaptive.map(|a| a.initial),
        Some(5),
        "`initial` defaults to `min`"
    );
    let s = settings(table([("limit", int(5))]))?;
    assert_eq!(
        (s.adaptive, s.common.limit),
        (None, 5),
        "`fixed` is the default"
    );
    Ok(())
}

#[test]
fn the_largest_accepted_values_are_safe() -> TestResult {
    let s = adaptive([
        ("max", int(536_870_911)),
        ("min", int(536_870_911)),
        ("window", s("100000000d")),
        ("tolerance", Value::Float(10.0)),
    ]);
    let r = Registry::builder()
        .spec::<Checked>()
        .build(&root(vec![(Checked::PATH, s)]))
        .map_err(|p| format!("{p:?}"))?;
    let h = r.sync_scope(Checked::get)?;
    assert_eq!(h.limit(), 536_870_911);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()?;
    let out = rt.block_on(async {
        for _ in 0..20 {
            h.call(|| async { Ok::<(), Error>(()) }).await?;
        }
        Ok::<(), Error>(())
    });
    assert!(out.is_ok(), "{out:?}");
    assert_eq!(h.in_use(), 0);
    Ok(())
}

#[test]
fn type_must_be_fixed_or_adaptive() {
    assert_eq!(
        problems(table([("type", s("adaptiv")), ("limit", int(4))])),
        [format!(
            "{AT} `type` must be \"fixed\" or \"adaptive\" (found \"adaptiv\")"
        )]
    );
}

#[test]
fn adaptive_needs_max_and_refuses_limit() {
    assert_eq!(
        problems(adaptive([("limit", int(40))])),
        [
            format!("{AT} `limit` is not used by `type = \"adaptive\"`, whose limit moves between `min` and `max`; remove it (the cap is `max`), or set `type = \"fixed\"` (found 40)"),
            format!("{AT} `max` is required (must be a whole number in 1..=536870911)"),
        ]
    );
}

#[test]
fn fixed_refuses_the_adaptive_keys() {
    assert_eq!(
        problems(table([
            ("limit", int(4)),
            ("min", int(2)),
            ("tolerance", Value::Float(1.5)),
            ("window", s("1s")),
        ])),
        [
            format!("{AT} `min` is not used by `type = \"fixed\"` (the default); remove it, or set `type = \"adaptive\"` (found 2)"),
            format!("{AT} `tolerance` is not used by `type = \"fixed\"` (the default); remove it, or set `type = \"adaptive\"` (found 1.5)"),
            format!("{AT} `window` is not used by `type = \"fixed\"` (the default); remove it, or set `type = \"adaptive\"` (found \"1s\")"),
        ]
    );
}

#[test]
fn adaptive_numbers_are_whole_and_in_range() {
    let range = "must be a whole number in 1..=536870911";
    assert_eq!(
        problems(adaptive([
            ("max", int(536_870_912)),
            ("min", int(0)),
            ("initial", s("ten")),
        ])),
        [
            format!("{AT} `initial` {range} (found \"ten\")"),
            format!("{AT} `max` {range} (found 536870912)"),
            format!("{AT} `min` {range} (found 0)"),
        ]
    );
    assert_eq!(
        problems(adaptive([("max", int(-1))])),
        [format!("{AT} `max` {range} (found -1)")]
    );
}

#[test]
fn min_and_initial_must_fit_under_max() {
    assert_eq!(
        problems(adaptive([("max", int(10)), ("min", int(50))])),
        [format!("{AT} `min` must be ≤ `max` (10) (found 50)")]
    );
    assert_eq!(
        problems(adaptive([("max", int(100)), ("initial", int(500))])),
        [format!("{AT} `initial` must be ≤ `max` (100) (found 500)")]
    );
    assert_eq!(
        problems(adaptive([
            ("max", int(100)),
            ("min", int(10)),
            ("initial", int(5)),
        ])),
        [format!("{AT} `initial` must be ≥ `min` (10) (found 5)")]
    );
}

#[test]
fn window_and_tolerance_have_their_rules() {
    let tolerance = TOLERANCE;
    assert_eq!(
        problems(adaptive([
            ("max", int(10)),
            ("window", s("0s")),
            ("tolerance", Value::Float(1.0)),
        ])),
        [
            format!("{AT} `tolerance` {tolerance} (found 1)"),
            format!("{AT} `window` must be > 0 (found \"0s\")"),
        ]
    );
    // Numbers out of range that read as another unit: see below.
    for (value, found) in [(s("fast"), "\"fast\""), (Value::Float(f64::NAN), "NaN")] {
        assert_eq!(
            problems(adaptive([("max", int(10)), ("tolerance", value)])),
            [format!("{AT} `tolerance` {tolerance} (found {found})")]
        );
    }
    assert_eq!(
        problems(adaptive([("max", int(10)), ("window", s("-1s"))])),
        [format!("{AT} `window` must not be negative: a duration is a wait or a limit, from \"0s\" up (found \"-1s\")")]
    );
    assert_eq!(
        problems(adaptive([("max", int(10)), ("window", int(5))])),
        [format!("{AT} `window` must be a duration with a unit, such as \"100ms\", \"2s\" or \"1m\" (found 5)")]
    );
}

/// The rule of `tolerance`.
const TOLERANCE: &str = "must be a number > 1 and ≤ 10 with a decimal point (1.1: a window may be 10 % slower than the baseline before the limit comes down)";

#[test]
fn a_tolerance_that_reads_as_a_percent_is_refused_with_the_ratio_it_stands_for() -> TestResult {
    let tenfold = "a whole number reads as a percent: `tolerance = 1.1` is 10 %, and `tolerance = 10.0` lets latency reach 10 times the baseline";
    let fivefold = "a whole number reads as a percent: `tolerance = 1.05` is 5 %, and `tolerance = 5.0` lets latency reach 5 times the baseline";
    for (value, found, meant) in [
        // In range as ratios, and refused: whole numbers are percents.
        (int(10), "10", tenfold),
        (s("5"), "\"5\"", fivefold),
        (s(" 10 "), "\" 10 \"", tenfold),
        // Out of range as ratios; the rule says what they stand for.
        (
            int(1),
            "1",
            "a whole number reads as a percent: `tolerance = 1.01` is 1 %",
        ),
        (
            int(25),
            "25",
            "a whole number reads as a percent: `tolerance = 1.25` is 25 %",
        ),
        (
            int(150),
            "150",
            "a whole number reads as a percent: `tolerance = 2.5` is 150 %",
        ),
        (
            Value::Float(10.5),
            "10.5",
            "a number above 10 reads as a percent: `tolerance = 1.105` is 10.5 %",
        ),
        (
            Value::Float(12.5),
            "12.5",
            "a number above 10 reads as a percent: `tolerance = 1.125` is 12.5 %",
        ),
        (
            Value::Float(0.1),
            "0.1",
            "a number below 1 reads as the share over the baseline: `tolerance = 1.1` is 10 %",
        ),
        (
            Value::Float(0.5),
            "0.5",
            "a number below 1 reads as the share over the baseline: `tolerance = 1.5` is 50 %",
        ),
        (
            s("0.25"),
            "\"0.25\"",
            "a number below 1 reads as the share over the baseline: `tolerance = 1.25` is 25 %",
        ),
    ] {
        assert_eq!(
            problems(adaptive([("max", int(10)), ("tolerance", value)])),
            [format!(
                "{AT} `tolerance` {TOLERANCE}; {meant} (found {found})"
            )]
        );
    }
    // No reading gives a tolerance in range: the rule alone.
    for (value, found) in [
        (int(0), "0"),
        (int(-5), "-5"),
        (int(5000), "5000"),
        (Value::Float(1.0), "1"),
        (Value::Float(1e6), "1000000"),
    ] {
        assert_eq!(
            problems(adaptive([("max", int(10)), ("tolerance", value)])),
            [format!("{AT} `tolerance` {TOLERANCE} (found {found})")]
        );
    }
    // Written with a decimal point, a ratio is taken as written, 2 and
    // more included.
    for (value, expected) in [
        (Value::Float(10.0), 10.0),
        (Value::Float(2.5), 2.5),
        (s("2.0"), 2.0),
        (s(" 1.05 "), 1.05),
    ] {
        let read = settings(adaptive([("max", int(10)), ("tolerance", value)]))?;
        assert_eq!(read.adaptive.map(|a| a.tolerance), Some(expected));
    }
    Ok(())
}

#[test]
fn misspelt_and_foreign_keys_are_answered() {
    assert_eq!(
        problems(adaptive([
            ("max", int(10)),
            ("tolerence", Value::Float(1.2))
        ])),
        [format!(
            "{AT} `tolerence` is not a known setting; did you mean `tolerance`? (found 1.2)"
        )]
    );
    // A misspelt required key is one mistake.
    assert_eq!(
        problems(adaptive([("maxx", int(10))])),
        [format!("{AT} `maxx` is not a known setting; did you mean `max`? (`max` is required) (found 10)")]
    );
    assert_eq!(
        problems(adaptive([("max_concurrency", int(10))])),
        [format!("{AT} `max_concurrency` is not a known setting; did you mean `max`? (`max` is required) the same cap under this project's name (found 10)")]
    );
    assert_eq!(
        problems(adaptive([("max", int(10)), ("min_limit", int(2))])),
        [format!("{AT} `min_limit` is not a known setting; did you mean `min`? the same floor under this project's name (found 2)")]
    );
}

#[test]
fn every_problem_is_reported_at_once() {
    let found = problems(adaptive([
        ("max", int(0)),
        ("min", int(0)),
        ("initial", int(0)),
        ("window", s("soon")),
        ("tolerance", Value::Float(0.0)),
        ("limit", int(3)),
        ("policy", s("wait")),
    ]));
    let keys: Vec<&str> = found
        .iter()
        .filter_map(|p| p.strip_prefix(AT))
        .filter_map(|p| p.split('`').nth(1))
        .collect();
    assert_eq!(
        keys,
        [
            "initial",
            "limit",
            "max",
            "min",
            "policy",
            "tolerance",
            "window"
        ],
        "{found:#?}"
    );
}

/// The rows of the key tables in `text`, rustdoc's `///` and `//!` or
/// README's.
fn rows(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| {
            let l = l.trim_start();
            l.strip_prefix("///")
                .or_else(|| l.strip_prefix("//!"))
                .unwrap_or(l)
                .trim()
                .to_owned()
        })
        .filter(|l| l.starts_with("| `"))
        .collect()
}

/// The key of a row: its first cell, without the backticks.
fn key(row: &str) -> String {
    row.trim_start_matches('|')
        .split('|')
        .next()
        .unwrap_or("")
        .trim()
        .trim_matches('`')
        .to_owned()
}

#[test]
fn the_adaptive_keys_are_one_set_in_readme_rustdoc_and_reader() {
    let adaptive_rows = rows(include_str!("../src/concurrency/adaptive.rs"));
    let common_rows = rows(include_str!("../src/concurrency/mod.rs"));
    let readme = rows(include_str!("../guide/concurrency_limit.md"));
    assert_eq!(adaptive_rows.len(), 5, "{adaptive_rows:#?}");
    for row in &adaptive_rows {
        assert!(readme.contains(row), "the guide lacks the row: {row}");
    }
    // An adaptive section takes the keys every type has, but `limit`, and
    // its own.
    let mut expected: std::collections::BTreeSet<String> = common_rows
        .iter()
        .map(|r| key(r))
        .filter(|k| k != "limit")
        .collect();
    expected.extend(adaptive_rows.iter().map(|r| key(r)));
    let probe = adaptive([("max", int(10))]);
    let asked = resilient_core::settings::accepted_keys(&probe, |s| {
        let _ = LimiterSettings::read(s);
    });
    assert_eq!(asked, expected);
}
