//! Startup validation of timeout, concurrency limit and rate limiter specs
//! through the public API: a `config::Config` read from TOML (and overrides,
//! as the environment gives them) is turned into a registry with
//! `resilient_config::build`, and every rule of `TimeoutSettings::read`,
//! `ConcurrencyLimitSettings::read` and `RateLimiterSettings::read` is checked
//! through the `ConfigError` it gives.
//!
//! Every test names the specs it builds with `Registry::builder().spec::<X>()`,
//! so it needs no section for the other specs of this test binary; none calls
//! `init`.

mod support;
use support::*;

use std::error::Error;
use std::time::Duration;

use resilient_config::ConfigError;
use resilient_core::backend::{Backend, OnBackendFailure};
use resilient_core::concurrency::{ConcurrencyLimitSettings, Policy};
use resilient_core::rate_limiter::{Algorithm, RateLimiterSettings};
use resilient_core::settings::Problem;
use resilient_core::timeout::TimeoutSettings;
use resilient_core::{
    ConcurrencyLimitSpec, RateLimiterSpec, Registry, RegistryBuilder, TimeoutSpec,
};

/// The timeout spec most tests configure.
#[derive(TimeoutSpec)]
#[spec("resilient.timeout.pet")]
pub struct PetTimeout;

/// A second timeout spec, for configurations with several specs.
#[derive(TimeoutSpec)]
#[spec("resilient.timeout.order")]
pub struct OrderTimeout;

/// The concurrency limit spec most tests configure.
#[derive(ConcurrencyLimitSpec)]
#[spec("resilient.concurrency.pet")]
pub struct PetLimit;

/// The rate limiter spec most tests configure.
#[derive(RateLimiterSpec)]
#[spec("resilient.ratelimiter.pet")]
pub struct PetRate;

/// A second rate limiter spec, for configurations with several specs.
#[derive(RateLimiterSpec)]
#[spec("resilient.ratelimiter.stock")]
pub struct StockRate;

/// One spec under test: its name, its path, and a builder naming it alone.
struct Kind {
    spec: &'static str,
    path: &'static str,
    builder: fn() -> RegistryBuilder,
}

fn timeout_builder() -> RegistryBuilder {
    Registry::builder().spec::<PetTimeout>()
}

fn limit_builder() -> RegistryBuilder {
    Registry::builder().spec::<PetLimit>()
}

fn rate_builder() -> RegistryBuilder {
    Registry::builder().spec::<PetRate>()
}

/// [`PetTimeout`].
const TIMEOUT: Kind = Kind {
    spec: "PetTimeout",
    path: "resilient.timeout.pet",
    builder: timeout_builder,
};

/// [`PetLimit`].
const LIMIT: Kind = Kind {
    spec: "PetLimit",
    path: "resilient.concurrency.pet",
    builder: limit_builder,
};

/// [`PetRate`].
const RATE: Kind = Kind {
    spec: "PetRate",
    path: "resilient.ratelimiter.pet",
    builder: rate_builder,
};

impl Kind {
    /// `[path]` followed by `body`.
    fn section(&self, body: &str) -> String {
        format!("[{}]\n{body}\n", self.path)
    }

    /// The error of building this spec alone from `toml`.
    fn err(&self, toml: &str) -> ConfigError {
        build_err((self.builder)(), toml)
    }

    /// The error of building this spec's section `body`.
    fn body_err(&self, body: &str) -> ConfigError {
        self.err(&self.section(body))
    }

    /// Checks the only problem of this spec's section `body`.
    #[track_caller]
    fn check(&self, body: &str, key: &str, rule: &str, found: Option<&str>) {
        let err = self.body_err(body);
        check(only(&err), self.spec, self.path, key, rule, found);
    }

    /// Builds this spec's section `body`; panics with the problems if it
    /// does not build.
    #[track_caller]
    fn assert_builds(&self, body: &str) {
        let toml = self.section(body);
        if let Err(err) = resilient_config::build((self.builder)(), &config(&toml)) {
            panic!("expected this section to build:\n{toml}\n{err}");
        }
    }
}

/// Checks that `problem` is an unknown key with no near match, listing every
/// key of `known`.
#[track_caller]
fn check_unknown_lists(problem: &Problem, kind: &Kind, key: &str, found: &str, known: &[&str]) {
    check(
        problem,
        kind.spec,
        kind.path,
        key,
        "is not a known setting; known settings here: ",
        Some(found),
    );
    assert!(!problem.rule.contains("did you mean"), "{problem}");
    for known in known {
        assert!(
            problem.rule.contains(&format!("`{known}`")),
            "`{known}` is not listed: {problem}"
        );
    }
}

/// [`PetTimeout`]'s settings, read back with `PetTimeout::get()` in a scope.
async fn timeout_settings(config: &config::Config) -> Result<TimeoutSettings, Box<dyn Error>> {
    let registry = resilient_config::build(Registry::builder().spec::<PetTimeout>(), config)?;
    assert!(registry.contains::<PetTimeout>());
    assert_eq!(registry.len(), 1);
    let settings = registry
        .scope(async { PetTimeout::get().map(|handle| *handle.settings()) })
        .await?;
    Ok(settings)
}

/// [`PetLimit`]'s settings, read back with `PetLimit::get()` in a scope.
async fn limit_settings(
    config: &config::Config,
) -> Result<ConcurrencyLimitSettings, Box<dyn Error>> {
    let registry = resilient_config::build(Registry::builder().spec::<PetLimit>(), config)?;
    assert!(registry.contains::<PetLimit>());
    assert_eq!(registry.len(), 1);
    let settings = registry
        .scope(async {
            PetLimit::get().map(|handle| {
                // A fresh limiter has every place free.
                assert_eq!(handle.in_use(), 0);
                assert_eq!(handle.available(), handle.settings().limit);
                *handle.settings()
            })
        })
        .await?;
    Ok(settings)
}

