//! How startup problems are worded where the plain rule would mislead: values
//! too long to echo, durations that are negative or out of range, a section
//! that is misspelt, and specs of different kinds on one path.
//!
//! Every test names the specs it builds, so the specs declared here (two of
//! them on one path, on purpose) never meet in one registry by accident.

mod support;
use support::*;

use resilient_core::{CircuitBreakerSpec, Registry, RetrySpec};

/// The spec most tests configure.
#[derive(RetrySpec)]
#[spec("resilient.retry.pet")]
pub struct PetRetry;

/// A breaker declared, by mistake, on the retry's path.
#[derive(CircuitBreakerSpec)]
#[spec("resilient.retry.pet")]
pub struct PetBreaker;

const PET: &str = "PetRetry";
const PET_PATH: &str = "resilient.retry.pet";

fn pet_err(body: &str) -> resilient_config::ConfigError {
    build_err(
        Registry::builder().spec::<PetRetry>(),
        &format!("[resilient.retry.pet]\n{body}\n"),
    )
}

#[test]
fn a_long_value_is_echoed_cut_with_its_length() {
    let huge = "x".repeat(1 << 20);
    let err = pet_err(&format!("delay = \"{huge}\"\nattempts = 2"));
    let found = format!("\"{}…\" (1048576 characters)", "x".repeat(80));
    check(only(&err), PET, PET_PATH, "delay", DURATION, Some(&found));
    assert!(err.to_string().len() < 400, "{err}");
}

#[test]
fn a_value_of_80_characters_is_echoed_whole() {
    let value = "y".repeat(80);
    let err = pet_err(&format!("delay = \"{value}\"\nattempts = 2"));
    check(
        only(&err),
        PET,
        PET_PATH,
        "delay",
        DURATION,
        Some(&format!("\"{value}\"")),
    );
}

#[test]
fn a_value_is_cut_at_a_character_not_a_byte() {
    let value = "é".repeat(100);
    let err = pet_err(&format!("delay = \"{value}\"\nattempts = 2"));
    let found = format!("\"{}…\" (100 characters)", "é".repeat(80));
    check(only(&err), PET, PET_PATH, "delay", DURATION, Some(&found));
}

#[test]
fn a_duration_beyond_the_largest_is_out_of_range_not_missing_a_unit() {
    for value in ["584942417355y", "300000000000000000000s"] {
        let err = pet_err(&format!("delay = \"{value}\"\nattempts = 2"));
        let problem = only(&err);
        check(
            problem,
            PET,
            PET_PATH,
            "delay",
            "is out of range: a duration is at most about 584 billion years",
            Some(&format!("\"{value}\"")),
        );
        assert!(!problem.rule.contains("unit"), "{problem}");
    }
}

#[test]
fn a_negative_duration_is_reported_as_negative() {
    for (value, found) in [
        ("\"-1s\"", "\"-1s\""),
        ("\" -5ms\"", "\" -5ms\""),
        ("-1", "-1"),
    ] {
        let err = pet_err(&format!("delay = {value}\nattempts = 2"));
        let problem = only(&err);
        check(
            problem,
            PET,
            PET_PATH,
            "delay",
            "must not be negative",
            Some(found),
        );
        assert!(!problem.rule.contains("unit"), "{problem}");
    }
}

#[test]
fn a_misspelt_section_is_suggested() {
    // The last segment.
    let err = build_err(
        Registry::builder().spec::<PetRetry>(),
        "[resilient.retry.pett]\ndelay = \"1s\"\nattempts = 1\n",
    );
    check(
        only(&err),
        PET,
        PET_PATH,
        "",
        "has no section in the configuration; did you mean `resilient.retry.pett`?",
        None,
    );
    // A middle one, and a case the environment could never override.
    let err = build_err(
        Registry::builder().spec::<PetRetry>(),
        "[resilient.Retry.pet]\ndelay = \"1s\"\nattempts = 1\n",
    );
    check(
        only(&err),
        PET,
        PET_PATH,
        "",
        "did you mean `resilient.Retry.pet`?",
        None,
    );
}

#[test]
fn a_missing_section_with_no_near_one_suggests_nothing() {
    let err = build_err(
        Registry::builder().spec::<PetRetry>(),
        "[resilient.retry.orders]\ndelay = \"1s\"\nattempts = 1\n",
    );
    let problem = only(&err);
    check(problem, PET, PET_PATH, "", "has no section", None);
    assert!(!problem.rule.contains("did you mean"), "{problem}");
}

#[test]
fn specs_of_different_kinds_on_one_path_are_one_problem_naming_both() {
    let err = build_err(
        Registry::builder().spec::<PetRetry>().spec::<PetBreaker>(),
        "[resilient.retry.pet]\ndelay = \"1s\"\nattempts = 1\n",
    );
    let problem = only(&err);
    check(
        problem,
        "PetBreaker",
        PET_PATH,
        "",
        "is the section of specs of different kinds: `PetBreaker` (a circuit breaker spec), `PetRetry` (a retry spec)",
        None,
    );
    assert!(
        problem.rule.contains("give each spec its own path"),
        "{problem}"
    );
}
