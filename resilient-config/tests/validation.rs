//! Startup validation of retry specs through the public API: a
//! `config::Config` read from TOML (and overrides, as the environment gives
//! them) is turned into a registry with `resilient_config::build`, and every
//! rule of `RetrySettings::read` is checked through the `ConfigError` it gives.
//!
//! Every test names the specs it builds with `Registry::builder().spec::<X>()`,
//! so it needs no section for the other specs of this file. `init`, which
//! installs for the process, is tested in `init.rs`, a binary of its own.

mod support;
use support::*;

use std::error::Error;
use std::time::Duration;

use resilient_config::ConfigError;
use resilient_core::backend::Backend;
use resilient_core::retry::{
    Backoff, BudgetSettings, Jitter, OnBudgetBackendFailure, RetrySettings, ThrottleSettings,
};
use resilient_core::{Registry, RetrySpec};

/// The spec most tests configure.
#[derive(RetrySpec)]
#[spec("resilient.retry.pet")]
pub struct PetRetry;

/// A second spec, for configurations with several specs.
#[derive(RetrySpec)]
#[spec("resilient.retry.order")]
pub struct OrderRetry;

/// A third spec, for configurations with several specs.
#[derive(RetrySpec)]
#[spec("resilient.retry.stock")]
pub struct StockRetry;

const PET: &str = "PetRetry";
const PET_PATH: &str = "resilient.retry.pet";

/// The error of building [`PetRetry`] from `toml`.
fn pet_err(toml: &str) -> ConfigError {
    build_err(Registry::builder().spec::<PetRetry>(), toml)
}

/// `[resilient.retry.pet]` followed by `body`.
fn pet(body: &str) -> String {
    format!("[resilient.retry.pet]\n{body}\n")
}

/// Checks the only problem of [`PetRetry`]'s section `body`.
#[track_caller]
fn check_pet(body: &str, key: &str, rule: &str, found: Option<&str>) {
    let err = pet_err(&pet(body));
    check(only(&err), PET, PET_PATH, key, rule, found);
}

/// [`PetRetry`]'s settings, read back with `PetRetry::get()` in a scope.
async fn pet_settings(config: &config::Config) -> Result<RetrySettings, Box<dyn Error>> {
    let registry = resilient_config::build(Registry::builder().spec::<PetRetry>(), config)?;
    assert!(registry.contains::<PetRetry>());
    assert_eq!(registry.len(), 1);
    let settings = registry
        .scope(async { PetRetry::get().map(|handle| handle.settings().clone()) })
        .await?;
    Ok(settings)
}

const MINIMAL: &str = "delay = \"100ms\"\nattempts = 2";

const WHOLE: &str = "must be a whole number in 0..=4294967295";

// ---------------------------------------------------------------------------
// The section itself
// ---------------------------------------------------------------------------

#[test]
fn section_is_required() {
    let err = pet_err("[resilient.retry.other]\ndelay = \"1s\"\nattempts = 1\n");
    check(
        only(&err),
        PET,
        PET_PATH,
        "",
        "has no section in the configuration",
        None,
    );

    // An empty configuration too.
    let err = pet_err("");
    check(only(&err), PET, PET_PATH, "", "has no section", None);
}

#[test]
fn section_must_be_a_table() {
    let err = pet_err("[resilient.retry]\npet = \"fast\"\n");
    check(
        only(&err),
        PET,
        PET_PATH,
        "",
        "must be a table of settings",
        Some("\"fast\""),
    );

    let err = pet_err("[resilient.retry]\npet = 5\n");
    check(
        only(&err),
        PET,
        PET_PATH,
        "",
        "must be a table of settings",
        Some("5"),
    );
}

// ---------------------------------------------------------------------------
// delay, attempts, delay_step
// ---------------------------------------------------------------------------

#[test]
fn delay_is_required() {
    check_pet(
        "attempts = 2",
        "delay",
        "is required (a duration such as \"100ms\", \"2s\" or \"1m\")",
        None,
    );
}

#[test]
fn attempts_is_required() {
    check_pet(
        "delay = \"100ms\"",
        "attempts",
        &format!("is required ({WHOLE})"),
        None,
    );
}

#[test]
fn attempts_must_not_be_negative() {
    check_pet(
        "delay = \"100ms\"\nattempts = -1",
        "attempts",
        WHOLE,
        Some("-1"),
    );
}