/// [`PetRate`]'s settings, read back with `PetRate::get()` in a scope.
async fn rate_settings(config: &config::Config) -> Result<RateLimiterSettings, Box<dyn Error>> {
    let registry = resilient_config::build(Registry::builder().spec::<PetRate>(), config)?;
    assert!(registry.contains::<PetRate>());
    assert_eq!(registry.len(), 1);
    let settings = registry
        .scope(async { PetRate::get().map(|handle| *handle.settings()) })
        .await?;
    Ok(settings)
}

const BOOL: &str = "must be `true` or `false`";
const DURATION_REQUIRED: &str = "is required (a duration such as \"100ms\", \"2s\" or \"1m\")";
const LIMIT_RANGE: &str = "must be a whole number in 1..=536870911";
const PERIOD_RANGE: &str = "must be a whole number in 1..=1048575";
const POLICIES: &str = "must be \"reject\" or \"block\"";
const TYPES: &str = "must be \"fixed_window\" or \"token_bucket\"";
const BLOCK_ONLY: &str =
    "applies to `policy = \"block\"` only; set `policy = \"block\"`, or remove `max_wait`";
const NO_SECTION: &str = "has no section in the configuration; add one (every spec linked into the binary needs its own section, nothing is inherited)";

/// A minimal valid timeout section.
const TIMEOUT_MIN: &str = "duration = \"300ms\"";
/// A minimal valid concurrency limit section.
const LIMIT_MIN: &str = "limit = 4";
/// A minimal valid rate limiter section.
const RATE_MIN: &str = "limit_for_period = 10\nlimit_refresh_period = \"1s\"";

/// `min` followed by `extra`.
fn and(min: &str, extra: &str) -> String {
    format!("{min}\n{extra}")
}

// ---------------------------------------------------------------------------
// The sections themselves
// ---------------------------------------------------------------------------

#[test]
fn timeout_section_is_required() {
    let err = TIMEOUT.err(&format!("[resilient.timeout.other]\n{TIMEOUT_MIN}\n"));
    check(only(&err), TIMEOUT.spec, TIMEOUT.path, "", NO_SECTION, None);
    // Only the section is reported, not its required `duration`.
    let err = TIMEOUT.err("");
    check(only(&err), TIMEOUT.spec, TIMEOUT.path, "", NO_SECTION, None);
}

#[test]
fn concurrency_section_is_required() {
    let err = LIMIT.err(&format!("[resilient.concurrency.other]\n{LIMIT_MIN}\n"));
    check(only(&err), LIMIT.spec, LIMIT.path, "", NO_SECTION, None);
    let err = LIMIT.err("");
    check(only(&err), LIMIT.spec, LIMIT.path, "", NO_SECTION, None);
}

#[test]
fn rate_limiter_section_is_required() {
    let err = RATE.err(&format!("[resilient.ratelimiter.other]\n{RATE_MIN}\n"));
    check(only(&err), RATE.spec, RATE.path, "", NO_SECTION, None);
    let err = RATE.err("");
    check(only(&err), RATE.spec, RATE.path, "", NO_SECTION, None);
}

#[test]
fn sections_must_be_tables() {
    for (kind, toml) in [
        (&TIMEOUT, "[resilient.timeout]\npet = \"300ms\"\n"),
        (&LIMIT, "[resilient.concurrency]\npet = 4\n"),
        (&RATE, "[resilient.ratelimiter]\npet = [10, \"1s\"]\n"),
    ] {
        let err = kind.err(toml);
        let found = match kind.path {
            "resilient.timeout.pet" => "\"300ms\"",
            "resilient.concurrency.pet" => "4",
            _ => "a list",
        };
        check(
            only(&err),
            kind.spec,
            kind.path,
            "",
            "must be a table of settings",
            Some(found),
        );
        let message = err.problems()[0].to_string();
        assert_eq!(
            message,
            format!(
                "{} at `{}`: must be a table of settings (found {found})",
                kind.spec, kind.path
            )
        );
    }
}

// ---------------------------------------------------------------------------
// Timeout
// ---------------------------------------------------------------------------

#[test]
fn timeout_duration_is_required() {
    TIMEOUT.check("enabled = true", "duration", DURATION_REQUIRED, None);
    let message = only(&TIMEOUT.body_err("enabled = true")).to_string();
    assert_eq!(
        message,
        "PetTimeout at `resilient.timeout.pet`: key `duration` is required (a duration such as \"100ms\", \"2s\" or \"1m\")"
    );
}

#[test]
fn timeout_duration_must_be_positive() {
    TIMEOUT.check(
        "duration = \"0s\"",
        "duration",
        "must be > 0",
        Some("\"0s\""),
    );
    let message = only(&TIMEOUT.body_err("duration = \"0s\"")).to_string();
    assert_eq!(
        message,
        "PetTimeout at `resilient.timeout.pet`: key `duration` must be > 0 (found \"0s\")"
    );
    // The smallest positive duration is fine.
    TIMEOUT.assert_builds("duration = \"1ns\"");
}

#[test]
fn timeout_duration_must_be_a_duration() {
    for (value, found) in [
        ("\"soon\"", "\"soon\""),
        // A number without a unit, as a string or a number.
        ("\"300\"", "\"300\""),
        ("300", "300"),
        ("1.5", "1.5"),
        ("true", "true"),
        ("[\"1s\"]", "a list"),
    ] {
        TIMEOUT.check(
            &format!("duration = {value}"),
            "duration",
            DURATION,
            Some(found),
        );
    }
}

#[test]
fn timeout_enabled_must_be_a_bool() {
    for (value, found) in [("\"yes\"", "\"yes\""), ("1", "1"), ("\"on\"", "\"on\"")] {
        TIMEOUT.check(
            &and(TIMEOUT_MIN, &format!("enabled = {value}")),
            "enabled",
            BOOL,
            Some(found),
        );
    }
}

