//! Startup validation of circuit breaker specs through the public API: a
//! `config::Config` read from TOML is turned into a registry with
//! `resilient_config::build`, and every rule of `CircuitBreakerSettings::read`
//! is checked through the `ConfigError` it gives.
//!
//! Every test names the specs it builds with `Registry::builder().spec::<X>()`,
//! so it needs no section for the other specs of this test binary; none calls
//! `init`.

mod support;
use support::*;

use std::error::Error;
use std::time::Duration;

use resilient_config::ConfigError;
use resilient_core::circuit_breaker::{CircuitBreakerSettings, SlowCall, State, WindowSettings};
use resilient_core::{CircuitBreakerSpec, Registry};

/// The spec most tests configure.
#[derive(CircuitBreakerSpec)]
#[spec("resilient.circuitbreaker.pet")]
pub struct PetBreaker;

/// A second spec, for configurations with several specs.
#[derive(CircuitBreakerSpec)]
#[spec("resilient.circuitbreaker.order")]
pub struct OrderBreaker;

/// A third spec, for configurations with several specs.
#[derive(CircuitBreakerSpec)]
#[spec("resilient.circuitbreaker.stock")]
pub struct StockBreaker;

const PET: &str = "PetBreaker";
const PET_PATH: &str = "resilient.circuitbreaker.pet";

/// The error of building [`PetBreaker`] from `toml`.
fn pet_err(toml: &str) -> ConfigError {
    build_err(Registry::builder().spec::<PetBreaker>(), toml)
}

/// `[resilient.circuitbreaker.pet]` followed by `body`.
fn pet(body: &str) -> String {
    format!("[resilient.circuitbreaker.pet]\n{body}\n")
}

/// Builds [`PetBreaker`]'s section `body`; panics with the problems if it
/// does not build.
#[track_caller]
fn assert_builds(body: &str) {
    let toml = pet(body);
    if let Err(err) =
        resilient_config::build(Registry::builder().spec::<PetBreaker>(), &config(&toml))
    {
        panic!("expected this section to build:\n{toml}\n{err}");
    }
}

/// Checks the only problem of [`PetBreaker`]'s section `body`.
#[track_caller]
fn check_pet(body: &str, key: &str, rule: &str, found: Option<&str>) {
    let err = pet_err(&pet(body));
    check(only(&err), PET, PET_PATH, key, rule, found);
}

/// [`PetBreaker`]'s settings and state, read back with `PetBreaker::get()` in
/// a scope.
async fn pet_read_back(body: &str) -> Result<(CircuitBreakerSettings, State), Box<dyn Error>> {
    let registry = resilient_config::build(
        Registry::builder().spec::<PetBreaker>(),
        &config(&pet(body)),
    )?;
    assert!(registry.contains::<PetBreaker>());
    assert_eq!(registry.len(), 1);
    let read = registry
        .scope(async {
            PetBreaker::get().map(|handle| (handle.settings().clone(), handle.state()))
        })
        .await?;
    Ok(read)
}

/// The four required keys and their values in [`REQUIRED`].
const REQUIRED_KEYS: [(&str, &str); 4] = [
    ("failure_rate_threshold", "50"),
    ("minimum_required_calls", "10"),
    ("wait_duration_in_open_state", "\"25s\""),
    ("permitted_calls_in_half_open_state", "3"),
];

/// The four required keys, without a window.
const REQUIRED: &str = "failure_rate_threshold = 50\nminimum_required_calls = 10\nwait_duration_in_open_state = \"25s\"\npermitted_calls_in_half_open_state = 3";

/// The window of the default type, `ring_buffer`.
const COUNT: &str = "count_based = { window_size = 100 }";

/// A valid time-based window.
const TIME: &str = "type = \"time_based\"\ntime_based = { window_duration = \"10s\" }";

/// The required keys with `key` set to `value` (left out for `None`), and
/// [`COUNT`].
fn set(key: &str, value: Option<&str>) -> String {
    let mut lines: Vec<String> = REQUIRED_KEYS
        .iter()
        .filter_map(|&(k, v)| {
            if k == key {
                value.map(|value| format!("{k} = {value}"))
            } else {
                Some(format!("{k} = {v}"))
            }
        })
        .collect();
    lines.push(COUNT.to_owned());
    lines.join("\n")
}

/// A minimal valid section ([`REQUIRED`] and [`COUNT`]) followed by `extra`.
fn minimal_and(extra: &str) -> String {
    format!("{REQUIRED}\n{COUNT}\n{extra}")
}

/// [`REQUIRED`] without a window, followed by `extra`.
fn required_and(extra: &str) -> String {
    format!("{REQUIRED}\n{extra}")
}

/// The settings of [`REQUIRED`] with `window`.
fn minimal(window: WindowSettings) -> CircuitBreakerSettings {
    CircuitBreakerSettings {
        enabled: true,
        window,
        failure_rate_threshold: 50,
        minimum_required_calls: 10,
        wait_duration_in_open_state: Duration::from_secs(25),
        permitted_calls_in_half_open_state: 3,
        slow_call: None,
        max_wait_in_half_open: None,
    }
}

const PERCENT: &str = "must be a whole number in 1..=100";
const AT_LEAST_1: &str = "must be a whole number in 1..=4294967295";
const PERMITTED: &str = "must be a whole number in 1..=65535";
const UP_TO_64: &str = "must be a whole number in 1..=64";
const SAMPLES: &str = "must be a whole number in 1..=1024";
const DURATION_REQUIRED: &str = "is required (a duration such as \"100ms\", \"2s\" or \"1m\")";
const TYPES: &str =
    "must be \"striped_approx\" or \"fixed_window\" or \"ring_buffer\" or \"time_based\"";