#[test]
fn attempts_must_be_a_whole_number() {
    check_pet(
        "delay = \"100ms\"\nattempts = 1.5",
        "attempts",
        WHOLE,
        Some("1.5"),
    );
    check_pet(
        "delay = \"100ms\"\nattempts = \"many\"",
        "attempts",
        WHOLE,
        Some("\"many\""),
    );
    check_pet(
        "delay = \"100ms\"\nattempts = true",
        "attempts",
        WHOLE,
        Some("true"),
    );
}

#[test]
fn attempts_must_fit_in_u32() -> TestResult {
    check_pet(
        "delay = \"100ms\"\nattempts = 4294967296",
        "attempts",
        WHOLE,
        Some("4294967296"),
    );
    // u32::MAX itself is accepted.
    let config = config(&pet("delay = \"100ms\"\nattempts = 4294967295"));
    let registry = resilient_config::build(Registry::builder().spec::<PetRetry>(), &config)?;
    assert!(registry.contains::<PetRetry>());
    Ok(())
}

#[test]
fn delay_must_be_a_duration() {
    check_pet(
        "delay = \"fast\"\nattempts = 2",
        "delay",
        DURATION,
        Some("\"fast\""),
    );
    // A bare number has no unit.
    check_pet("delay = 100\nattempts = 2", "delay", DURATION, Some("100"));
    check_pet(
        "delay = \"100\"\nattempts = 2",
        "delay",
        DURATION,
        Some("\"100\""),
    );
}

#[test]
fn delay_step_must_be_a_duration() {
    check_pet(
        &format!("{MINIMAL}\ndelay_step = \"soon\""),
        "delay_step",
        DURATION,
        Some("\"soon\""),
    );
    check_pet(
        &format!("{MINIMAL}\ndelay_step = 10"),
        "delay_step",
        DURATION,
        Some("10"),
    );
}

// ---------------------------------------------------------------------------
// Unknown keys
// ---------------------------------------------------------------------------

#[test]
fn unknown_key_suggests_the_nearest_known_key() {
    // A typo of a required key is one problem, not two: the suggestion says
    // the key meant is required, and no separate "is required" is reported.
    let err = pet_err(&pet("delay = \"100ms\"\natempts = 2"));
    assert_eq!(err.problems().len(), 1, "{err}");
    check(
        with_key(&err, "atempts"),
        PET,
        PET_PATH,
        "atempts",
        "is not a known setting; did you mean `attempts`? (`attempts` is required)",
        Some("2"),
    );

    // camelCase finds the snake_case key.
    check_pet(
        &format!("{MINIMAL}\ndelayStep = \"10ms\""),
        "delayStep",
        "is not a known setting; did you mean `delay_step`?",
        Some("\"10ms\""),
    );
    // So does a lower-cased key, as an environment override gives it.
    check_pet(
        &format!("{MINIMAL}\ndelaystep = \"10ms\""),
        "delaystep",
        "did you mean `delay_step`?",
        Some("\"10ms\""),
    );
}

#[test]
fn unknown_key_without_a_near_match_lists_the_known_keys() {
    let err = pet_err(&pet(&format!("{MINIMAL}\nzzz = 1")));
    let problem = only(&err);
    check(
        problem,
        PET,
        PET_PATH,
        "zzz",
        "is not a known setting; known settings here: ",
        Some("1"),
    );
    assert!(!problem.rule.contains("did you mean"), "{problem}");
}

/// The list holds the keys valid at that level, each once, and each table
/// with its keys: not the keys a rule looks up only to reject them there
/// (`multiplier`, `delay_max` and the budget's `tokens_*` belong in tables).
#[test]
fn the_known_settings_listed_are_those_valid_here_with_each_tables_keys() {
    let err = pet_err(&pet(&format!("{MINIMAL}\nzzz = 1")));
    let problem = only(&err);
    assert_eq!(
        problem.to_string(),
        "PetRetry at `resilient.retry.pet`: key `zzz` is not a known setting; known settings here: \
         `telemetry` (a table: `logging.enabled`, `metrics.enabled`, `recent_events`), \
         `enabled`, `delay`, \
         `attempts`, `delay_step`, `backoff` (a table: `type`, `multiplier`, `delay_max`), \
         `jitter` (a table: `type`, `ratio`), `retry_call_not_permitted`, `timeout`, \
         `max_hinted_delay`, `retry_budget` (a table: `enabled`, `ratio`, `tokens_max`, \
         `tokens_initial`, `min_tokens_per_second`, `backend`, `on_backend_failure`, \
         `local_tokens_max`), `cause` (a table: `transient.delay`, `transient.cost`, \
         `throttled.delay`, `throttled.cost`, `timeout.delay`, `timeout.cost`), \
         `throttle` (a table: `k`, `window`, `first_calls`), `attempt_header`, `share_outer_budget` (found 1)"
    );
    // The same list with the tables written, and keys of theirs written one
    // level too high (reported as such, never listed as settings there).
    let err = pet_err(&pet(&format!(
        "{MINIMAL}\nzzz = 1\nmultiplier = 2\ntokens_max = 5\nbackoff = {{ multiplier = 3 }}\nretry_budget = {{ ratio = 0.5 }}"
    )));
    assert_eq!(with_key(&err, "zzz").rule, problem.rule, "{err}");
    assert!(with_key(&err, "multiplier")
        .rule
        .starts_with("belongs under `backoff`"));
}