#[test]
fn timeout_disabled_section_is_still_validated() {
    TIMEOUT.check(
        "enabled = false\nduration = \"0s\"",
        "duration",
        "must be > 0",
        Some("\"0s\""),
    );
    TIMEOUT.check("enabled = false", "duration", DURATION_REQUIRED, None);
}

#[test]
fn timeout_unknown_key_suggests_the_nearest_known_key() {
    // A typo of the required key is one problem, not two.
    TIMEOUT.check(
        "durration = \"300ms\"",
        "durration",
        "is not a known setting; did you mean `duration`? (`duration` is required)",
        Some("\"300ms\""),
    );
    // An optional key: only the suggestion.
    TIMEOUT.check(
        &and(TIMEOUT_MIN, "enable = false"),
        "enable",
        "is not a known setting; did you mean `enabled`?",
        Some("false"),
    );
    let err = TIMEOUT.body_err(&and(TIMEOUT_MIN, "enable = false"));
    assert!(!only(&err).rule.contains("is required"), "{err}");
}

#[test]
fn timeout_unknown_key_without_a_near_match_lists_the_known_keys() {
    let err = TIMEOUT.body_err(&and(TIMEOUT_MIN, "zzz = 1"));
    check_unknown_lists(only(&err), &TIMEOUT, "zzz", "1", &["enabled", "duration"]);
}

// ---------------------------------------------------------------------------
// Concurrency limit
// ---------------------------------------------------------------------------

#[test]
fn concurrency_limit_is_required() {
    LIMIT.check(
        "policy = \"block\"",
        "limit",
        &format!("is required ({LIMIT_RANGE})"),
        None,
    );
    let message = only(&LIMIT.body_err("policy = \"block\"")).to_string();
    assert_eq!(
        message,
        "PetLimit at `resilient.concurrency.pet`: key `limit` is required (must be a whole number in 1..=536870911)"
    );
}

#[test]
fn concurrency_limit_must_be_at_least_1() {
    for (value, found) in [("0", "0"), ("-1", "-1")] {
        LIMIT.check(
            &format!("limit = {value}"),
            "limit",
            LIMIT_RANGE,
            Some(found),
        );
    }
    LIMIT.assert_builds("limit = 1");
}

#[test]
fn concurrency_limit_must_be_at_most_536870911() {
    LIMIT.check("limit = 536870912", "limit", LIMIT_RANGE, Some("536870912"));
    LIMIT.check(
        "limit = 9223372036854775807",
        "limit",
        LIMIT_RANGE,
        Some("9223372036854775807"),
    );
    let message = only(&LIMIT.body_err("limit = 536870912")).to_string();
    assert_eq!(
        message,
        "PetLimit at `resilient.concurrency.pet`: key `limit` must be a whole number in 1..=536870911 (found 536870912)"
    );
    LIMIT.assert_builds("limit = 536870911");
}

#[test]
fn concurrency_limit_must_be_a_whole_number() {
    for (value, found) in [
        ("2.5", "2.5"),
        ("\"ten\"", "\"ten\""),
        ("true", "true"),
        ("\"1s\"", "\"1s\""),
    ] {
        LIMIT.check(
            &format!("limit = {value}"),
            "limit",
            LIMIT_RANGE,
            Some(found),
        );
    }
    // A whole number written with a fraction is a whole number.
    LIMIT.assert_builds("limit = 2.0");
}

#[test]
fn concurrency_policy_must_be_reject_or_block() {
    for (value, found) in [
        ("\"fifo\"", "\"fifo\""),
        ("\"blocking\"", "\"blocking\""),
        ("1", "1"),
    ] {
        LIMIT.check(
            &and(LIMIT_MIN, &format!("policy = {value}")),
            "policy",
            POLICIES,
            Some(found),
        );
    }
    // An unknown policy is one problem, even with a `max_wait`.
    LIMIT.check(
        &and(LIMIT_MIN, "policy = \"fifo\"\nmax_wait = \"1s\""),
        "policy",
        POLICIES,
        Some("\"fifo\""),
    );
}

#[test]
fn concurrency_max_wait_with_policy_reject_is_an_error() {
    // Reject written out, and reject by default.
    for policy in ["policy = \"reject\"\n", ""] {
        LIMIT.check(
            &and(LIMIT_MIN, &format!("{policy}max_wait = \"500ms\"")),
            "max_wait",
            BLOCK_ONLY,
            Some("\"500ms\""),
        );
    }
    let message = only(&LIMIT.body_err(&and(LIMIT_MIN, "max_wait = \"500ms\""))).to_string();
    assert_eq!(
        message,
        "PetLimit at `resilient.concurrency.pet`: key `max_wait` applies to `policy = \"block\"` only; set `policy = \"block\"`, or remove `max_wait` (found \"500ms\")"
    );
}

#[test]
fn concurrency_max_wait_must_be_a_duration() {
    for (value, found) in [
        ("\"soon\"", "\"soon\""),
        ("500", "500"),
        ("\"500\"", "\"500\""),
    ] {
        LIMIT.check(
            &and(
                LIMIT_MIN,
                &format!("policy = \"block\"\nmax_wait = {value}"),
            ),
            "max_wait",
            DURATION,
            Some(found),
        );
    }
    // With `reject`, an invalid `max_wait` is one problem: the duration.
    LIMIT.check(
        &and(LIMIT_MIN, "max_wait = \"soon\""),
        "max_wait",
        DURATION,
        Some("\"soon\""),
    );
}

#[test]
fn concurrency_enabled_must_be_a_bool() {
    for (value, found) in [("\"yes\"", "\"yes\""), ("0", "0")] {
        LIMIT.check(
            &and(LIMIT_MIN, &format!("enabled = {value}")),
            "enabled",
            BOOL,
            Some(found),
        );
    }
}

