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

/// The same for a fn that returns a stream, under `#[retryable]` and under
/// all six attributes a stream takes. A boxed stream's errors read to the
/// letter as without the attributes. An `impl Stream`'s are at the same
/// place (the return type) in the same words, with one line of rustc's
/// own that differs: the attributes check the body's stream against the
/// return type by a cast to `&dyn Stream<..>`, and rustc notes the cast,
/// where without them it points at the body's tail ("return type was
/// inferred to be .. here") after a type that is no stream at all.
#[test]
fn stream_body_type_errors_read_as_without_the_attributes() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fail");
    let read = |case: &str| {
        let file = format!("body_type_error_stream_{case}");
        let text = std::fs::read_to_string(dir.join(format!("{file}.stderr")))
            .unwrap_or_else(|e| panic!("{file}.stderr: {e}"));
        text.replace(&format!("{file}.rs"), "CASE.rs")
    };
    let plain = read("plain");
    assert_eq!(plain.matches("error[E0").count(), 4, "{plain}");
    let inferred = "return type was inferred to be";
    assert_eq!(plain.matches(inferred).count(), 1, "{plain}");
    let lines: Vec<&str> = plain.lines().collect();
    let plain: Vec<&str> = lines
        .iter()
        .enumerate()
        .filter(|(i, line)| {
            !line.contains(inferred) && !lines.get(i + 1).is_some_and(|l| l.contains(inferred))
        })
        .map(|(_, line)| *line)
        .collect();
    for case in ["retryable", "all_six"] {
        let text = read(case);
        let cast = "= note: required for the cast from `&";
        assert_eq!(text.matches(cast).count(), 2, "{text}");
        let lines: Vec<&str> = text.lines().filter(|l| !l.contains(cast)).collect();
        assert_eq!(lines, plain, "body_type_error_stream_{case} differs");
    }
}