const COUNT_TYPES: [&str; 3] = ["striped_approx", "fixed_window", "ring_buffer"];

// ---------------------------------------------------------------------------
// The section itself
// ---------------------------------------------------------------------------

#[test]
fn section_is_required() {
    // Only the missing section is reported: no "count_based is required".
    let err = pet_err(&format!(
        "[resilient.circuitbreaker.other]\n{REQUIRED}\n{COUNT}\n"
    ));
    check(
        only(&err),
        PET,
        PET_PATH,
        "",
        "has no section in the configuration",
        None,
    );

    let err = pet_err("");
    check(only(&err), PET, PET_PATH, "", "has no section", None);
}

#[test]
fn section_must_be_a_table() {
    let err = pet_err("[resilient.circuitbreaker]\npet = \"closed\"\n");
    check(
        only(&err),
        PET,
        PET_PATH,
        "",
        "must be a table of settings",
        Some("\"closed\""),
    );
}

// ---------------------------------------------------------------------------
// failure_rate_threshold
// ---------------------------------------------------------------------------

#[test]
fn failure_rate_threshold_is_required() {
    check_pet(
        &set("failure_rate_threshold", None),
        "failure_rate_threshold",
        &format!("is required ({PERCENT})"),
        None,
    );
}

#[test]
fn failure_rate_threshold_must_be_in_1_to_100() {
    for (value, found) in [
        ("0", "0"),
        ("101", "101"),
        ("50.5", "50.5"),
        ("-1", "-1"),
        ("\"half\"", "\"half\""),
    ] {
        check_pet(
            &set("failure_rate_threshold", Some(value)),
            "failure_rate_threshold",
            PERCENT,
            Some(found),
        );
    }
    // The bounds themselves are accepted.
    assert_builds(&set("failure_rate_threshold", Some("1")));
    assert_builds(&set("failure_rate_threshold", Some("100")));
}

#[test]
fn a_rate_threshold_written_as_a_fraction_is_said_to_be_a_percent() {
    for (value, found, meant) in [("0.5", "0.5", "50"), ("\"0.25\"", "\"0.25\"", "25")] {
        check_pet(
            &set("failure_rate_threshold", Some(value)),
            "failure_rate_threshold",
            &format!("{PERCENT}: it is a percent, not a fraction; write `{meant}`"),
            Some(found),
        );
        check_pet(
            &minimal_and(&format!(
                "slow_call = {{ duration_threshold = \"1s\", rate_threshold = {value} }}"
            )),
            "slow_call.rate_threshold",
            &format!("{PERCENT}: it is a percent, not a fraction; write `{meant}`"),
            Some(found),
        );
    }
}

// ---------------------------------------------------------------------------
// minimum_required_calls
// ---------------------------------------------------------------------------

#[test]
fn minimum_required_calls_is_required() {
    check_pet(
        &set("minimum_required_calls", None),
        "minimum_required_calls",
        &format!("is required ({AT_LEAST_1})"),
        None,
    );
}

#[test]
fn minimum_required_calls_must_be_at_least_1() {
    check_pet(
        &set("minimum_required_calls", Some("0")),
        "minimum_required_calls",
        AT_LEAST_1,
        Some("0"),
    );
    assert_builds(&set("minimum_required_calls", Some("1")));
}

// ---------------------------------------------------------------------------
// wait_duration_in_open_state
// ---------------------------------------------------------------------------

#[test]
fn wait_duration_in_open_state_is_required() {
    check_pet(
        &set("wait_duration_in_open_state", None),
        "wait_duration_in_open_state",
        DURATION_REQUIRED,
        None,
    );
}

#[test]
fn wait_duration_in_open_state_must_be_a_duration() {
    for (value, found) in [
        ("\"soon\"", "\"soon\""),
        // A bare number has no unit.
        ("25", "25"),
        ("\"25\"", "\"25\""),
        ("true", "true"),
    ] {
        check_pet(
            &set("wait_duration_in_open_state", Some(value)),
            "wait_duration_in_open_state",
            DURATION,
            Some(found),
        );
    }
}