#[test]
fn concurrency_disabled_section_is_still_validated() {
    LIMIT.check(
        "enabled = false\nlimit = 0",
        "limit",
        LIMIT_RANGE,
        Some("0"),
    );
    LIMIT.check(
        "enabled = false\nlimit = 2\nmax_wait = \"1s\"",
        "max_wait",
        BLOCK_ONLY,
        Some("\"1s\""),
    );
}

#[test]
fn concurrency_unknown_key_suggests_the_nearest_known_key() {
    // A typo of the required key is one problem, not two.
    LIMIT.check(
        "limt = 4",
        "limt",
        "is not a known setting; did you mean `limit`? (`limit` is required)",
        Some("4"),
    );
    // Optional keys: only the suggestion.
    LIMIT.check(
        &and(LIMIT_MIN, "policy = \"block\"\nmaxWait = \"1s\""),
        "maxWait",
        "is not a known setting; did you mean `max_wait`?",
        Some("\"1s\""),
    );
    LIMIT.check(
        &and(LIMIT_MIN, "polcy = \"block\""),
        "polcy",
        "is not a known setting; did you mean `policy`?",
        Some("\"block\""),
    );
    let err = LIMIT.body_err(&and(LIMIT_MIN, "polcy = \"block\""));
    assert!(!only(&err).rule.contains("is required"), "{err}");
}

// The `max_wait` problem follows only from the misspelt `policy` falling back
// to its default, `reject`: one mistake, which should be one problem.
#[test]
fn concurrency_unknown_key_without_a_near_match_lists_the_known_keys() {
    let err = LIMIT.body_err(&and(LIMIT_MIN, "zzz = 1"));
    check_unknown_lists(
        only(&err),
        &LIMIT,
        "zzz",
        "1",
        &["enabled", "limit", "policy", "max_wait"],
    );
}

/// A minimal adaptive concurrency limit section.
const ADAPTIVE_MIN: &str = "type = \"adaptive\"\nmax = 50";
/// The rule of `tolerance`.
const TOLERANCE: &str = "must be a number > 1 and ≤ 10 with a decimal point (1.1: a window may be 10 % slower than the baseline before the limit comes down)";

/// The adaptive settings of [`PetLimit`] built from `config`.
async fn adaptive_tolerance(config: &config::Config) -> Result<f64, Box<dyn Error>> {
    let registry = resilient_config::build(Registry::builder().spec::<PetLimit>(), config)?;
    let tolerance = registry
        .scope(async { PetLimit::get().map(|h| h.adaptive().map(|a| a.tolerance)) })
        .await?;
    Ok(tolerance.ok_or("an adaptive limit")?)
}

#[test]
fn adaptive_tolerance_written_as_a_whole_number_reads_as_a_percent() {
    // TOML's `10` is an integer: most likely 10 %, which as a ratio would
    // let latency grow tenfold before the limit comes down.
    LIMIT.check(
        &and(ADAPTIVE_MIN, "tolerance = 10"),
        "tolerance",
        &format!("{TOLERANCE}; a whole number reads as a percent: `tolerance = 1.1` is 10 %, and `tolerance = 10.0` lets latency reach 10 times the baseline"),
        Some("10"),
    );
    LIMIT.check(
        &and(ADAPTIVE_MIN, "tolerance = 2"),
        "tolerance",
        &format!("{TOLERANCE}; a whole number reads as a percent: `tolerance = 1.02` is 2 %, and `tolerance = 2.0` lets latency reach 2 times the baseline"),
        Some("2"),
    );
    // Out of range as a ratio, in range as the percent it most likely is.
    LIMIT.check(
        &and(ADAPTIVE_MIN, "tolerance = 25"),
        "tolerance",
        &format!("{TOLERANCE}; a whole number reads as a percent: `tolerance = 1.25` is 25 %"),
        Some("25"),
    );
    LIMIT.check(
        &and(ADAPTIVE_MIN, "tolerance = 0.1"),
        "tolerance",
        &format!("{TOLERANCE}; a number below 1 reads as the share over the baseline: `tolerance = 1.1` is 10 %"),
        Some("0.1"),
    );
    // Written as a ratio, it is taken as one, however high.
    LIMIT.assert_builds(&and(ADAPTIVE_MIN, "tolerance = 10.0"));
    LIMIT.assert_builds(&and(ADAPTIVE_MIN, "tolerance = 1.1"));
}

#[tokio::test]
async fn adaptive_tolerance_from_the_environment_is_read_as_written() -> TestResult {
    // `config::Environment` yields every value as a string: `"10"` is the
    // whole number, `"2.5"` the ratio.
    let config = |tolerance: &str| -> Result<config::Config, config::ConfigError> {
        config::Config::builder()
            .set_override("resilient.concurrency.pet.type", "adaptive")?
            .set_override("resilient.concurrency.pet.max", "50")?
            .set_override("resilient.concurrency.pet.tolerance", tolerance)?
            .build()
    };
    let Err(err) = resilient_config::build(limit_builder(), &config("10")?) else {
        return Err("`tolerance = \"10\"` was accepted".into());
    };
    check(
        only(&err),
        LIMIT.spec,
        LIMIT.path,
        "tolerance",
        "a whole number reads as a percent: `tolerance = 1.1` is 10 %",
        Some("\"10\""),
    );
    assert_eq!(adaptive_tolerance(&config(" 2.5 ")?).await?, 2.5);
    assert_eq!(adaptive_tolerance(&config("1.1")?).await?, 1.1);
    Ok(())
}

// ---------------------------------------------------------------------------
// Rate limiter
// ---------------------------------------------------------------------------

