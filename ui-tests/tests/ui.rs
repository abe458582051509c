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