#[tokio::test]
async fn wait_duration_in_open_state_of_zero_is_accepted() -> TestResult {
    for value in ["\"0s\"", "\"0ms\"", "0"] {
        let (settings, _) = pet_read_back(&set("wait_duration_in_open_state", Some(value))).await?;
        assert_eq!(
            settings.wait_duration_in_open_state,
            Duration::ZERO,
            "{value}"
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// permitted_calls_in_half_open_state
// ---------------------------------------------------------------------------

#[test]
fn permitted_calls_in_half_open_state_is_required() {
    check_pet(
        &set("permitted_calls_in_half_open_state", None),
        "permitted_calls_in_half_open_state",
        &format!("is required ({PERMITTED})"),
        None,
    );
}

#[test]
fn permitted_calls_in_half_open_state_must_be_in_1_to_65535() {
    for (value, found) in [("0", "0"), ("65536", "65536")] {
        check_pet(
            &set("permitted_calls_in_half_open_state", Some(value)),
            "permitted_calls_in_half_open_state",
            PERMITTED,
            Some(found),
        );
    }
    assert_builds(&set("permitted_calls_in_half_open_state", Some("1")));
    assert_builds(&set("permitted_calls_in_half_open_state", Some("65535")));
}

// ---------------------------------------------------------------------------
// type, and the window table it needs
// ---------------------------------------------------------------------------

#[test]
fn type_must_be_one_of_the_four() {
    for (value, found) in [
        ("\"sliding\"", "\"sliding\""),
        ("\"count_based\"", "\"count_based\""),
        ("5", "5"),
    ] {
        // An unknown type asks for no window table.
        check_pet(
            &required_and(&format!("type = {value}")),
            "type",
            TYPES,
            Some(found),
        );
    }
}

#[test]
fn count_based_is_required_for_each_count_type() {
    for kind in COUNT_TYPES {
        check_pet(
            &required_and(&format!("type = \"{kind}\"")),
            "count_based",
            &format!("is required for `type = \"{kind}\"` (at least `window_size`)"),
            None,
        );
    }
    // The default type is ring_buffer.
    check_pet(
        REQUIRED,
        "count_based",
        "is required for `type = \"ring_buffer\"` (at least `window_size`)",
        None,
    );
}

#[test]
fn time_based_is_required_for_time_based() {
    check_pet(
        &required_and("type = \"time_based\""),
        "time_based",
        "is required for `type = \"time_based\"` (at least `window_duration`)",
        None,
    );
}

#[test]
fn count_based_is_not_used_by_time_based() {
    check_pet(
        &required_and(&format!("{TIME}\n{COUNT}")),
        "count_based",
        "is not used by `type = \"time_based\"`; remove it, or choose the type it belongs to",
        None,
    );
}

#[test]
fn time_based_is_not_used_by_count_types() {
    for kind in COUNT_TYPES {
        check_pet(
            &required_and(&format!(
                "type = \"{kind}\"\n{COUNT}\ntime_based = {{ window_duration = \"10s\" }}"
            )),
            "time_based",
            &format!(
                "is not used by `type = \"{kind}\"`; remove it, or choose the type it belongs to"
            ),
            None,
        );
    }
}

// A present `count_based` that is not a table is one problem, not also
// "is required".
#[test]
fn count_based_must_be_a_table() {
    check_pet(
        &required_and("count_based = 100"),
        "count_based",
        "must be a table",
        Some("100"),
    );
}

// Same as `count_based_must_be_a_table`, for `time_based`.
#[test]
fn time_based_must_be_a_table() {
    check_pet(
        &required_and("type = \"time_based\"\ntime_based = \"10s\""),
        "time_based",
        "must be a table",
        Some("\"10s\""),
    );
}

// ---------------------------------------------------------------------------
// count_based
// ---------------------------------------------------------------------------

#[test]
fn count_based_window_size_is_required() {
    check_pet(
        &required_and("count_based = {}"),
        "count_based.window_size",
        &format!("is required ({AT_LEAST_1})"),
        None,
    );
}

#[test]
fn count_based_window_size_must_be_at_least_1() {
    for kind in COUNT_TYPES {
        check_pet(
            &required_and(&format!(
                "type = \"{kind}\"\ncount_based = {{ window_size = 0 }}"
            )),
            "count_based.window_size",
            AT_LEAST_1,
            Some("0"),
        );
    }
}

#[test]
fn fixed_window_size_is_at_most_2097151() {
    check_pet(
        &required_and("type = \"fixed_window\"\ncount_based = { window_size = 2097152 }"),
        "count_based.window_size",
        "can't be greater than 2097151 for `type = \"fixed_window\"`",
        Some("2097152"),
    );
    assert_builds(&required_and(
        "type = \"fixed_window\"\ncount_based = { window_size = 2097151 }",
    ));
}

#[test]
fn ring_buffer_size_is_at_most_4194304() {
    check_pet(
        &required_and("type = \"ring_buffer\"\ncount_based = { window_size = 4194305 }"),
        "count_based.window_size",
        "can't be greater than 4194304 for `type = \"ring_buffer\"`",
        Some("4194305"),
    );
    assert_builds(&required_and(
        "type = \"ring_buffer\"\ncount_based = { window_size = 4194304 }",
    ));
}

#[test]
fn striped_approx_size_is_at_most_stripes_times_65535() {
    // One stripe: 65535.
    check_pet(
        &required_and("type = \"striped_approx\"\ncount_based = { window_size = 65536, striped_approx = { stripes = 1 } }"),
        "count_based.window_size",
        "can't be greater than 65535 for `type = \"striped_approx\"`",
        Some("65536"),
    );
    assert_builds(&required_and(
        "type = \"striped_approx\"\ncount_based = { window_size = 65535, striped_approx = { stripes = 1 } }",
    ));

    // The default 16 stripes: 1048560.
    let kind = "type = \"striped_approx\"\n";
    check_pet(
        &required_and(&format!("{kind}count_based = {{ window_size = 1048561 }}")),
        "count_based.window_size",
        "can't be greater than 1048560 for `type = \"striped_approx\"`",
        Some("1048561"),
    );
    assert_builds(&required_and(&format!(
        "{kind}count_based = {{ window_size = 1048560 }}"
    )));
}

#[test]
fn striped_approx_stripes_must_be_in_1_to_64() {
    for (value, found) in [("0", "0"), ("65", "65")] {
        check_pet(
            &required_and(&format!(
                "type = \"striped_approx\"\ncount_based = {{ window_size = 100, striped_approx = {{ stripes = {value} }} }}"
            )),
            "count_based.striped_approx.stripes",
            UP_TO_64,
            Some(found),
        );
    }
    assert_builds(&required_and(
        "type = \"striped_approx\"\ncount_based = { window_size = 100, striped_approx = { stripes = 64 } }",
    ));
}

#[test]
fn minimum_required_calls_must_not_exceed_the_window_size() {
    for kind in COUNT_TYPES {
        check_pet(
            &format!(
                "{}\ntype = \"{kind}\"",
                set("minimum_required_calls", Some("101"))
            ),
            "minimum_required_calls",
            "can't be greater than `count_based.window_size` (100): the window could never hold enough calls to open the breaker",
            Some("101"),
        );
        // Equal is fine.
        assert_builds(&format!(
            "{}\ntype = \"{kind}\"",
            set("minimum_required_calls", Some("100"))
        ));
    }
    // A time-based window has no such limit.
    assert_builds(&format!(
        "failure_rate_threshold = 50\nminimum_required_calls = 1000000\nwait_duration_in_open_state = \"25s\"\npermitted_calls_in_half_open_state = 3\n{TIME}"
    ));
}

// ---------------------------------------------------------------------------
// time_based
// ---------------------------------------------------------------------------

#[test]
fn time_based_window_duration_is_required() {
    check_pet(
        &required_and("type = \"time_based\"\ntime_based = { sample_count = 4 }"),
        "time_based.window_duration",
        DURATION_REQUIRED,
        None,
    );
}

#[test]
fn time_based_window_duration_must_be_positive() {
    check_pet(
        &required_and("type = \"time_based\"\ntime_based = { window_duration = \"0s\" }"),
        "time_based.window_duration",
        "must be > 0",
        Some("\"0s\""),
    );
    check_pet(
        &required_and("type = \"time_based\"\ntime_based = { window_duration = \"a while\" }"),
        "time_based.window_duration",
        DURATION,
        Some("\"a while\""),
    );
}

#[test]
fn time_based_window_duration_must_not_be_too_short_for_sample_count() {
    check_pet(
        &required_and(
            "type = \"time_based\"\ntime_based = { window_duration = \"10ns\", sample_count = 16 }",
        ),
        "time_based.window_duration",
        "is too short for `sample_count` = 16: each bucket must last at least 1ns",
        Some("\"10ns\""),
    );
    // The default sample_count is 16 too.
    check_pet(
        &required_and("type = \"time_based\"\ntime_based = { window_duration = \"15ns\" }"),
        "time_based.window_duration",
        "is too short for `sample_count` = 16",
        Some("\"15ns\""),
    );
    check_pet(
        &required_and(
            "type = \"time_based\"\ntime_based = { window_duration = \"3ns\", sample_count = 4 }",
        ),
        "time_based.window_duration",
        "is too short for `sample_count` = 4",
        Some("\"3ns\""),
    );
    // 1ns per bucket is enough.
    assert_builds(&required_and(
        "type = \"time_based\"\ntime_based = { window_duration = \"16ns\" }",
    ));
}

#[test]
fn time_based_sample_count_must_be_in_1_to_1024() {
    for (value, found) in [("0", "0"), ("1025", "1025")] {
        check_pet(
            &required_and(&format!(
                "type = \"time_based\"\ntime_based = {{ window_duration = \"10s\", sample_count = {value} }}"
            )),
            "time_based.sample_count",
            SAMPLES,
            Some(found),
        );
    }
    assert_builds(&required_and(
        "type = \"time_based\"\ntime_based = { window_duration = \"10s\", sample_count = 1024 }",
    ));
    assert_builds(&required_and(
        "type = \"time_based\"\ntime_based = { window_duration = \"1ns\", sample_count = 1 }",
    ));
}

#[test]
fn time_based_counter_stripes_must_be_in_1_to_64() {
    for (value, found) in [("0", "0"), ("65", "65")] {
        check_pet(
            &required_and(&format!(
                "type = \"time_based\"\ntime_based = {{ window_duration = \"10s\", counter_stripes = {value} }}"
            )),
            "time_based.counter_stripes",
            UP_TO_64,
            Some(found),
        );
    }
    assert_builds(&required_and(
        "type = \"time_based\"\ntime_based = { window_duration = \"10s\", counter_stripes = 64 }",
    ));
}

// ---------------------------------------------------------------------------
// slow_call
// ---------------------------------------------------------------------------

#[test]
fn slow_call_duration_threshold_is_required() {
    check_pet(
        &minimal_and("slow_call = { rate_threshold = 50 }"),
        "slow_call.duration_threshold",
        DURATION_REQUIRED,
        None,
    );
}

#[test]
fn slow_call_duration_threshold_must_be_positive() {
    check_pet(
        &minimal_and("slow_call = { duration_threshold = \"0s\", rate_threshold = 50 }"),
        "slow_call.duration_threshold",
        "must be > 0",
        Some("\"0s\""),
    );
    check_pet(
        &minimal_and("slow_call = { duration_threshold = \"slow\", rate_threshold = 50 }"),
        "slow_call.duration_threshold",
        DURATION,
        Some("\"slow\""),
    );
}

#[test]
fn slow_call_rate_threshold_is_required() {
    check_pet(
        &minimal_and("slow_call = { duration_threshold = \"2s\" }"),
        "slow_call.rate_threshold",
        &format!("is required ({PERCENT})"),
        None,
    );
}

#[test]
fn slow_call_rate_threshold_must_be_in_1_to_100() {
    for (value, found) in [("0", "0"), ("101", "101"), ("12.5", "12.5")] {
        check_pet(
            &minimal_and(&format!(
                "slow_call = {{ duration_threshold = \"2s\", rate_threshold = {value} }}"
            )),
            "slow_call.rate_threshold",
            PERCENT,
            Some(found),
        );
    }
    assert_builds(&minimal_and(
        "slow_call = { duration_threshold = \"2s\", rate_threshold = 100 }",
    ));
}

#[test]
fn slow_call_must_be_a_table() {
    check_pet(
        &minimal_and("slow_call = \"2s\""),
        "slow_call",
        "must be a table",
        Some("\"2s\""),
    );
}

// ---------------------------------------------------------------------------
// max_wait_in_half_open, enabled
// ---------------------------------------------------------------------------

#[test]
fn max_wait_in_half_open_must_be_positive() {
    check_pet(
        &minimal_and("max_wait_in_half_open = \"0s\""),
        "max_wait_in_half_open",
        "must be > 0 (leave it out to wait for the probes however long they take)",
        Some("\"0s\""),
    );
    check_pet(
        &minimal_and("max_wait_in_half_open = \"forever\""),
        "max_wait_in_half_open",
        DURATION,
        Some("\"forever\""),
    );
}

/// A breaker measures its waits on a 47-bit microsecond clock: a longer wait
/// would never end, so it is refused at startup.
#[test]
fn waits_are_at_most_four_years() {
    check_pet(
        &set("wait_duration_in_open_state", Some("\"1462d\"")),
        "wait_duration_in_open_state",
        "must be at most 1461d (4 years)",
        Some("\"1462d\""), // as written, not reformatted
    );
    check_pet(
        &minimal_and("max_wait_in_half_open = \"1462d\""),
        "max_wait_in_half_open",
        "must be at most 1461d (4 years)",
        Some("\"1462d\""), // as written, not reformatted
    );
    assert_builds(&set("wait_duration_in_open_state", Some("\"1461d\"")));
    assert_builds(&minimal_and("max_wait_in_half_open = \"1461d\""));
}

#[test]
fn enabled_must_be_a_bool() {
    for (value, found) in [("\"yes\"", "\"yes\""), ("1", "1")] {
        check_pet(
            &minimal_and(&format!("enabled = {value}")),
            "enabled",
            "must be `true` or `false`",
            Some(found),
        );
    }
}

#[test]
fn a_disabled_section_is_still_validated() {
    check_pet(
        &format!(
            "enabled = false\n{}",
            set("failure_rate_threshold", Some("0"))
        ),
        "failure_rate_threshold",
        PERCENT,
        Some("0"),
    );
}

// ---------------------------------------------------------------------------
// Unknown keys
// ---------------------------------------------------------------------------

#[test]
fn unknown_key_suggests_the_nearest_known_key() {
    // A typo of a required key is one problem, not two.
    let body = format!(
        "failureRateThreshold = 50\n{}",
        set("failure_rate_threshold", None)
    );
    check_pet(
        &body,
        "failureRateThreshold",
        "is not a known setting; did you mean `failure_rate_threshold`? (`failure_rate_threshold` is required)",
        Some("50"),
    );

    // An optional key: only the suggestion.
    check_pet(
        &minimal_and("maxWaitInHalfOpen = \"5s\""),
        "maxWaitInHalfOpen",
        "is not a known setting; did you mean `max_wait_in_half_open`?",
        Some("\"5s\""),
    );
    let err = pet_err(&pet(&minimal_and("maxWaitInHalfOpen = \"5s\"")));
    assert!(!only(&err).rule.contains("is required"), "{err}");
}

#[test]
fn unknown_key_in_count_based_is_reported_with_its_dotted_key() {
    check_pet(
        &required_and("count_based = { windowsize = 100 }"),
        "count_based.windowsize",
        "is not a known setting; did you mean `window_size`? (`window_size` is required)",
        Some("100"),
    );
    check_pet(
        &required_and("type = \"striped_approx\"\ncount_based = { window_size = 100, striped_approx = { stripe = 4 } }"),
        "count_based.striped_approx.stripe",
        "is not a known setting; did you mean `stripes`?",
        Some("4"),
    );
}

#[test]
fn unknown_key_in_time_based_and_slow_call_is_reported_with_its_dotted_key() {
    check_pet(
        &required_and("type = \"time_based\"\ntime_based = { windowDuration = \"10s\" }"),
        "time_based.windowDuration",
        "is not a known setting; did you mean `window_duration`? (`window_duration` is required)",
        Some("\"10s\""),
    );
    check_pet(
        &minimal_and("slow_call = { duration_threshold = \"2s\", ratethreshold = 50 }"),
        "slow_call.ratethreshold",
        "is not a known setting; did you mean `rate_threshold`? (`rate_threshold` is required)",
        Some("50"),
    );
}

#[test]
fn misspelt_window_table_is_one_problem() {
    // The window table the type needs is "required": its misspelling is one
    // problem, with the suggestion.
    check_pet(
        &required_and("countbased = { window_size = 100 }"),
        "countbased",
        "is not a known setting; did you mean `count_based`? (`count_based` is required)",
        Some("a table"),
    );
    check_pet(
        &required_and("type = \"time_based\"\ntimeBased = { window_duration = \"10s\" }"),
        "timeBased",
        "is not a known setting; did you mean `time_based`? (`time_based` is required)",
        Some("a table"),
    );
}

#[test]
fn unknown_key_without_a_near_match_lists_the_known_keys() {
    let err = pet_err(&pet(&minimal_and("zzz = 1")));
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
    for key in [
        "enabled",
        "type",
        "failure_rate_threshold",
        "minimum_required_calls",
        "wait_duration_in_open_state",
        "permitted_calls_in_half_open_state",
        "count_based",
        "slow_call",
        "max_wait_in_half_open",
    ] {
        assert!(
            problem.rule.contains(&format!("`{key}`")),
            "`{key}` is not listed: {problem}"
        );
    }
}

/// A window table of another `type` is rejected here, so it is not offered
/// as a known setting; the tables listed show their keys.
#[test]
fn the_known_settings_listed_are_those_of_the_type_with_each_tables_keys() {
    let err = pet_err(&pet(&minimal_and("zzz = 1")));
    assert_eq!(
        only(&err).rule,
        "is not a known setting; known settings here: \
         `telemetry` (a table: `logging.enabled`, `metrics.enabled`, `recent_events`), \
         `readiness`, `enabled`, `type`, \
         `failure_rate_threshold`, `minimum_required_calls`, `wait_duration_in_open_state`, \
         `permitted_calls_in_half_open_state`, `count_based` (a table: `window_size`), \
         `slow_call` (a table: `duration_threshold`, `rate_threshold`), `max_wait_in_half_open`, \
         `keys` (a table: `max`, `idle_timeout`, `label_metrics`, `max_open_percent`)"
    );
    let err = pet_err(&pet(&format!("{REQUIRED}\n{TIME}\nzzz = 1")));
    let rule = &only(&err).rule;
    assert!(
        rule.contains(
            "`time_based` (a table: `window_duration`, `sample_count`, `counter_stripes`)"
        ),
        "{rule}"
    );
    assert!(!rule.contains("`count_based`"), "{rule}");
}

/// Resilience4j's and Polly's names are answered with this project's, and
/// how they differ.
#[test]
fn other_libraries_names_are_answered_with_the_difference() {
    check_pet(
        &minimal_and("failure_ratio = 0.25"),
        "failure_ratio",
        "is not a known setting; did you mean `failure_rate_threshold`? `failure_rate_threshold` is a whole percent, where `failure_ratio` (Polly) is a fraction: `failure_ratio = 0.25` is `failure_rate_threshold = 25`",
        Some("0.25"),
    );
    check_pet(
        &minimal_and("slidingWindowSize = 100"),
        "slidingWindowSize",
        "did you mean `count_based.window_size`? a count-based window's size is `window_size` in the `count_based` table; a time-based window's length is `time_based.window_duration`, a duration, not a number of seconds",
        Some("100"),
    );
    check_pet(
        &minimal_and("max_wait_duration_in_half_open_state = \"10s\""),
        "max_wait_duration_in_half_open_state",
        "did you mean `max_wait_in_half_open`? the same deadline; where Resilience4j's `0` means no deadline, leave `max_wait_in_half_open` out",
        Some("\"10s\""),
    );
}

// ---------------------------------------------------------------------------
// Several problems
// ---------------------------------------------------------------------------

#[test]
fn every_problem_of_every_breaker_spec_is_reported_at_once() {
    let toml = r#"
        [resilient.circuitbreaker.pet]
        failure_rate_threshold = 0
        minimum_required_calls = 10
        wait_duration_in_open_state = "25s"
        permitted_calls_in_half_open_state = 3
        type = "ring_buffer"
        count_based = { window_size = 5 }

        [resilient.circuitbreaker.order]
        failure_rate_threshold = 50
        minimum_required_calls = 10
        wait_duration_in_open_state = "soon"
        permitted_calls_in_half_open_state = 3
        type = "time_based"
    "#;
    let err = build_err(
        Registry::builder()
            .spec::<PetBreaker>()
            .spec::<OrderBreaker>()
            .spec::<StockBreaker>(),
        toml,
    );
    let problems = err.problems();
    assert_eq!(problems.len(), 5, "{err}");

    // Sorted by path, then key.
    let order = "resilient.circuitbreaker.order";
    check(
        &problems[0],
        "OrderBreaker",
        order,
        "time_based",
        "is required for `type = \"time_based\"`",
        None,
    );
    check(
        &problems[1],
        "OrderBreaker",
        order,
        "wait_duration_in_open_state",
        DURATION,
        Some("\"soon\""),
    );
    check(
        &problems[2],
        PET,
        PET_PATH,
        "failure_rate_threshold",
        PERCENT,
        Some("0"),
    );
    check(
        &problems[3],
        PET,
        PET_PATH,
        "minimum_required_calls",
        "can't be greater than `count_based.window_size` (5)",
        Some("10"),
    );
    check(
        &problems[4],
        "StockBreaker",
        "resilient.circuitbreaker.stock",
        "",
        "has no section",
        None,
    );

    let message = err.to_string();
    assert!(
        message.starts_with("invalid resilient configuration (5 problems):"),
        "{message}"
    );
    for problem in problems {
        assert!(message.contains(&format!("\n  - {problem}")), "{message}");
    }
    assert!(err.source().is_none());
}

#[test]
fn several_problems_of_one_section_are_all_reported() {
    let err = pet_err(&pet(
        "type = \"time_based\"\nfailure_rate_threshold = 101\nwait_duration_in_open_state = \"0s\"\npermitted_calls_in_half_open_state = 0\ntime_based = { window_duration = \"0s\", sample_count = 0, counter_stripes = 65 }\nslow_call = { duration_threshold = \"0s\" }\nmax_wait_in_half_open = \"0s\"",
    ));
    let keys: Vec<&str> = err.problems().iter().map(|p| p.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "failure_rate_threshold",
            "max_wait_in_half_open",
            "minimum_required_calls",
            "permitted_calls_in_half_open_state",
            "slow_call.duration_threshold",
            "slow_call.rate_threshold",
            "time_based.counter_stripes",
            "time_based.sample_count",
            "time_based.window_duration",
        ],
        "{err}"
    );
    check(
        with_key(&err, "minimum_required_calls"),
        PET,
        PET_PATH,
        "minimum_required_calls",
        &format!("is required ({AT_LEAST_1})"),
        None,
    );
    check(
        with_key(&err, "time_based.window_duration"),
        PET,
        PET_PATH,
        "time_based.window_duration",
        "must be > 0",
        Some("\"0s\""),
    );
}

// ---------------------------------------------------------------------------
// Valid sections, read back
// ---------------------------------------------------------------------------

#[tokio::test]
async fn full_striped_approx_section_builds_and_reads_back() -> TestResult {
    let (settings, state) = pet_read_back(
        r#"
        enabled = true
        type = "striped_approx"
        failure_rate_threshold = 40
        minimum_required_calls = 20
        wait_duration_in_open_state = "30s"
        permitted_calls_in_half_open_state = 5
        max_wait_in_half_open = "1m"

        [resilient.circuitbreaker.pet.count_based]
        window_size = 200

        [resilient.circuitbreaker.pet.count_based.striped_approx]
        stripes = 8

        [resilient.circuitbreaker.pet.slow_call]
        duration_threshold = "2s"
        rate_threshold = 80
        "#,
    )
    .await?;
    assert_eq!(
        settings,
        CircuitBreakerSettings {
            enabled: true,
            window: WindowSettings::StripedApprox {
                window_size: 200,
                stripes: 8,
            },
            failure_rate_threshold: 40,
            minimum_required_calls: 20,
            wait_duration_in_open_state: Duration::from_secs(30),
            permitted_calls_in_half_open_state: 5,
            slow_call: Some(SlowCall {
                duration_threshold: Duration::from_secs(2),
                rate_threshold: 80,
            }),
            max_wait_in_half_open: Some(Duration::from_secs(60)),
        }
    );
    assert_eq!(state, State::Closed);
    Ok(())
}

#[tokio::test]
async fn defaults_of_a_minimal_section_and_of_striped_approx() -> TestResult {
    let (settings, state) = pet_read_back(&minimal_and("")).await?;
    assert_eq!(
        settings,
        minimal(WindowSettings::RingBuffer { window_size: 100 })
    );
    assert!(settings.enabled);
    assert_eq!(settings.slow_call, None);
    assert_eq!(settings.max_wait_in_half_open, None);
    assert_eq!(state, State::Closed);

    // striped_approx without a table, or with an empty one, has 16 stripes.
    let (settings, _) = pet_read_back(&required_and(
        "type = \"striped_approx\"\ncount_based = { window_size = 100 }",
    ))
    .await?;
    assert_eq!(
        settings.window,
        WindowSettings::StripedApprox {
            window_size: 100,
            stripes: 16,
        }
    );
    let (settings, _) = pet_read_back(&required_and(
        "type = \"striped_approx\"\ncount_based = { window_size = 100, striped_approx = {} }",
    ))
    .await?;
    assert_eq!(
        settings.window,
        WindowSettings::StripedApprox {
            window_size: 100,
            stripes: 16,
        }
    );
    Ok(())
}

#[tokio::test]
async fn full_fixed_window_section_builds_and_reads_back() -> TestResult {
    let (settings, state) = pet_read_back(
        r#"
        type = "fixed_window"
        failure_rate_threshold = 60
        minimum_required_calls = 50
        wait_duration_in_open_state = "500ms"
        permitted_calls_in_half_open_state = 10
        count_based = { window_size = 50 }
        slow_call = { duration_threshold = "750ms", rate_threshold = 1 }
        max_wait_in_half_open = "5s"
        "#,
    )
    .await?;
    assert_eq!(
        settings,
        CircuitBreakerSettings {
            enabled: true,
            window: WindowSettings::FixedWindow { window_size: 50 },
            failure_rate_threshold: 60,
            minimum_required_calls: 50,
            wait_duration_in_open_state: Duration::from_millis(500),
            permitted_calls_in_half_open_state: 10,
            slow_call: Some(SlowCall {
                duration_threshold: Duration::from_millis(750),
                rate_threshold: 1,
            }),
            max_wait_in_half_open: Some(Duration::from_secs(5)),
        }
    );
    assert_eq!(state, State::Closed);

    // With only the required keys: the defaults.
    let (settings, _) = pet_read_back(&minimal_and("type = \"fixed_window\"")).await?;
    assert_eq!(
        settings,
        minimal(WindowSettings::FixedWindow { window_size: 100 })
    );
    Ok(())
}

#[tokio::test]
async fn full_ring_buffer_section_builds_and_reads_back() -> TestResult {
    let (settings, state) = pet_read_back(
        r#"
        enabled = true
        type = "ring_buffer"
        failure_rate_threshold = 100
        minimum_required_calls = 1
        wait_duration_in_open_state = "1m"
        permitted_calls_in_half_open_state = 1
        count_based = { window_size = 10 }
        slow_call = { duration_threshold = "100ms", rate_threshold = 100 }
        max_wait_in_half_open = "10s"
        "#,
    )
    .await?;
    assert_eq!(
        settings,
        CircuitBreakerSettings {
            enabled: true,
            window: WindowSettings::RingBuffer { window_size: 10 },
            failure_rate_threshold: 100,
            minimum_required_calls: 1,
            wait_duration_in_open_state: Duration::from_secs(60),
            permitted_calls_in_half_open_state: 1,
            slow_call: Some(SlowCall {
                duration_threshold: Duration::from_millis(100),
                rate_threshold: 100,
            }),
            max_wait_in_half_open: Some(Duration::from_secs(10)),
        }
    );
    assert_eq!(state, State::Closed);

    let (settings, _) = pet_read_back(&minimal_and("type = \"ring_buffer\"")).await?;
    assert_eq!(
        settings,
        minimal(WindowSettings::RingBuffer { window_size: 100 })
    );
    Ok(())
}

#[tokio::test]
async fn full_time_based_section_builds_and_reads_back() -> TestResult {
    let (settings, state) = pet_read_back(
        r#"
        enabled = true
        type = "time_based"
        failure_rate_threshold = 25
        minimum_required_calls = 1000
        wait_duration_in_open_state = "0s"
        permitted_calls_in_half_open_state = 65535
        max_wait_in_half_open = "2m"

        [resilient.circuitbreaker.pet.time_based]
        window_duration = "30s"
        sample_count = 60
        counter_stripes = 4

        [resilient.circuitbreaker.pet.slow_call]
        duration_threshold = "1s"
        rate_threshold = 50
        "#,
    )
    .await?;
    assert_eq!(
        settings,
        CircuitBreakerSettings {
            enabled: true,
            window: WindowSettings::TimeBased {
                window_duration: Duration::from_secs(30),
                sample_count: 60,
                counter_stripes: 4,
            },
            failure_rate_threshold: 25,
            minimum_required_calls: 1000,
            wait_duration_in_open_state: Duration::ZERO,
            permitted_calls_in_half_open_state: 65535,
            slow_call: Some(SlowCall {
                duration_threshold: Duration::from_secs(1),
                rate_threshold: 50,
            }),
            max_wait_in_half_open: Some(Duration::from_secs(120)),
        }
    );
    assert_eq!(state, State::Closed);
    Ok(())
}

#[tokio::test]
async fn defaults_of_a_minimal_time_based_section() -> TestResult {
    let (settings, state) = pet_read_back(&required_and(TIME)).await?;
    assert_eq!(
        settings,
        minimal(WindowSettings::TimeBased {
            window_duration: Duration::from_secs(10),
            sample_count: 16,
            counter_stripes: 16,
        })
    );
    assert_eq!(state, State::Closed);
    Ok(())
}

#[tokio::test]
async fn type_is_read_without_case() -> TestResult {
    let (settings, _) = pet_read_back(&minimal_and("type = \"Ring_Buffer\"")).await?;
    assert_eq!(
        settings.window,
        WindowSettings::RingBuffer { window_size: 100 }
    );
    Ok(())
}

#[tokio::test]
async fn enabled_false_builds_a_disabled_breaker() -> TestResult {
    let (settings, state) = pet_read_back(&minimal_and("enabled = false")).await?;
    assert!(!settings.enabled);
    assert_eq!(state, State::Disabled);
    assert_eq!(
        settings,
        CircuitBreakerSettings {
            enabled: false,
            ..minimal(WindowSettings::RingBuffer { window_size: 100 })
        }
    );

    // `enabled = true` is the default made explicit.
    let (settings, state) = pet_read_back(&minimal_and("enabled = true")).await?;
    assert!(settings.enabled);
    assert_eq!(state, State::Closed);
    Ok(())
}

#[tokio::test]
async fn values_given_as_strings_are_accepted() -> TestResult {
    // `config::Environment` yields every value as a string.
    let config = config::Config::builder()
        .add_source(config::File::from_str(
            &pet(REQUIRED),
            config::FileFormat::Toml,
        ))
        .set_override("resilient.circuitbreaker.pet.enabled", "FALSE")?
        .set_override("resilient.circuitbreaker.pet.type", "time_based")?
        .set_override("resilient.circuitbreaker.pet.failure_rate_threshold", "75")?
        .set_override("resilient.circuitbreaker.pet.minimum_required_calls", " 7 ")?
        .set_override(
            "resilient.circuitbreaker.pet.permitted_calls_in_half_open_state",
            "2",
        )?
        .set_override(
            "resilient.circuitbreaker.pet.time_based.window_duration",
            "1m",
        )?
        .set_override("resilient.circuitbreaker.pet.time_based.sample_count", "6")?
        .build()?;
    let registry = resilient_config::build(Registry::builder().spec::<PetBreaker>(), &config)?;
    let settings = registry
        .scope(async { PetBreaker::get().map(|handle| handle.settings().clone()) })
        .await?;
    assert_eq!(
        settings,
        CircuitBreakerSettings {
            enabled: false,
            window: WindowSettings::TimeBased {
                window_duration: Duration::from_secs(60),
                sample_count: 6,
                counter_stripes: 16,
            },
            failure_rate_threshold: 75,
            minimum_required_calls: 7,
            wait_duration_in_open_state: Duration::from_secs(25),
            permitted_calls_in_half_open_state: 2,
            slow_call: None,
            max_wait_in_half_open: None,
        }
    );
    Ok(())
}

#[test]
fn striped_approx_table_is_not_used_by_other_count_types() {
    for kind in ["fixed_window", "ring_buffer"] {
        check_pet(
            &required_and(&format!(
                "type = \"{kind}\"\ncount_based = {{ window_size = 10, striped_approx = {{ stripes = 4 }} }}"
            )),
            "count_based.striped_approx",
            &format!("is not used by `type = \"{kind}\"`"),
            None,
        );
    }
}

#[test]
fn an_unused_empty_count_based_is_one_problem() {
    check_pet(
        &required_and(&format!("{TIME}\ncount_based = {{}}")),
        "count_based",
        "is not used by `type = \"time_based\"`",
        None,
    );
}