#[test]
fn rate_limit_for_period_is_required() {
    RATE.check(
        "limit_refresh_period = \"1s\"",
        "limit_for_period",
        &format!("is required ({PERIOD_RANGE})"),
        None,
    );
    let message = only(&RATE.body_err("limit_refresh_period = \"1s\"")).to_string();
    assert_eq!(
        message,
        "PetRate at `resilient.ratelimiter.pet`: key `limit_for_period` is required (must be a whole number in 1..=1048575)"
    );
}

#[test]
fn rate_limit_for_period_must_be_at_least_1() {
    for (value, found) in [("0", "0"), ("-5", "-5")] {
        RATE.check(
            &format!("limit_for_period = {value}\nlimit_refresh_period = \"1s\""),
            "limit_for_period",
            PERIOD_RANGE,
            Some(found),
        );
    }
    RATE.assert_builds("limit_for_period = 1\nlimit_refresh_period = \"1s\"");
}

#[test]
fn rate_limit_for_period_must_be_at_most_1048575() {
    RATE.check(
        "limit_for_period = 1048576\nlimit_refresh_period = \"1s\"",
        "limit_for_period",
        PERIOD_RANGE,
        Some("1048576"),
    );
    RATE.assert_builds("limit_for_period = 1048575\nlimit_refresh_period = \"1s\"");
    RATE.assert_builds(
        "type = \"token_bucket\"\nlimit_for_period = 1048575\nlimit_refresh_period = \"1s\"",
    );
}

#[test]
fn rate_limit_for_period_must_be_a_whole_number() {
    for (value, found) in [("2.5", "2.5"), ("\"many\"", "\"many\"")] {
        RATE.check(
            &format!("limit_for_period = {value}\nlimit_refresh_period = \"1s\""),
            "limit_for_period",
            PERIOD_RANGE,
            Some(found),
        );
    }
}

#[test]
fn rate_limit_refresh_period_is_required() {
    RATE.check(
        "limit_for_period = 10",
        "limit_refresh_period",
        DURATION_REQUIRED,
        None,
    );
}

#[test]
fn rate_limit_refresh_period_must_be_at_least_1ms() {
    for (value, found) in [("\"500us\"", "\"500us\""), ("\"0s\"", "\"0s\"")] {
        RATE.check(
            &format!("limit_for_period = 10\nlimit_refresh_period = {value}"),
            "limit_refresh_period",
            "must be at least 1ms",
            Some(found),
        );
    }
    let message =
        only(&RATE.body_err("limit_for_period = 10\nlimit_refresh_period = \"500us\"")).to_string();
    assert_eq!(
        message,
        "PetRate at `resilient.ratelimiter.pet`: key `limit_refresh_period` must be at least 1ms (found \"500us\")"
    );
    RATE.assert_builds("limit_for_period = 10\nlimit_refresh_period = \"1ms\"");
}

/// A fixed window's period is whole milliseconds: `1999us` would otherwise
/// act as `1ms` and let twice the permits through.
#[test]
fn fixed_window_period_must_be_whole_milliseconds() {
    for kind in ["", "type = \"fixed_window\"\n"] {
        RATE.check(
            &format!("{kind}limit_for_period = 10\nlimit_refresh_period = \"1999us\""),
            "limit_refresh_period",
            "must be a whole number of milliseconds for `type = \"fixed_window\"` (use `type = \"token_bucket\"` for a finer period)",
            Some("\"1999us\""), // as written
        );
    }
    RATE.assert_builds("limit_for_period = 10\nlimit_refresh_period = \"1s 1ms\"");
    RATE.assert_builds(
        "type = \"token_bucket\"\nlimit_for_period = 10\nlimit_refresh_period = \"1999us\"",
    );
}

/// A token bucket counts nanoseconds in 64 bits: a longer period would
/// saturate and admit every call.
#[test]
fn token_bucket_period_is_at_most_584_years() {
    RATE.check(
        "type = \"token_bucket\"\nlimit_for_period = 10\nlimit_refresh_period = \"600y\"",
        "limit_refresh_period",
        "must be at most 584 years for `type = \"token_bucket\"` (its clock counts nanoseconds in 64 bits)",
        Some("\"600y\""), // as written
    );
    RATE.assert_builds(
        "type = \"token_bucket\"\nlimit_for_period = 10\nlimit_refresh_period = \"584y\"",
    );
}

#[test]
fn rate_limit_refresh_period_must_be_a_duration() {
    for (value, found) in [
        ("\"often\"", "\"often\""),
        ("1000", "1000"),
        ("\"1000\"", "\"1000\""),
    ] {
        RATE.check(
            &format!("limit_for_period = 10\nlimit_refresh_period = {value}"),
            "limit_refresh_period",
            DURATION,
            Some(found),
        );
    }
}

// The documented rule (`RateLimiterSettings`: "duration ≥ 1ms (and ≥ 1ns per
// permit for `token_bucket`)") is not checked: 1ms / 1048575 permits is under
// 1ns per permit, yet the section builds.
#[test]
fn rate_token_bucket_period_must_give_each_permit_at_least_1ns() {
    RATE.check(
        "type = \"token_bucket\"\nlimit_for_period = 1048575\nlimit_refresh_period = \"1ms\"",
        "limit_refresh_period",
        "1ns",
        Some("\"1ms\""),
    );
    // Exactly 1ns per permit is fine.
    RATE.assert_builds(
        "type = \"token_bucket\"\nlimit_for_period = 1000000\nlimit_refresh_period = \"1ms\"",
    );
}

#[test]
fn rate_type_must_be_fixed_window_or_token_bucket() {
    for (value, found) in [
        ("\"sliding_window\"", "\"sliding_window\""),
        ("\"token-bucket\"", "\"token-bucket\""),
        ("2", "2"),
    ] {
        RATE.check(
            &and(RATE_MIN, &format!("type = {value}")),
            "type",
            TYPES,
            Some(found),
        );
    }
}

