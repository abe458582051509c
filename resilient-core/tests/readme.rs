//! The README's settings table is the one documented on the settings type, so
//! the two cannot drift apart.

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

fn check(docs: &str, at_least: usize) {
    let docs = table_rows(docs, "///");
    let readme = table_rows(include_str!("../../README.md"), "");
    assert!(docs.len() >= at_least, "the settings docs lost their table");
    for row in &docs {
        assert!(readme.contains(row), "README lacks the settings row: {row}");
    }
}

#[test]
fn readme_retry_table_matches_the_settings_docs() {
    check(include_str!("../src/retry/settings.rs"), 16);
}

#[test]
fn readme_circuit_breaker_table_matches_the_settings_docs() {
    check(include_str!("../src/circuit_breaker/settings.rs"), 14);
}

#[test]
fn readme_timeout_table_matches_the_settings_docs() {
    check(include_str!("../src/timeout/mod.rs"), 2);
}

#[test]
fn readme_concurrency_table_matches_the_settings_docs() {
    check(include_str!("../src/concurrency/mod.rs"), 4);
}

#[test]
fn readme_rate_limiter_table_matches_the_settings_docs() {
    check(include_str!("../src/rate_limiter/mod.rs"), 5);
}

#[test]
fn readme_telemetry_tables_match_the_telemetry_docs() {
    // The settings, the log lines (but the row "same") and the metrics.
    check(include_str!("../src/telemetry/mod.rs"), 2 + 8 + 7);
}
