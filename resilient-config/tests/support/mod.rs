//! What the validation tests share: building a config from TOML, and
//! checking a reported problem field by field and in its message.

#![allow(dead_code, unreachable_pub)] // each test file uses a part

use resilient_config::ConfigError;
use resilient_core::settings::Problem;
use resilient_core::RegistryBuilder;

pub type TestResult = Result<(), Box<dyn std::error::Error>>;

/// The rule of a value that is not a duration.
pub const DURATION: &str = "must be a duration with a unit, such as \"100ms\", \"2s\" or \"1m\"";

/// A `config::Config` holding `toml`.
pub fn config(toml: &str) -> config::Config {
    match config::Config::builder()
        .add_source(config::File::from_str(toml, config::FileFormat::Toml))
        .build()
    {
        Ok(config) => config,
        Err(e) => panic!("the test's TOML does not parse: {e}\n{toml}"),
    }
}

/// The error of building `builder` from `toml`; panics if it builds.
pub fn build_err(builder: RegistryBuilder, toml: &str) -> ConfigError {
    let Err(err) = resilient_config::build(builder, &config(toml)) else {
        panic!("expected a ConfigError for:\n{toml}");
    };
    err
}

/// The only problem of `err`; panics if there are none or several.
pub fn only(err: &ConfigError) -> &Problem {
    match err.problems() {
        [problem] => problem,
        other => panic!("expected exactly one problem, got {}:\n{err}", other.len()),
    }
}

/// The problem of `err` with key `key`; panics if there is none.
pub fn with_key<'e>(err: &'e ConfigError, key: &str) -> &'e Problem {
    match err.problems().iter().find(|p| p.key == key) {
        Some(problem) => problem,
        None => panic!("no problem with key `{key}`:\n{err}"),
    }
}

/// Checks every field of `problem`, and that its message names the spec, the
/// path, the key, the rule and the value found.
#[track_caller]
pub fn check(
    problem: &Problem,
    spec: &str,
    path: &str,
    key: &str,
    rule: &str,
    found: Option<&str>,
) {
    assert_eq!(problem.spec, spec, "{problem}");
    assert_eq!(problem.path, path, "{problem}");
    assert_eq!(problem.key, key, "{problem}");
    assert!(
        problem.rule.contains(rule),
        "rule {:?} does not contain {rule:?}",
        problem.rule
    );
    assert_eq!(problem.found.as_deref(), found, "{problem}");

    let message = problem.to_string();
    assert!(
        message.starts_with(&format!("{spec} at `{path}`: ")),
        "message does not name spec and path: {message}"
    );
    if !key.is_empty() {
        assert!(
            message.contains(&format!(": key `{key}` ")),
            "message does not name the key: {message}"
        );
    }
    assert!(message.contains(rule), "message lacks the rule: {message}");
    match found {
        Some(found) => assert!(
            message.ends_with(&format!(" (found {found})")),
            "message does not name the value found: {message}"
        ),
        None => assert!(
            !message.contains(" (found "),
            "message names a value although none was found: {message}"
        ),
    }
}

/// The settings of a section with only `delay = "100ms"` and `attempts = 2`.
pub fn minimal() -> resilient_core::retry::RetrySettings {
    resilient_core::retry::RetrySettings {
        enabled: true,
        delay: std::time::Duration::from_millis(100),
        attempts: 2,
        delay_step: std::time::Duration::ZERO,
        backoff: None,
        jitter: resilient_core::retry::Jitter {
            full: false,
            ratio: 1.0,
        },
        timeout: None,
        budget: None,
        retry_call_not_permitted: false,
        max_hinted_delay: None,
        throttle: None,
        attempt_header: None,
        share_outer_budget: false,
        causes: resilient_core::retry::Causes::default(),
    }
}
