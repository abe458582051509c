//! Every diagnostic a user can meet, and every fn shape that must compile.
//!
//! Refresh the `.stderr` snapshots after changing a message with
//! `TRYBUILD=overwrite cargo test -p ui-tests`, then read the diff.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/pass/*.rs");
    t.compile_fail("tests/fail/*.rs");
}

/// A type error in an annotated fn's body reads exactly as it does without
/// the attributes: `ui` checks each case's output against its snapshot, and
/// this checks that the snapshots are the same but for the file's name.
#[test]
fn body_type_errors_read_as_without_the_attributes() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fail");
    let read = |case: &str| {
        let file = format!("body_type_error_{case}");
        let text = std::fs::read_to_string(dir.join(format!("{file}.stderr")))
            .unwrap_or_else(|e| panic!("{file}.stderr: {e}"));
        text.replace(&format!("{file}.rs"), "CASE.rs")
    };
    let plain = read("plain");
    assert_eq!(plain.matches("error[E0308]").count(), 3, "{plain}");
    for case in [
        "retryable",
        "circuit_breakable",
        "concurrency_limit",
        "rate_limited",
        "timeout",
        "fallback",
        "all_six",
    ] {
        assert_eq!(read(case), plain, "body_type_error_{case} differs");
    }
}