/// Another library's name for `attempts` counts every call: the message
/// says so, with the value written turned into this project's.
#[test]
fn max_attempts_is_said_to_count_every_call_with_the_value_converted() {
    for (written, value, converted) in [
        ("max_attempts", "3", "`max_attempts = 3` is `attempts = 2`"),
        ("maxAttempts", "5", "`max_attempts = 5` is `attempts = 4`"),
        (
            "maxattempts",
            "\"1\"",
            "`max_attempts = 1` is `attempts = 0`",
        ),
    ] {
        let err = pet_err(&pet(&format!("delay = \"1s\"\n{written} = {value}")));
        let problem = only(&err);
        check(
            problem,
            PET,
            PET_PATH,
            written,
            &format!(
                "is not a known setting; did you mean `attempts`? (`attempts` is required) \
                 `attempts` counts the retries after the first call, where `max_attempts` \
                 (Resilience4j, Spring Retry) counts every call, the first included: {converted}"
            ),
            Some(value),
        );
    }
    // Names that mean what this project's do say that.
    check_pet(
        &format!("{MINIMAL}\nmax_retries = 2"),
        "max_retries",
        "is not a known setting; did you mean `attempts`? the same count, the retries after the first call, under this project's name",
        Some("2"),
    );
    // The plain name many reach for first (without `attempts`: one problem).
    let err = pet_err(&pet("delay = \"1s\"\nretries = 2"));
    check(
        only(&err),
        PET,
        PET_PATH,
        "retries",
        "is not a known setting; did you mean `attempts`? (`attempts` is required) the same count, the retries after the first call, under this project's name",
        Some("2"),
    );
    check_pet(
        &format!("{MINIMAL}\nwaitDuration = \"1s\""),
        "waitDuration",
        "did you mean `delay`? `delay` is the wait before the first retry; without `delay_step` or `backoff` every wait is `delay`, as with Resilience4j's `wait_duration`",
        Some("\"1s\""),
    );
    check_pet(
        &format!("{MINIMAL}\nmax_delay = \"1s\""),
        "max_delay",
        "did you mean `backoff.delay_max`? the cap on each wait is `delay_max` in the `backoff` table",
        Some("\"1s\""),
    );
}

#[test]
fn unknown_key_in_backoff_is_reported_with_its_dotted_key() {
    let err = pet_err(&pet(&format!(
        "{MINIMAL}\nbackoff = {{ type = \"exponential\", xyz = 1 }}"
    )));
    let problem = only(&err);
    check(
        problem,
        PET,
        PET_PATH,
        "backoff.xyz",
        "is not a known setting; known settings here: ",
        Some("1"),
    );
    for key in ["type", "multiplier", "delay_max"] {
        assert!(
            problem.rule.contains(&format!("`{key}`")),
            "`{key}` is not listed: {problem}"
        );
    }
    // Only the backoff's keys are listed, not those of the section.
    assert!(!problem.rule.contains("`attempts`"), "{problem}");

    // A near match inside a nested table is suggested too.
    check_pet(
        &format!("{MINIMAL}\nbackoff = {{ multipler = 3 }}"),
        "backoff.multipler",
        "did you mean `multiplier`?",
        Some("3"),
    );
}

#[test]
fn backoff_keys_at_the_top_level_are_said_to_belong_under_backoff() {
    // Not "did you mean `delay`?": the key is right, its place is not.
    for (key, value) in [("delay_max", "\"5s\""), ("multiplier", "3")] {
        let err = pet_err(&pet(&format!("{MINIMAL}\n{key} = {value}")));
        let problem = only(&err);
        check(
            problem,
            PET,
            PET_PATH,
            key,
            &format!("belongs under `backoff`: move it to `backoff.{key}` (a `[resilient.retry.pet.backoff]` table in TOML)"),
            Some(value),
        );
        assert!(!problem.rule.contains("did you mean"), "{problem}");
    }
}