#[test]
fn rate_max_wait_must_be_a_duration() {
    for (value, found) in [
        ("\"a bit\"", "\"a bit\""),
        ("250", "250"),
        ("false", "false"),
    ] {
        RATE.check(
            &and(RATE_MIN, &format!("max_wait = {value}")),
            "max_wait",
            DURATION,
            Some(found),
        );
    }
    // With either type.
    RATE.check(
        &and(RATE_MIN, "type = \"token_bucket\"\nmax_wait = \"a bit\""),
        "max_wait",
        DURATION,
        Some("\"a bit\""),
    );
}

#[test]
fn rate_enabled_must_be_a_bool() {
    for (value, found) in [("\"no\"", "\"no\""), ("1", "1")] {
        RATE.check(
            &and(RATE_MIN, &format!("enabled = {value}")),
            "enabled",
            BOOL,
            Some(found),
        );
    }
}

#[test]
fn rate_disabled_section_is_still_validated() {
    RATE.check(
        "enabled = false\nlimit_for_period = 0\nlimit_refresh_period = \"1s\"",
        "limit_for_period",
        PERIOD_RANGE,
        Some("0"),
    );
}

#[test]
fn rate_unknown_key_suggests_the_nearest_known_key() {
    // Typos of required keys are one problem each, not two.
    RATE.check(
        "limitForPeriod = 10\nlimit_refresh_period = \"1s\"",
        "limitForPeriod",
        "is not a known setting; did you mean `limit_for_period`? (`limit_for_period` is required)",
        Some("10"),
    );
    RATE.check(
        "limit_for_period = 10\nlimitRefreshPeriod = \"1s\"",
        "limitRefreshPeriod",
        "is not a known setting; did you mean `limit_refresh_period`? (`limit_refresh_period` is required)",
        Some("\"1s\""),
    );
    // As an environment override gives it: lower case, no underscores.
    RATE.check(
        "limitforperiod = 10\nlimit_refresh_period = \"1s\"",
        "limitforperiod",
        "is not a known setting; did you mean `limit_for_period`? (`limit_for_period` is required)",
        Some("10"),
    );
    // Optional keys: only the suggestion.
    for (line, key, near, found) in [
        ("maxWait = \"1s\"", "maxWait", "max_wait", "\"1s\""),
        ("typ = \"token_bucket\"", "typ", "type", "\"token_bucket\""),
    ] {
        RATE.check(
            &and(RATE_MIN, line),
            key,
            &format!("is not a known setting; did you mean `{near}`?"),
            Some(found),
        );
        let err = RATE.body_err(&and(RATE_MIN, line));
        assert!(!only(&err).rule.contains("is required"), "{err}");
    }
}

#[test]
fn rate_unknown_key_without_a_near_match_lists_the_known_keys() {
    let err = RATE.body_err(&and(RATE_MIN, "zzz = 1"));
    check_unknown_lists(
        only(&err),
        &RATE,
        "zzz",
        "1",
        &[
            "enabled",
            "type",
            "limit_for_period",
            "limit_refresh_period",
            "max_wait",
        ],
    );
}

// ---------------------------------------------------------------------------
// Several problems
// ---------------------------------------------------------------------------

#[test]
fn every_problem_of_every_spec_of_every_kind_is_reported_at_once() {
    let toml = r#"
        [resilient.timeout.pet]
        duration = "0s"
        durration = "1s"

        [resilient.concurrency.pet]
        limit = 536870912
        policy = "fifo"

        [resilient.ratelimiter.pet]
        limitForPeriod = 10
        limit_refresh_period = "500us"
        type = "leaky_bucket"
        max_wait = "a bit"
    "#;
    let err = build_err(
        Registry::builder()
            .spec::<PetTimeout>()
            .spec::<OrderTimeout>()
            .spec::<PetLimit>()
            .spec::<PetRate>()
            .spec::<StockRate>(),
        toml,
    );
    let problems = err.problems();
    assert_eq!(problems.len(), 10, "{err}");

    // Sorted by path, then key.
    check(
        &problems[0],
        LIMIT.spec,
        LIMIT.path,
        "limit",
        LIMIT_RANGE,
        Some("536870912"),
    );
    check(
        &problems[1],
        LIMIT.spec,
        LIMIT.path,
        "policy",
        POLICIES,
        Some("\"fifo\""),
    );
    check(
        &problems[2],
        RATE.spec,
        RATE.path,
        "limitForPeriod",
        "did you mean `limit_for_period`? (`limit_for_period` is required)",
        Some("10"),
    );
    check(
        &problems[3],
        RATE.spec,
        RATE.path,
        "limit_refresh_period",
        "must be at least 1ms",
        Some("\"500us\""),
    );
    check(
        &problems[4],
        RATE.spec,
        RATE.path,
        "max_wait",
        DURATION,
        Some("\"a bit\""),
    );
    check(
        &problems[5],
        RATE.spec,
        RATE.path,
        "type",
        TYPES,
        Some("\"leaky_bucket\""),
    );
    check(
        &problems[6],
        "StockRate",
        "resilient.ratelimiter.stock",
        "",
        NO_SECTION,
        None,
    );
    check(
        &problems[7],
        "OrderTimeout",
        "resilient.timeout.order",
        "",
        NO_SECTION,
        None,
    );
    check(
        &problems[8],
        TIMEOUT.spec,
        TIMEOUT.path,
        "duration",
        "must be > 0",
        Some("\"0s\""),
    );
    check(
        &problems[9],
        TIMEOUT.spec,
        TIMEOUT.path,
        "durration",
        "is not a known setting; did you mean `duration`?",
        Some("\"1s\""),
    );
    // `duration` is present (if wrong): the typo does not say it is required.
    assert!(!problems[9].rule.contains("is required"), "{err}");

    let message = err.to_string();
    assert!(
        message.starts_with("invalid resilient configuration (10 problems):"),
        "{message}"
    );
    for problem in problems {
        assert!(message.contains(&format!("\n  - {problem}")), "{message}");
    }
    assert!(err.source().is_none());
}

