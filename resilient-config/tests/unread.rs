//! Configuration that no spec reads: under the roots of the spec paths (the
//! first segment of each, and `resilient`), a table or value that no spec
//! reads is a problem, with the nearest spec path and where it came from.
//!
//! These tests build registries of every spec linked into this binary
//! (`Registry::builder()` with no `.spec::<S>()`): the check needs to know
//! every spec that could read a section. The two specs below are all there
//! is in this binary. Only `a_reload_reports_unread_configuration_and_changes_nothing`
//! installs a registry.

mod support;
use support::*;

use resilient_core::{Registry, RetrySpec, TimeoutSpec};

/// A retry spec.
#[derive(RetrySpec)]
#[spec("resilient.retry.pet")]
pub struct PetRetry;

/// A timeout spec, under another kind's table.
#[derive(TimeoutSpec)]
#[spec("resilient.timeout.pet")]
pub struct PetTimeout;

/// Valid sections for both specs.
const VALID: &str = "[resilient.retry.pet]\ndelay = \"1s\"\nattempts = 2\n\n[resilient.timeout.pet]\nduration = \"1s\"\n";

/// The problems of building every spec of this binary from `toml`, as
/// messages.
fn messages(settings: &config::Config) -> Vec<String> {
    match resilient_config::build(Registry::builder(), settings) {
        Ok(_) => Vec::new(),
        Err(err) => err.problems().iter().map(ToString::to_string).collect(),
    }
}

