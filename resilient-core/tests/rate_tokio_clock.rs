//! `rate_limiter::use_tokio_clock()`: a registry that tests share, built
//! where tokio's clock is not paused (outside any runtime here), still
//! follows a paused clock exactly. A binary of its own: the switch holds
//! for the whole process.

mod support;
use support::*;

use std::time::Duration;

use resilient_core::{Error, RateLimiterSpec, Registry};

type TestResult = Result<(), Box<dyn std::error::Error>>;

#[derive(RateLimiterSpec)]
#[spec("rate_clock.shared")]
struct Shared;

#[test]
fn a_registry_built_after_use_tokio_clock_follows_a_paused_clock() -> TestResult {
    resilient_core::rate_limiter::use_tokio_clock();
    let r: Registry = registry::<Shared>(table([
        ("type", s("fixed_window")),
        ("limit_for_period", int(1)),
        ("limit_refresh_period", s("1h")),
    ]));
    let paused = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()?;
    paused.block_on(async {
        let limiter = r.sync_scope(Shared::get)?;
        assert!(limiter.try_acquire().is_ok());
        assert!(limiter.try_acquire().is_err());
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert!(
            limiter.try_acquire().is_ok(),
            "advance refreshed the window"
        );
        Ok::<_, Error>(())
    })?;
    Ok(())
}