#[test]
fn several_problems_of_one_section_are_all_reported() {
    let err =
        LIMIT.body_err("enabled = \"maybe\"\nlimit = 0\npolicy = \"block\"\nmax_wait = \"soon\"");
    let keys: Vec<&str> = err.problems().iter().map(|p| p.key.as_str()).collect();
    assert_eq!(keys, ["enabled", "limit", "max_wait"], "{err}");
    check(
        with_key(&err, "max_wait"),
        LIMIT.spec,
        LIMIT.path,
        "max_wait",
        DURATION,
        Some("\"soon\""),
    );

    let err = RATE.body_err("enabled = 2\ntype = \"sliding\"\nlimit_for_period = 0\nmax_wait = 5");
    let keys: Vec<&str> = err.problems().iter().map(|p| p.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "enabled",
            "limit_for_period",
            "limit_refresh_period",
            "max_wait",
            "type"
        ],
        "{err}"
    );
    check(
        with_key(&err, "limit_refresh_period"),
        RATE.spec,
        RATE.path,
        "limit_refresh_period",
        DURATION_REQUIRED,
        None,
    );

    let err = TIMEOUT.body_err("enabled = \"maybe\"\nduration = \"never\"");
    let keys: Vec<&str> = err.problems().iter().map(|p| p.key.as_str()).collect();
    assert_eq!(keys, ["duration", "enabled"], "{err}");
}

// ---------------------------------------------------------------------------
// Valid sections, read back
// ---------------------------------------------------------------------------

#[tokio::test]
async fn full_timeout_section_builds_and_reads_back() -> TestResult {
    let settings = timeout_settings(&config(
        &TIMEOUT.section("enabled = true\nduration = \"2s\""),
    ))
    .await?;
    assert_eq!(
        settings,
        TimeoutSettings {
            enabled: true,
            duration: Duration::from_secs(2),
            idle: None,
        }
    );

    let settings = timeout_settings(&config(
        &TIMEOUT.section("enabled = false\nduration = \"1m 30s\""),
    ))
    .await?;
    assert_eq!(
        settings,
        TimeoutSettings {
            enabled: false,
            duration: Duration::from_secs(90),
            idle: None,
        }
    );
    Ok(())
}

#[tokio::test]
async fn defaults_of_a_minimal_timeout_section() -> TestResult {
    let settings = timeout_settings(&config(&TIMEOUT.section(TIMEOUT_MIN))).await?;
    assert_eq!(
        settings,
        TimeoutSettings {
            enabled: true,
            duration: Duration::from_millis(300),
            idle: None,
        }
    );
    Ok(())
}

#[tokio::test]
async fn full_concurrency_section_builds_and_reads_back() -> TestResult {
    let settings = limit_settings(&config(
        &LIMIT.section("enabled = true\nlimit = 8\npolicy = \"block\"\nmax_wait = \"500ms\""),
    ))
    .await?;
    assert_eq!(
        settings,
        ConcurrencyLimitSettings {
            enabled: true,
            limit: 8,
            policy: Policy::Block {
                max_wait: Some(Duration::from_millis(500)),
            },
        }
    );

    // Block without `max_wait` waits however long it takes; the policy is
    // read without case.
    let settings = limit_settings(&config(
        &LIMIT.section("enabled = false\nlimit = 536870911\npolicy = \"BLOCK\""),
    ))
    .await?;
    assert_eq!(
        settings,
        ConcurrencyLimitSettings {
            enabled: false,
            limit: 536_870_911,
            policy: Policy::Block { max_wait: None },
        }
    );

    let settings =
        limit_settings(&config(&LIMIT.section("limit = 1\npolicy = \"reject\""))).await?;
    assert_eq!(settings.policy, Policy::Reject);
    Ok(())
}

#[tokio::test]
async fn defaults_of_a_minimal_concurrency_section() -> TestResult {
    let settings = limit_settings(&config(&LIMIT.section(LIMIT_MIN))).await?;
    assert_eq!(
        settings,
        ConcurrencyLimitSettings {
            enabled: true,
            limit: 4,
            policy: Policy::Reject,
        }
    );
    Ok(())
}

#[tokio::test]
async fn full_rate_limiter_section_builds_and_reads_back() -> TestResult {
    let settings = rate_settings(&config(&RATE.section(
        "enabled = true\ntype = \"token_bucket\"\nlimit_for_period = 50\nlimit_refresh_period = \"2s\"\nmax_wait = \"250ms\"",
    )))
    .await?;
    assert_eq!(
        settings,
        RateLimiterSettings {
            enabled: true,
            algorithm: Algorithm::TokenBucket,
            limit_for_period: 50,
            limit_refresh_period: Duration::from_secs(2),
            max_wait: Some(Duration::from_millis(250)),
            backend: Backend::Local,
            on_backend_failure: OnBackendFailure::Deny,
            lease: 1,
        }
    );

    let settings = rate_settings(&config(&RATE.section(
        "enabled = false\ntype = \"Fixed_Window\"\nlimit_for_period = 1048575\nlimit_refresh_period = \"1ms\"",
    )))
    .await?;
    assert_eq!(
        settings,
        RateLimiterSettings {
            enabled: false,
            algorithm: Algorithm::FixedWindow,
            limit_for_period: 1_048_575,
            limit_refresh_period: Duration::from_millis(1),
            max_wait: None,
            backend: Backend::Local,
            on_backend_failure: OnBackendFailure::Deny,
            lease: 1,
        }
    );
    Ok(())
}