#[test]
fn retry_budget_keys_at_the_top_level_are_said_to_belong_under_retry_budget() {
    for key in ["tokens_max", "tokens_initial", "min_tokens_per_second"] {
        check_pet(
            &format!("{MINIMAL}\n{key} = 5"),
            key,
            &format!("belongs under `retry_budget`: move it to `retry_budget.{key}`"),
            Some("5"),
        );
    }
}

// ---------------------------------------------------------------------------
// backoff
// ---------------------------------------------------------------------------

#[test]
fn delay_step_cannot_be_combined_with_backoff() {
    for backoff in ["backoff = {}", "backoff = { multiplier = 3 }"] {
        check_pet(
            &format!("{MINIMAL}\ndelay_step = \"10ms\"\n{backoff}"),
            "delay_step",
            "cannot be combined with `backoff`, whose waits grow by `backoff.multiplier`; remove `delay_step`",
            None,
        );
    }
}

#[test]
fn backoff_type_must_be_exponential() {
    check_pet(
        &format!("{MINIMAL}\nbackoff = {{ type = \"linear\" }}"),
        "backoff.type",
        "must be \"exponential\"",
        Some("\"linear\""),
    );
}

#[test]
fn backoff_must_be_a_table() {
    check_pet(
        &format!("{MINIMAL}\nbackoff = \"exponential\""),
        "backoff",
        "must be a table",
        Some("\"exponential\""),
    );
}

#[test]
fn backoff_multiplier_must_be_positive() {
    for (value, found) in [
        ("0", "0"),
        ("-1.5", "-1.5"),
        ("0.0", "0"),
        ("\"x\"", "\"x\""),
    ] {
        check_pet(
            &format!("{MINIMAL}\nbackoff = {{ multiplier = {value} }}"),
            "backoff.multiplier",
            "must be a number > 0",
            Some(found),
        );
    }
}

#[test]
fn backoff_delay_max_must_be_a_duration() {
    check_pet(
        &format!("{MINIMAL}\nbackoff = {{ delay_max = \"soon\" }}"),
        "backoff.delay_max",
        DURATION,
        Some("\"soon\""),
    );
}

#[test]
fn backoff_delay_max_must_not_be_below_delay() {
    // The rule holds; the value found is checked by
    // `backoff_delay_max_below_delay_names_the_value_found`.
    let err = pet_err(&pet(
        "delay = \"1s\"\nattempts = 2\nbackoff = { delay_max = \"500ms\" }",
    ));
    let problem = only(&err);
    assert_eq!(problem.spec, PET);
    assert_eq!(problem.path, PET_PATH);
    assert_eq!(problem.key, "backoff.delay_max");
    assert!(
        problem.rule.contains("must be ≥ `delay` (\"1s\")"),
        "{problem}"
    );
    let message = problem.to_string();
    assert!(
        message.starts_with(
            "PetRetry at `resilient.retry.pet`: key `backoff.delay_max` must be ≥ `delay` (\"1s\")"
        ),
        "{message}"
    );

    // Equal to delay is fine.
    let config = config(&pet(
        "delay = \"1s\"\nattempts = 2\nbackoff = { delay_max = \"1s\" }",
    ));
    assert!(resilient_config::build(Registry::builder().spec::<PetRetry>(), &config).is_ok());
}

#[test]
fn backoff_delay_max_below_delay_names_the_value_found() {
    check_pet(
        "delay = \"1s\"\nattempts = 2\nbackoff = { delay_max = \"500ms\" }",
        "backoff.delay_max",
        "must be ≥ `delay` (\"1s\")",
        Some("\"500ms\""),
    );
}

// ---------------------------------------------------------------------------
// jitter
// ---------------------------------------------------------------------------

#[test]
fn jitter_type_must_be_none_or_full() {
    check_pet(
        &format!("{MINIMAL}\njitter = {{ type = \"half\" }}"),
        "jitter.type",
        "must be \"none\" or \"full\"",
        Some("\"half\""),
    );
}

#[test]
fn jitter_full_at_ratio_0_has_no_effect() {
    check_pet(
        &format!("{MINIMAL}\njitter = {{ type = \"full\", ratio = 0.0 }}"),
        "jitter.ratio",
        "has no effect at 0",
        Some("0"),
    );
}

#[test]
fn backoff_with_no_delay_has_no_effect() {
    check_pet(
        "delay = \"0ms\"\nattempts = 2\nbackoff = { multiplier = 2.0 }",
        "backoff",
        "has no effect with `delay` = 0",
        None,
    );
}

