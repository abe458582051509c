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

#[derive(RateLimiterSpec)]
#[spec("rate_clock.shared_short")]
struct SharedShort;

#[derive(RateLimiterSpec)]
#[spec("rate_clock.shared_general")]
struct SharedGeneral;

/// A registry shared by two paused tests, each on a runtime of its own:
/// the second's clock starts an hour behind where the first advanced to.
/// The limiter's time never goes back (it reads the furthest either
/// reached), so the second is told the rest of the first's window, not an
/// hour and a second, and the handle's short path agrees with the general
/// path.
#[test]
fn a_shared_registry_s_time_never_goes_back_between_paused_runtimes() -> TestResult {
    use futures_util::FutureExt;
    resilient_core::rate_limiter::use_tokio_clock();
    let settings = table([
        ("type", s("fixed_window")),
        ("limit_for_period", int(1)),
        ("limit_refresh_period", s("1s")),
    ]);
    let short: Registry = registry::<SharedShort>(settings.clone());
    let general: Registry = registry::<SharedGeneral>(settings);
    let paused = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
    };
    paused()?.block_on(async {
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert!(short.sync_scope(SharedShort::get)?.try_acquire().is_ok());
        let general = general.sync_scope(SharedGeneral::get)?;
        assert!(general.acquire().now_or_never().ok_or("no wait")?.is_ok());
        Ok::<_, Box<dyn std::error::Error>>(())
    })?;
    paused()?.block_on(async {
        let retry_after = |out: Result<(), Error>| match out {
            Err(Error::RateLimitExceeded { retry_after, .. }) => Some(retry_after),
            _ => None,
        };
        let fast = retry_after(short.sync_scope(SharedShort::get)?.try_acquire());
        let general = general.sync_scope(SharedGeneral::get)?;
        let slow = retry_after(general.acquire().now_or_never().ok_or("no wait")?);
        assert_eq!(fast.is_some(), slow.is_some());
        for wait in [fast, slow] {
            let wait = wait.ok_or("the first test's window is still running")?;
            assert!(wait <= Duration::from_secs(1), "{wait:?}");
        }
        Ok::<_, Box<dyn std::error::Error>>(())
    })?;
    Ok(())
}
