//! How startup problems are worded where the plain rule would mislead: values
//! too long to echo, values echoed as written, durations that are negative or
//! out of range, numbers too large, a section that is misspelt, and specs of
//! different kinds on one path.
//!
//! Every test names the specs it builds, so the specs declared here (two of
//! them on one path, on purpose) never meet in one registry by accident.

mod support;
use support::*;

use resilient_core::{
    CircuitBreakerSpec, ConcurrencyLimitSpec, RateLimiterSpec, Registry, RetrySpec, TimeoutSpec,
};

/// The spec most tests configure.
#[derive(RetrySpec)]
#[spec("resilient.retry.pet")]
pub struct PetRetry;

/// A breaker declared, by mistake, on the retry's path.
#[derive(CircuitBreakerSpec)]
#[spec("resilient.retry.pet")]
pub struct PetBreaker;

/// The specs whose rules check a duration after it is parsed.
#[derive(CircuitBreakerSpec)]
#[spec("resilient.circuitbreaker.echo")]
pub struct EchoBreaker;

/// See [`EchoBreaker`].
#[derive(RateLimiterSpec)]
#[spec("resilient.ratelimiter.echo")]
pub struct EchoRate;

/// See [`EchoBreaker`].
#[derive(TimeoutSpec)]
#[spec("resilient.timeout.echo")]
pub struct EchoTimeout;

/// See [`EchoBreaker`].
#[derive(ConcurrencyLimitSpec)]
#[spec("resilient.concurrency.echo")]
pub struct EchoLimit;

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

#[test]
fn a_duration_is_echoed_as_written_not_reformatted() {
    let breaker = "failure_rate_threshold = 50\nminimum_required_calls = 1\npermitted_calls_in_half_open_state = 1\ncount_based = { window_size = 10 }";
    let cases: [(RegistryBuilderFn, &str, &str, &str, &str, &str); 6] = [
        (
            || Registry::builder().spec::<EchoBreaker>(),
            "EchoBreaker",
            "resilient.circuitbreaker.echo",
            "wait_duration_in_open_state = \"1500d\"",
            "wait_duration_in_open_state",
            "\"1500d\"",
        ),
        (
            || Registry::builder().spec::<EchoRate>(),
            "EchoRate",
            "resilient.ratelimiter.echo",
            "limit_for_period = 1\nlimit_refresh_period = \"1.5ms\"",
            "limit_refresh_period",
            "\"1.5ms\"",
        ),
        (
            || Registry::builder().spec::<EchoRate>(),
            "EchoRate",
            "resilient.ratelimiter.echo",
            "limit_for_period = 1\nlimit_refresh_period = \"999us\"",
            "limit_refresh_period",
            "\"999us\"",
        ),
        (
            || Registry::builder().spec::<EchoTimeout>(),
            "EchoTimeout",
            "resilient.timeout.echo",
            "duration = \"0.0s\"",
            "duration",
            "\"0.0s\"",
        ),
        (
            || Registry::builder().spec::<EchoLimit>(),
            "EchoLimit",
            "resilient.concurrency.echo",
            "limit = 1\nmax_wait = \"1000ms\"",
            "max_wait",
            "\"1000ms\"",
        ),
        (
            || Registry::builder().spec::<PetRetry>(),
            PET,
            PET_PATH,
            "delay = \"1s\"\nattempts = 1\nbackoff = { delay_max = \"999ms\" }",
            "backoff.delay_max",
            "\"999ms\"",
        ),
    ];
    for (builder, spec, path, body, key, found) in cases {
        let body = if spec == "EchoBreaker" {
            format!("{breaker}\n{body}")
        } else {
            body.to_owned()
        };
        let err = build_err(builder(), &format!("[{path}]\n{body}\n"));
        check(only(&err), spec, path, key, "", Some(found));
    }
}

type RegistryBuilderFn = fn() -> resilient_core::RegistryBuilder;

/// `attempts = 99999999999999999999` in a TOML file never reaches
/// resilient: the `config` crate reads every TOML integer as an `i64` and
/// fails in `Config::builder().build()` with the bare "number too large to fit
/// in target type" (from `str::parse`, naming neither the file's key nor its
/// line). Nothing here can add the spec or the key to it; this test notices if
/// the `config` crate starts passing such numbers on.
#[test]
fn a_toml_integer_beyond_64_bits_fails_in_the_config_crate_before_validation() {
    let built = config::Config::builder()
        .add_source(config::File::from_str(
            "[resilient.retry.pet]\ndelay = \"1s\"\nattempts = 99999999999999999999\n",
            config::FileFormat::Toml,
        ))
        .build();
    let Err(e) = built else {
        panic!("the config crate now reads integers beyond i64: validate them here")
    };
    assert_eq!(e.to_string(), "number too large to fit in target type");
}

/// What reaches resilient: the environment's string, or the float the
/// `config` crate makes of it with `try_parsing(true)` (it tries `i64`, then
/// `f64`). Both name the spec, the key and the range.
#[test]
fn a_whole_number_too_large_from_the_environment_names_the_spec_key_and_range() {
    for (try_parsing, found) in [
        (false, "\"99999999999999999999\""),
        (true, "100000000000000000000"),
    ] {
        let vars = std::collections::HashMap::from([(
            "APP__RESILIENT__RETRY__PET__ATTEMPTS".to_owned(),
            "99999999999999999999".to_owned(),
        )]);
        let settings = config::Config::builder()
            .add_source(config::File::from_str(
                "[resilient.retry.pet]\ndelay = \"1s\"\nattempts = 1\n",
                config::FileFormat::Toml,
            ))
            .add_source(
                config::Environment::with_prefix("APP")
                    .separator("__")
                    .try_parsing(try_parsing)
                    .source(Some(vars.into_iter().collect())),
            )
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        let Err(err) = resilient_config::build(Registry::builder().spec::<PetRetry>(), &settings)
        else {
            panic!("expected a ConfigError")
        };
        check(
            only(&err),
            PET,
            PET_PATH,
            "attempts",
            "must be a whole number in 0..=4294967295",
            Some(found),
        );
    }
}

#[test]
fn a_rule_that_names_another_key_echoes_its_value_as_written() {
    let err = build_err(
        Registry::builder().spec::<PetRetry>(),
        "[resilient.retry.pet]\ndelay = \"1500d\"\nattempts = 2\nbackoff = { delay_max = \"1s\" }\n",
    );
    assert_eq!(
        only(&err).to_string(),
        "PetRetry at `resilient.retry.pet`: key `backoff.delay_max` must be ≥ `delay` (\"1500d\") or the cap would shorten even the first wait (found \"1s\")"
    );
}