#[tokio::test]
async fn backoff_with_no_delay_acts_on_a_cause_with_its_own() -> Result<(), Box<dyn Error>> {
    let settings = pet_settings(&config(&pet(
        "delay = \"0ms\"\nattempts = 2\nbackoff = { multiplier = 2.0 }\ncause = { throttled = { delay = \"1s\" } }",
    )))
    .await?;
    assert_eq!(
        settings.cause_base_delay(resilient_core::Cause::Throttled, 2),
        std::time::Duration::from_secs(2)
    );
    Ok(())
}

#[test]
fn jitter_ratio_needs_type_full() {
    check_pet(
        &format!("{MINIMAL}\njitter = {{ ratio = 0.5 }}"),
        "jitter.ratio",
        "has no effect without `type = \"full\"`",
        None,
    );
    // Turned off on purpose, the ratio may stay.
    let config = config(&pet(&format!(
        "{MINIMAL}\njitter = {{ type = \"none\", ratio = 0.5 }}"
    )));
    assert!(resilient_config::build(Registry::builder().spec::<PetRetry>(), &config).is_ok());
}

#[test]
fn jitter_ratio_must_be_between_0_and_1() {
    for (value, found) in [("1.5", "1.5"), ("-0.1", "-0.1"), ("2", "2")] {
        check_pet(
            &format!("{MINIMAL}\njitter = {{ type = \"full\", ratio = {value} }}"),
            "jitter.ratio",
            "must be a number in 0..=1",
            Some(found),
        );
    }
}

// ---------------------------------------------------------------------------
// timeout, enabled
// ---------------------------------------------------------------------------

#[test]
fn timeout_must_be_positive() {
    // The rule holds; the value found is checked by
    // `timeout_of_zero_names_the_value_found`.
    for value in ["\"0s\"", "\"0ms\"", "0"] {
        let err = pet_err(&pet(&format!("{MINIMAL}\ntimeout = {value}")));
        let problem = only(&err);
        assert_eq!(problem.spec, PET);
        assert_eq!(problem.path, PET_PATH);
        assert_eq!(problem.key, "timeout");
        assert!(problem.rule.contains("must be > 0"), "{problem}");
        assert!(
            problem
                .to_string()
                .starts_with("PetRetry at `resilient.retry.pet`: key `timeout` must be > 0"),
            "{problem}"
        );
    }
    check_pet(
        &format!("{MINIMAL}\ntimeout = \"never\""),
        "timeout",
        DURATION,
        Some("\"never\""),
    );
}

#[test]
fn timeout_of_zero_names_the_value_found() {
    check_pet(
        &format!("{MINIMAL}\ntimeout = \"0s\""),
        "timeout",
        "must be > 0",
        Some("\"0s\""),
    );
}

#[test]
fn enabled_must_be_a_bool() {
    for (value, found) in [("\"yes\"", "\"yes\""), ("1", "1")] {
        check_pet(
            &format!("{MINIMAL}\nenabled = {value}"),
            "enabled",
            "must be `true` or `false`",
            Some(found),
        );
    }
}

// ---------------------------------------------------------------------------
// retry_budget
// ---------------------------------------------------------------------------

#[test]
fn retry_budget_ratio_must_not_be_negative() {
    check_pet(
        &format!("{MINIMAL}\nretry_budget = {{ ratio = -0.5 }}"),
        "retry_budget.ratio",
        "must be a number ≥ 0",
        Some("-0.5"),
    );
}

#[test]
fn retry_budget_refills_below_a_millionth_round_to_none() {
    for key in ["ratio", "min_tokens_per_second"] {
        check_pet(
            &format!("{MINIMAL}\nretry_budget = {{ {key} = 0.0000001 }}"),
            &format!("retry_budget.{key}"),
            "rounds to 0: the budget counts in millionths of a token",
            Some("0.0000001"),
        );
    }
}

#[test]
fn retry_budget_tokens_max_must_be_at_least_1() {
    check_pet(
        &format!("{MINIMAL}\nretry_budget = {{ tokens_max = 0, tokens_initial = 0 }}"),
        "retry_budget.tokens_max",
        "must be a whole number in 1..=4294967295",
        Some("0"),
    );
}

#[test]
fn retry_budget_tokens_initial_must_not_exceed_tokens_max() {
    check_pet(
        &format!("{MINIMAL}\nretry_budget = {{ tokens_max = 5, tokens_initial = 6 }}"),
        "retry_budget.tokens_initial",
        "must be ≤ `tokens_max` (5)",
        Some("6"),
    );
}

#[test]
fn retry_budget_min_tokens_per_second_must_not_be_negative() {
    check_pet(
        &format!("{MINIMAL}\nretry_budget = {{ min_tokens_per_second = -1 }}"),
        "retry_budget.min_tokens_per_second",
        "must be a number ≥ 0",
        Some("-1"),
    );
}