#[tokio::test]
async fn defaults_of_a_minimal_rate_limiter_section() -> TestResult {
    let settings = rate_settings(&config(&RATE.section(RATE_MIN))).await?;
    assert_eq!(
        settings,
        RateLimiterSettings {
            enabled: true,
            algorithm: Algorithm::FixedWindow,
            limit_for_period: 10,
            limit_refresh_period: Duration::from_secs(1),
            max_wait: None,
            backend: Backend::Local,
            on_backend_failure: OnBackendFailure::Deny,
            lease: 1,
        }
    );
    Ok(())
}

#[tokio::test]
async fn values_given_as_strings_are_accepted() -> TestResult {
    // `config::Environment` yields every value as a string.
    let config = config::Config::builder()
        .set_override("resilient.timeout.pet.enabled", "FALSE")?
        .set_override("resilient.timeout.pet.duration", " 750ms ")?
        .set_override("resilient.concurrency.pet.enabled", "true")?
        .set_override("resilient.concurrency.pet.limit", " 7 ")?
        .set_override("resilient.concurrency.pet.policy", "Block")?
        .set_override("resilient.concurrency.pet.max_wait", "2s")?
        .set_override("resilient.ratelimiter.pet.enabled", "False")?
        .set_override("resilient.ratelimiter.pet.type", "TOKEN_BUCKET")?
        .set_override("resilient.ratelimiter.pet.limit_for_period", "100")?
        .set_override("resilient.ratelimiter.pet.limit_refresh_period", "1m")?
        .set_override("resilient.ratelimiter.pet.max_wait", "100ms")?
        .build()?;

    assert_eq!(
        timeout_settings(&config).await?,
        TimeoutSettings {
            enabled: false,
            duration: Duration::from_millis(750),
            idle: None,
        }
    );
    assert_eq!(
        limit_settings(&config).await?,
        ConcurrencyLimitSettings {
            enabled: true,
            limit: 7,
            policy: Policy::Block {
                max_wait: Some(Duration::from_secs(2)),
            },
        }
    );
    assert_eq!(
        rate_settings(&config).await?,
        RateLimiterSettings {
            enabled: false,
            algorithm: Algorithm::TokenBucket,
            limit_for_period: 100,
            limit_refresh_period: Duration::from_secs(60),
            max_wait: Some(Duration::from_millis(100)),
            backend: Backend::Local,
            on_backend_failure: OnBackendFailure::Deny,
            lease: 1,
        }
    );
    Ok(())
}

#[test]
fn overrides_given_as_strings_are_validated_too() -> TestResult {
    // An environment override replaces a valid file value with a bad string.
    let config = config::Config::builder()
        .add_source(config::File::from_str(
            &format!(
                "{}{}{}",
                TIMEOUT.section(TIMEOUT_MIN),
                LIMIT.section(LIMIT_MIN),
                RATE.section(RATE_MIN)
            ),
            config::FileFormat::Toml,
        ))
        .set_override("resilient.timeout.pet.duration", "0")?
        .set_override("resilient.concurrency.pet.limit", "99999999999999999999")?
        .set_override("resilient.ratelimiter.pet.limit_for_period", "ten")?
        .set_override("resilient.ratelimiter.pet.enabled", "yes")?
        .build()?;
    let Err(err) = resilient_config::build(
        Registry::builder()
            .spec::<PetTimeout>()
            .spec::<PetLimit>()
            .spec::<PetRate>(),
        &config,
    ) else {
        panic!("expected a ConfigError");
    };
    let problems = err.problems();
    assert_eq!(problems.len(), 4, "{err}");
    check(
        &problems[0],
        LIMIT.spec,
        LIMIT.path,
        "limit",
        LIMIT_RANGE,
        Some("\"99999999999999999999\""),
    );
    check(
        &problems[1],
        RATE.spec,
        RATE.path,
        "enabled",
        BOOL,
        Some("\"yes\""),
    );
    check(
        &problems[2],
        RATE.spec,
        RATE.path,
        "limit_for_period",
        PERIOD_RANGE,
        Some("\"ten\""),
    );
    check(
        &problems[3],
        TIMEOUT.spec,
        TIMEOUT.path,
        "duration",
        "must be > 0",
        Some("\"0\""), // as written
    );
    Ok(())
}

#[test]
fn a_zero_max_wait_is_rejected() {
    LIMIT.check(
        &and(LIMIT_MIN, "policy = \"block\"\nmax_wait = \"0s\""),
        "max_wait",
        "must be > 0",
        Some("\"0s\""),
    );
    RATE.check(
        "limit_for_period = 1\nlimit_refresh_period = \"1s\"\nmax_wait = \"0s\"",
        "max_wait",
        "must be > 0",
        Some("\"0s\""),
    );
}

/// Resilience4j's names are answered with this project's, and how they
/// differ: a bulkhead's wait needs the blocking policy here.
#[test]
fn other_libraries_names_are_answered_with_the_difference() {
    LIMIT.check(
        &format!("{LIMIT_MIN}\nmaxWaitDuration = \"100ms\""),
        "maxWaitDuration",
        "is not a known setting; did you mean `max_wait`? `max_wait` applies with `policy = \"block\"` only: Resilience4j's `max_wait_duration` is `policy = \"block\"` with `max_wait`, and its `0` is the default `policy = \"reject\"`",
        Some("\"100ms\""),
    );
    RATE.check(
        &format!("{RATE_MIN}\ntimeout_duration = \"1s\""),
        "timeout_duration",
        "is not a known setting; did you mean `max_wait`? how long a call may wait for a permit, as Resilience4j's `timeout_duration`; its `0`, fail at once, is leaving `max_wait` out",
        Some("\"1s\""),
    );
    TIMEOUT.check(
        &format!("{TIMEOUT_MIN}\ntimeoutDuration = \"1s\""),
        "timeoutDuration",
        "is not a known setting; did you mean `duration`? the same limit under this project's name; it counts from the call's first wait",
        Some("\"1s\""),
    );
}