/// `VALID` from a file, with one environment variable over it (prefix
/// `APP`, separator `__`, as an application sets them).
fn valid_with_env(name: &str, value: &str) -> config::Config {
    let vars = std::collections::HashMap::from([(name.to_owned(), value.to_owned())]);
    config::Config::builder()
        .add_source(config::File::from_str(VALID, config::FileFormat::Toml))
        .add_source(
            config::Environment::with_prefix("APP")
                .separator("__")
                .source(Some(vars.into_iter().collect())),
        )
        .build()
        .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_misspelt_kind_beside_the_right_section_is_reported_with_the_spec_meant() {
    let err = build_err(
        Registry::builder(),
        &format!("{VALID}\n[resilient.retyr.pet]\ndelay = \"1s\"\nattempts = 5\n"),
    );
    let problem = only(&err);
    assert_eq!(problem.spec, "");
    assert_eq!(problem.path, "resilient");
    assert_eq!(problem.key, "retyr.pet");
    assert_eq!(
        problem.to_string(),
        "`resilient.retyr.pet` is read by no spec; did you mean `resilient.retry.pet` (the section of `PetRetry`)? A spec reads its section only at the path in its `#[spec(..)]`, so this has no effect"
    );
}

#[test]
fn a_section_near_no_spec_names_the_tables_specs_go_through() {
    let settings = config(&format!("{VALID}\n[resilient.bulkhead.pet]\nlimit = 5\n"));
    assert_eq!(
        messages(&settings),
        ["`resilient.bulkhead` is read by no spec: the specs' sections under `resilient` go through `redis`, `retry`, `telemetry`, `timeout`; correct its path, or remove it (`resilient` holds resilient's settings only)"]
    );
}

#[test]
fn an_environment_override_of_a_path_no_spec_has_names_the_key_it_set() {
    let settings = valid_with_env("APP__RESILIENT__RETRY__PETT__ATTEMPTS", "3");
    assert_eq!(
        messages(&settings),
        ["`resilient.retry.pett` is read by no spec; did you mean `resilient.retry.pet` (the section of `PetRetry`)? A spec reads its section only at the path in its `#[spec(..)]`, so this has no effect (set by an environment variable, for `resilient.retry.pett.attempts`)"]
    );
}

#[test]
fn a_misspelt_key_from_the_environment_says_so() {
    let settings = valid_with_env("APP__RESILIENT__RETRY__PET__ATTEMPS", "3");
    assert_eq!(
        messages(&settings),
        ["PetRetry at `resilient.retry.pet`: key `attemps` is not a known setting; did you mean `attempts`? (set by an environment variable, for `resilient.retry.pet.attemps`) (found \"3\")"]
    );
}

#[test]
fn a_section_from_a_file_names_the_file() {
    let file = std::env::temp_dir().join(format!("unread-{}.toml", std::process::id()));
    std::fs::write(
        &file,
        format!("{VALID}\n[resilient.timeout.pett]\nduration = \"2s\"\n"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let built = config::Config::builder()
        .add_source(config::File::from(file.as_path()))
        .build();
    let _ = std::fs::remove_file(&file);
    let settings = built.unwrap_or_else(|e| panic!("{e}"));
    // The `config` crate keeps the file's path relative to the working
    // directory (`../../../tmp/..` from a crate's folder): the message
    // names it as the application did.
    assert_eq!(
        messages(&settings),
        [format!("`resilient.timeout.pett` is read by no spec; did you mean `resilient.timeout.pet` (the section of `PetTimeout`)? A spec reads its section only at the path in its `#[spec(..)]`, so this has no effect (written in `{}`)", file.display())]
    );
}

#[test]
fn a_file_named_by_a_relative_path_is_named_by_that_path() {
    let name = format!("unread-relative-{}.toml", std::process::id());
    std::fs::write(&name, "[resilient.timeout.pett]\nduration = \"2s\"\n")
        .unwrap_or_else(|e| panic!("{e}"));
    let built = config::Config::builder()
        .add_source(config::File::from_str(VALID, config::FileFormat::Toml))
        .add_source(config::File::with_name(&name))
        .build();
    let _ = std::fs::remove_file(&name);
    let settings = built.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        messages(&settings),
        [format!("`resilient.timeout.pett` is read by no spec; did you mean `resilient.timeout.pet` (the section of `PetTimeout`)? A spec reads its section only at the path in its `#[spec(..)]`, so this has no effect (written in `{name}`)")]
    );
}

#[test]
fn the_applications_own_settings_outside_the_roots_are_not_looked_at() {
    let settings = config(&format!(
        "[app]\nport = 8080\nretry = {{ pet = 1 }}\n\n{VALID}\n[resilient.telemetry.logging]\nenabled = true\n"
    ));
    assert_eq!(messages(&settings), Vec::<String>::new());
}

#[test]
fn a_root_that_is_not_a_table_is_one_problem_naming_every_spec_under_it() {
    let settings = config("resilient = \"on\"\n");
    assert_eq!(
        messages(&settings),
        ["`resilient` must be a table: the sections of `PetRetry` (`resilient.retry.pet`), `PetTimeout` (`resilient.timeout.pet`) are under it; remove the value, or move it out of `resilient` (found \"on\")"]
    );
}

#[test]
fn an_unknown_key_inside_a_spec_section_is_reported_once_as_unknown() {
    let err = build_err(
        Registry::builder(),
        &format!("{VALID}[resilient.retry.pet.extra]\nx = 1\n"),
    );
    let problem = only(&err);
    assert_eq!((problem.spec, problem.key.as_str()), ("PetRetry", "extra"));
    assert!(
        problem.rule.starts_with("is not a known setting"),
        "{problem}"
    );
}

#[test]
fn a_missing_section_and_its_near_miss_are_one_problem_even_two_segments_off() {
    for written in ["resilient.retry.pett", "resilient.retyr.pett"] {
        let settings = config(&format!(
            "[{written}]\ndelay = \"1s\"\nattempts = 1\n\n[resilient.timeout.pet]\nduration = \"1s\"\n"
        ));
        assert_eq!(
            messages(&settings),
            [format!("PetRetry at `resilient.retry.pet`: has no section in the configuration; did you mean `{written}`? (the section must be at `resilient.retry.pet`, the path in `#[spec(..)]`)")]
        );
    }
}

#[test]
fn a_registry_of_named_specs_does_not_look_for_unread_sections() {
    // A test's configuration may hold the sections of other tests' specs.
    let settings = config(&format!(
        "{VALID}\n[resilient.retry.other]\ndelay = \"1s\"\n"
    ));
    let built = resilient_config::build(Registry::builder().spec::<PetRetry>(), &settings);
    assert!(built.is_ok(), "{:?}", built.err());
}

#[test]
fn a_reload_reports_unread_configuration_and_changes_nothing() {
    resilient_config::init(&config(VALID)).unwrap_or_else(|e| panic!("{e}"));
    let Err(err) = resilient_config::reload(&config(&format!(
        "{}\n[resilient.retyr.pet]\nattempts = 5\n",
        VALID.replace("attempts = 2", "attempts = 4")
    ))) else {
        panic!("the reload was applied")
    };
    assert_eq!(
        err.to_string(),
        "invalid resilient configuration (1 problem):\n  - `resilient.retyr.pet` is read by no spec; did you mean `resilient.retry.pet` (the section of `PetRetry`)? A spec reads its section only at the path in its `#[spec(..)]`, so this has no effect"
    );
    // Nothing changed: the same sections again are no change at all.
    let reloaded = resilient_config::reload(&config(VALID)).unwrap_or_else(|e| panic!("{e}"));
    assert!(reloaded.specs.is_empty(), "{reloaded:?}");
}

#[test]
fn a_misspelt_optional_section_is_named_with_the_section_meant() {
    for (written, meant, name) in [
        (
            "resilient.telemetri",
            "resilient.telemetry",
            "the telemetry switches",
        ),
        ("resilient.rediss", "resilient.redis", "the Redis backend"),
        ("resilient.redis_", "resilient.redis", "the Redis backend"),
    ] {
        let body = if meant.ends_with("redis") {
            "url = \"redis://127.0.0.1:6379\""
        } else {
            "logging = { enabled = false }"
        };
        let settings = config(&format!("{VALID}\n[{written}]\n{body}\n"));
        assert_eq!(
            messages(&settings),
            [format!("`{written}` is read by no spec; did you mean `{meant}` (the section of {name})? A spec reads its section only at the path in its `#[spec(..)]`, so this has no effect")],
            "{written}"
        );
    }
}