#[test]
fn retry_budget_is_validated_even_when_disabled() {
    check_pet(
        &format!("{MINIMAL}\nretry_budget = {{ enabled = false, ratio = -1 }}"),
        "retry_budget.ratio",
        "must be a number ≥ 0",
        Some("-1"),
    );
}

// ---------------------------------------------------------------------------
// throttle
// ---------------------------------------------------------------------------

#[test]
fn throttle_k_must_be_a_finite_number_above_1() {
    for (value, found) in [
        ("1", "1"),
        ("1.0", "1"),
        ("0.5", "0.5"),
        ("-2", "-2"),
        ("\"nan\"", "\"nan\""),
        ("\"inf\"", "\"inf\""),
        ("\"two\"", "\"two\""),
    ] {
        check_pet(
            &format!("{MINIMAL}\nthrottle = {{ k = {value} }}"),
            "throttle.k",
            "must be a number > 1 (the SRE book suggests 2: attempts reach the dependency at up to twice the rate it accepts them)",
            Some(found),
        );
    }
}

#[test]
fn throttle_window_must_be_a_duration_above_zero() {
    check_pet(
        &format!("{MINIMAL}\nthrottle = {{ window = \"0s\" }}"),
        "throttle.window",
        "must be > 0 (the trailing window the counts are kept over; the SRE book uses \"2m\")",
        Some("\"0s\""),
    );
    check_pet(
        &format!("{MINIMAL}\nthrottle = {{ window = 120 }}"),
        "throttle.window",
        "must be a duration with a unit, such as \"100ms\", \"2s\" or \"1m\"",
        Some("120"),
    );
}

#[tokio::test]
async fn throttle_first_calls_is_read_quoted_or_not() -> TestResult {
    // Quoted, as an environment variable gives every value: the same.
    for (value, expected) in [
        ("true", true),
        ("false", false),
        ("\"true\"", true),
        ("\"FALSE\"", false),
    ] {
        let toml = format!("{MINIMAL}\nthrottle = {{ first_calls = {value} }}");
        let settings = pet_settings(&config(&pet(&toml))).await?;
        assert_eq!(
            settings.throttle.map(|t| t.first_calls),
            Some(expected),
            "{value}"
        );
    }
    Ok(())
}

#[test]
fn throttle_first_calls_other_than_a_boolean_is_a_problem() {
    for value in ["1", "\"yes\"", "\"on\""] {
        check_pet(
            &format!("{MINIMAL}\nthrottle = {{ first_calls = {value} }}"),
            "throttle.first_calls",
            "must be `true` or `false`",
            Some(value),
        );
    }
}

#[test]
fn throttle_first_calls_misspelt_or_written_beside_attempts_is_a_problem() {
    let err = pet_err(&pet(&format!(
        "{MINIMAL}\nthrottle = {{ first_call = true }}"
    )));
    let rule = &with_key(&err, "throttle.first_call").rule;
    assert!(rule.contains("did you mean `first_calls`"), "{err}");
    check_pet(
        &format!("{MINIMAL}\nfirst_calls = true"),
        "first_calls",
        "belongs under `throttle`: move it to `throttle.first_calls`",
        Some("true"),
    );
}

#[test]
fn throttle_keys_misspelt_or_written_one_level_too_high_are_problems() {
    let err = pet_err(&pet(&format!("{MINIMAL}\nthrottle = {{ windw = \"1m\" }}")));
    let rule = &with_key(&err, "throttle.windw").rule;
    assert!(rule.contains("did you mean `window`"), "{err}");
    for key in ["k", "window"] {
        let value = if key == "k" { "3" } else { "\"1m\"" };
        check_pet(
            &format!("{MINIMAL}\n{key} = {value}"),
            key,
            &format!("belongs under `throttle`: move it to `throttle.{key}`"),
            Some(value),
        );
    }
}

