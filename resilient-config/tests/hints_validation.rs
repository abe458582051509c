//! Startup validation of `max_hinted_delay`, the cap on a wait that a
//! failure asked for (a delay hint such as `Retry-After`).

mod support;
use support::*;

use std::time::Duration;

use resilient_core::{Registry, RetrySpec};

/// The spec every test here configures.
#[derive(RetrySpec)]
#[spec("resilient.retry.hinted")]
pub struct HintedRetry;

const MINIMAL: &str = "[resilient.retry.hinted]\ndelay = \"100ms\"\nattempts = 2";

fn err(extra: &str) -> resilient_config::ConfigError {
    build_err(
        Registry::builder().spec::<HintedRetry>(),
        &format!("{MINIMAL}\n{extra}"),
    )
}

#[tokio::test]
async fn max_hinted_delay_is_read_as_a_duration_and_absent_by_default() -> TestResult {
    for (extra, expected) in [
        ("", None),
        ("max_hinted_delay = \"30s\"", Some(Duration::from_secs(30))),
    ] {
        let registry = resilient_config::build(
            Registry::builder().spec::<HintedRetry>(),
            &config(&format!("{MINIMAL}\n{extra}")),
        )?;
        let settings = registry
            .scope(async { HintedRetry::get().map(|h| h.settings().clone()) })
            .await?;
        assert_eq!(settings.max_hinted_delay, expected, "{extra}");
    }
    Ok(())
}

#[test]
fn max_hinted_delay_of_zero_is_refused_with_the_reason() {
    let err = err("max_hinted_delay = \"0s\"");
    check(
        only(&err),
        "HintedRetry",
        "resilient.retry.hinted",
        "max_hinted_delay",
        "must be > 0 (a zero cap would retry at once whatever the failure asked for; \
         leave it out to cap hints by `backoff.delay_max` only)",
        Some("\"0s\""),
    );
}

#[test]
fn max_hinted_delay_must_be_a_duration_with_a_unit() {
    let err = err("max_hinted_delay = \"soon\"");
    check(
        only(&err),
        "HintedRetry",
        "resilient.retry.hinted",
        "max_hinted_delay",
        DURATION,
        Some("\"soon\""),
    );
}
