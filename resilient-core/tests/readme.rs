//! The README's settings table is the one documented on the settings type, so
//! the two cannot drift apart.

fn table_rows(text: &str, strip: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.trim_start().trim_start_matches(strip).trim())
        .filter(|l| l.starts_with("| `"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn readme_retry_table_matches_the_settings_docs() {
    let docs = table_rows(include_str!("../src/retry/settings.rs"), "///");
    let readme = table_rows(include_str!("../../README.md"), "");
    assert!(docs.len() >= 15, "the settings docs lost their table");
    for row in &docs {
        assert!(readme.contains(row), "README lacks the settings row: {row}");
    }
}