#[tokio::test]
async fn throttle_defaults_to_the_sre_book() -> TestResult {
    let settings = pet_settings(&config(&pet(&format!("{MINIMAL}\nthrottle = {{}}")))).await?;
    assert_eq!(
        settings.throttle,
        Some(ThrottleSettings {
            k: 2.0,
            window: Duration::from_secs(120),
            first_calls: false,
        })
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// Several problems
// ---------------------------------------------------------------------------

#[test]
fn every_problem_of_every_spec_is_reported_at_once() {
    let toml = r#"
        [resilient.retry.pet]
        delay = "100ms"

        [resilient.retry.order]
        delay = "fast"
        attempts = -1
        jitter = { type = "half" }
        atempts = 1
    "#;
    let err = build_err(
        Registry::builder()
            .spec::<PetRetry>()
            .spec::<OrderRetry>()
            .spec::<StockRetry>(),
        toml,
    );
    let problems = err.problems();
    assert_eq!(problems.len(), 6, "{err}");

    // Sorted by path, then key.
    let order = "resilient.retry.order";
    check(
        &problems[0],
        "OrderRetry",
        order,
        "atempts",
        "did you mean `attempts`?",
        Some("1"),
    );
    check(
        &problems[1],
        "OrderRetry",
        order,
        "attempts",
        WHOLE,
        Some("-1"),
    );
    check(
        &problems[2],
        "OrderRetry",
        order,
        "delay",
        DURATION,
        Some("\"fast\""),
    );
    check(
        &problems[3],
        "OrderRetry",
        order,
        "jitter.type",
        "must be \"none\" or \"full\"",
        Some("\"half\""),
    );
    check(&problems[4], PET, PET_PATH, "attempts", "is required", None);
    check(
        &problems[5],
        "StockRetry",
        "resilient.retry.stock",
        "",
        "has no section",
        None,
    );

    let message = err.to_string();
    assert!(
        message.starts_with("invalid resilient configuration (6 problems):"),
        "{message}"
    );
    for problem in problems {
        assert!(message.contains(&format!("\n  - {problem}")), "{message}");
    }
}

#[test]
fn config_error_display_lists_each_problem_and_the_count() {
    let err = pet_err(&pet("attempts = -1"));
    assert_eq!(err.problems().len(), 2, "{err}");
    let attempts = "PetRetry at `resilient.retry.pet`: key `attempts` must be a whole number in 0..=4294967295 (found -1)";
    let delay = "PetRetry at `resilient.retry.pet`: key `delay` is required (a duration such as \"100ms\", \"2s\" or \"1m\")";
    let message = err.to_string();
    assert!(message.contains("(2 problems)"), "{message}");
    assert!(message.contains(attempts), "{message}");
    assert!(message.contains(delay), "{message}");
    assert_eq!(
        message,
        format!("invalid resilient configuration (2 problems):\n  - {attempts}\n  - {delay}")
    );
    assert!(err.source().is_none());

    // One problem: singular.
    let err = pet_err(&pet("delay = \"100ms\""));
    assert!(
        err.to_string()
            .starts_with("invalid resilient configuration (1 problem):\n  - PetRetry at"),
        "{err}"
    );
}

// ---------------------------------------------------------------------------
// Valid sections, read back
// ---------------------------------------------------------------------------

// Paused: the budget refills by `min_tokens_per_second` as time passes.
#[tokio::test(start_paused = true)]
async fn full_section_builds_and_reads_back() -> TestResult {
    let toml = pet(r#"
        enabled = true
        delay = "100ms"
        attempts = 4
        timeout = "10s"
        retry_call_not_permitted = true

        [resilient.retry.pet.backoff]
        type = "exponential"
        multiplier = 1.5
        delay_max = "2s"

        [resilient.retry.pet.jitter]
        type = "full"
        ratio = 0.5

        [resilient.retry.pet.retry_budget]
        enabled = true
        ratio = 0.2
        tokens_max = 50
        tokens_initial = 20
        min_tokens_per_second = 1.5
    "#);
    let registry = resilient_config::build(Registry::builder().spec::<PetRetry>(), &config(&toml))?;
    let (settings, tokens) = registry
        .scope(async {
            PetRetry::get().map(|handle| (handle.settings().clone(), handle.budget_tokens()))
        })
        .await?;

    assert!(settings.enabled);
    assert_eq!(settings.delay, Duration::from_millis(100));
    assert_eq!(settings.attempts, 4);
    assert_eq!(settings.delay_step, Duration::ZERO);
    assert_eq!(
        settings.backoff,
        Some(Backoff {
            multiplier: 1.5,
            delay_max: Some(Duration::from_secs(2)),
        })
    );
    assert_eq!(
        settings.jitter,
        Jitter {
            full: true,
            ratio: 0.5,
        }
    );
    assert_eq!(settings.timeout, Some(Duration::from_secs(10)));
    assert!(settings.retry_call_not_permitted);
    assert_eq!(
        settings.budget,
        Some(BudgetSettings {
            ratio: 0.2,
            tokens_max: 50,
            tokens_initial: 20,
            min_tokens_per_second: 1.5,
            backend: Backend::Local,
            on_backend_failure: OnBudgetBackendFailure::Deny,
        })
    );
    assert_eq!(tokens, Some(20.0));
    Ok(())
}

#[tokio::test]
async fn defaults_of_a_minimal_section() -> TestResult {
    let settings = pet_settings(&config(&pet(MINIMAL))).await?;
    assert_eq!(settings, minimal());
    Ok(())
}

#[tokio::test]
async fn defaults_of_an_empty_retry_budget() -> TestResult {
    let settings = pet_settings(&config(&pet(&format!("{MINIMAL}\nretry_budget = {{}}")))).await?;
    assert_eq!(
        settings.budget,
        Some(BudgetSettings {
            ratio: 0.1,
            tokens_max: 100,
            tokens_initial: 10,
            min_tokens_per_second: 0.0,
            backend: Backend::Local,
            on_backend_failure: OnBudgetBackendFailure::Deny,
        })
    );
    Ok(())
}

#[tokio::test]
async fn default_tokens_initial_is_capped_at_a_smaller_tokens_max() -> TestResult {
    let settings = pet_settings(&config(&pet(&format!(
        "{MINIMAL}\nretry_budget = {{ tokens_max = 4 }}"
    ))))
    .await?;
    let budget = settings.budget.ok_or("a budget")?;
    assert_eq!((budget.tokens_max, budget.tokens_initial), (4, 4));
    Ok(())
}

#[tokio::test]
async fn disabled_retry_budget_gives_no_budget() -> TestResult {
    let settings = pet_settings(&config(&pet(&format!(
        "{MINIMAL}\nretry_budget = {{ enabled = false }}"
    ))))
    .await?;
    assert_eq!(settings, minimal());
    Ok(())
}

#[tokio::test]
async fn defaults_of_empty_backoff_and_jitter() -> TestResult {
    let settings = pet_settings(&config(&pet(&format!(
        "{MINIMAL}\nbackoff = {{}}\njitter = {{ type = \"full\" }}"
    ))))
    .await?;
    assert_eq!(
        settings.backoff,
        Some(Backoff {
            multiplier: 2.0,
            delay_max: None,
        })
    );
    assert_eq!(
        settings.jitter,
        Jitter {
            full: true,
            ratio: 1.0,
        }
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// Environment-style overrides
// ---------------------------------------------------------------------------

#[tokio::test]
async fn values_given_as_strings_are_accepted() -> TestResult {
    // `config::Environment` yields every value as a string.
    let config = config::Config::builder()
        .add_source(config::File::from_str(
            &pet("delay = \"100ms\"\nattempts = 1"),
            config::FileFormat::Toml,
        ))
        .set_override("resilient.retry.pet.attempts", "3")?
        .set_override("resilient.retry.pet.enabled", "false")?
        .set_override("resilient.retry.pet.backoff.multiplier", "1.5")?
        .set_override("resilient.retry.pet.jitter.type", "full")?
        .set_override("resilient.retry.pet.jitter.ratio", "0.25")?
        .set_override("resilient.retry.pet.retry_budget.enabled", "TRUE")?
        .set_override("resilient.retry.pet.retry_budget.tokens_max", "40")?
        .set_override("resilient.retry.pet.retry_budget.tokens_initial", " 4 ")?
        .set_override("resilient.retry.pet.retry_budget.ratio", "0.5")?
        .build()?;
    let settings = pet_settings(&config).await?;
    assert!(!settings.enabled);
    assert_eq!(settings.attempts, 3);
    assert_eq!(
        settings.backoff,
        Some(Backoff {
            multiplier: 1.5,
            delay_max: None,
        })
    );
    assert_eq!(
        settings.jitter,
        Jitter {
            full: true,
            ratio: 0.25,
        }
    );
    assert_eq!(
        settings.budget,
        Some(BudgetSettings {
            ratio: 0.5,
            tokens_max: 40,
            tokens_initial: 4,
            min_tokens_per_second: 0.0,
            backend: Backend::Local,
            on_backend_failure: OnBudgetBackendFailure::Deny,
        })
    );

    // A string that is not a number is still reported, quoted.
    let config = config::Config::builder()
        .set_override("resilient.retry.pet.delay", "100ms")?
        .set_override("resilient.retry.pet.attempts", "three")?
        .build()?;
    let Err(err) = resilient_config::build(Registry::builder().spec::<PetRetry>(), &config) else {
        panic!("attempts = \"three\" must be rejected");
    };
    check(
        only(&err),
        PET,
        PET_PATH,
        "attempts",
        WHOLE,
        Some("\"three\""),
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// init: the only test that calls it
// ---------------------------------------------------------------------------
