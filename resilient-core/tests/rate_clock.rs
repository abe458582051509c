//! The clock a rate limiter reads: tokio's, for a limiter built while
//! tokio's clock is paused (exact under `advance`); the machine's
//! time-stamp counter otherwise, which keeps the limit on real threads and
//! warns once when it meets a paused tokio clock it cannot follow. The
//! warning is once per process: only one test of this binary may warn
//! (`rate_clock_reserve.rs` has the reservations' warning, and the lack of
//! one on a clock that is not paused).

mod support;
use support::*;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use resilient_core::settings::Value;
use resilient_core::{Error, RateLimiterSpec, Registry};
use tracing::Level;

type TestResult = Result<(), Box<dyn std::error::Error>>;

#[derive(RateLimiterSpec)]
#[spec("rate_clock.paused")]
struct Paused;

#[derive(RateLimiterSpec)]
#[spec("rate_clock.built_before")]
struct BuiltBefore;

#[derive(RateLimiterSpec)]
#[spec("rate_clock.threads")]
struct Threads;

#[derive(RateLimiterSpec)]
#[spec("rate_clock.short_path")]
struct ShortPath;

#[derive(RateLimiterSpec)]
#[spec("rate_clock.general_path")]
struct GeneralPath;

fn limit(kind: &str, n: i128, period: &str) -> Value {
    table([
        ("type", s(kind)),
        ("limit_for_period", int(n)),
        ("limit_refresh_period", s(period)),
    ])
}

fn retry_after(out: Result<(), Error>) -> Option<Duration> {
    match out {
        Err(Error::RateLimitExceeded { retry_after, .. }) => Some(retry_after),
        _ => None,
    }
}

#[tokio::test(start_paused = true)]
async fn a_limiter_built_on_a_paused_clock_follows_it_exactly() -> TestResult {
    for kind in ["fixed_window", "token_bucket"] {
        let r: Registry = registry::<Paused>(limit(kind, 2, "1s"));
        let limiter = r.sync_scope(Paused::get)?;
        assert!(limiter.try_acquire().is_ok() && limiter.try_acquire().is_ok());
        let waited = if kind == "fixed_window" {
            Duration::from_secs(1)
        } else {
            Duration::from_millis(500)
        };
        assert_eq!(retry_after(limiter.try_acquire()), Some(waited), "{kind}");
        tokio::time::advance(waited - Duration::from_nanos(1)).await;
        assert!(limiter.try_acquire().is_err(), "{kind}: 1 ns early");
        tokio::time::advance(Duration::from_nanos(1)).await;
        assert!(limiter.try_acquire().is_ok(), "{kind}: due");
    }
    Ok(())
}

/// A handle's `try_acquire` takes a short path; `acquire` with no
/// `max_wait` the general one. Two limiters of the same settings, asked at
/// the same paused instants (bursts, then steps of 0 to 3 periods with
/// reserved nothing), give the same answers and the same `retry_after`.
#[tokio::test(start_paused = true)]
async fn the_short_path_of_try_acquire_answers_as_the_general_path() -> TestResult {
    use futures_util::FutureExt;
    for kind in ["fixed_window", "token_bucket"] {
        let settings = limit(kind, 3, "100ms");
        let short = registry::<ShortPath>(settings.clone());
        let general = registry::<GeneralPath>(settings);
        let (a, b) = (
            short.sync_scope(ShortPath::get)?,
            general.sync_scope(GeneralPath::get)?,
        );
        let mut seed = 7_u64;
        let (mut admitted, mut refused) = (0, 0);
        for step in 0..2000 {
            // splitmix64: the steps are the same on every run.
            seed = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = seed;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            if z.is_multiple_of(3) {
                tokio::time::advance(Duration::from_micros(z % 300_000)).await;
            }
            let fast = a.try_acquire();
            let slow = b
                .acquire()
                .now_or_never()
                .ok_or("no wait without max_wait")?;
            let ok = fast.is_ok();
            assert_eq!(ok, slow.is_ok(), "{kind}, step {step}");
            assert_eq!(retry_after(fast), retry_after(slow), "{kind}, step {step}");
            if ok {
                admitted += 1;
            } else {
                refused += 1;
            }
        }
        assert!(
            admitted > 100 && refused > 100,
            "{kind}: {admitted} / {refused}"
        );
    }
    Ok(())
}

#[test]
fn a_limiter_built_before_the_clock_was_paused_warns_once() -> TestResult {
    // Built outside any runtime: it reads the machine's clock.
    let r: Registry = registry::<BuiltBefore>(limit("token_bucket", 1, "1h"));
    let capture = support::capture::Capture::default();
    let _subscriber = tracing::subscriber::set_default(capture.clone());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()?;
    runtime.block_on(async {
        let limiter = r.sync_scope(BuiltBefore::get)?;
        assert!(limiter.try_acquire().is_ok());
        assert!(limiter.try_acquire().is_err());
        // Nothing apart yet: no warning.
        let warnings = || capture.at("resilient::rate_limiter", Level::WARN);
        assert!(warnings().is_empty(), "{:?}", warnings());
        // tokio's clock moves two hours; the machine's does not: still no
        // permit, and one warning naming the fix.
        tokio::time::advance(Duration::from_secs(7200)).await;
        assert!(limiter.try_acquire().is_err());
        assert!(limiter.try_acquire().is_err());
        let lines = warnings();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_eq!(
            lines[0].fields.get("spec").map(String::as_str),
            Some("BuiltBefore")
        );
        assert!(
            lines[0].message.contains("start_paused"),
            "{}",
            lines[0].message
        );
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}

/// 64 tasks on two workers take permits as fast as they can for 300 ms of
/// real time: the machine's clock keeps each algorithm within its limit,
/// and lets through at least the first burst.
#[test]
fn on_the_machines_clock_many_threads_never_pass_the_limit() -> TestResult {
    for kind in ["fixed_window", "token_bucket"] {
        let r: Registry = registry::<Threads>(limit(kind, 50, "100ms"));
        let built = std::time::Instant::now();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()?;
        let admitted = Arc::new(AtomicU64::new(0));
        let limiter = r.sync_scope(Threads::get)?;
        runtime.block_on(async {
            let mut tasks = Vec::new();
            for _ in 0..64 {
                let (limiter, admitted) = (limiter.clone(), Arc::clone(&admitted));
                tasks.push(tokio::spawn(async move {
                    let start = std::time::Instant::now();
                    while start.elapsed() < Duration::from_millis(300) {
                        if limiter.try_acquire().is_ok() {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                        tokio::task::yield_now().await;
                    }
                }));
            }
            for task in tasks {
                task.await?;
            }
            Ok::<_, tokio::task::JoinError>(())
        })?;
        let elapsed = built.elapsed();
        let admitted = admitted.load(Ordering::Relaxed);
        // A window: 50 in each window begun since the limiter was built. A
        // bucket: its burst of 50, then one every 2 ms.
        let most = if kind == "fixed_window" {
            50 * (u64::try_from(elapsed.as_millis() / 100)? + 1)
        } else {
            50 + u64::try_from(elapsed.as_micros() / 2000)?
        };
        assert!(
            (50..=most).contains(&admitted),
            "{kind}: {admitted} admitted in {elapsed:?} (at most {most})"
        );
    }
    Ok(())
}

#[derive(RateLimiterSpec)]
#[spec("rate_clock.boundaries")]
struct Boundaries;

/// Two threads take permits of a fixed window far above their rate (a
/// million per millisecond) across some 400 window boundaries: none is
/// refused. A call that read the clock just before the other thread opened
/// the next window is counted in it (it was answered "not yet due").
#[test]
fn a_window_opened_by_another_thread_gives_its_permits() -> TestResult {
    let r: Registry = registry::<Boundaries>(limit("fixed_window", 1_000_000, "1ms"));
    let limiter = r.sync_scope(Boundaries::get)?;
    let refused = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let (limiter, refused) = (limiter.clone(), Arc::clone(&refused));
            std::thread::spawn(move || {
                let start = std::time::Instant::now();
                let mut calls = 0u64;
                while start.elapsed() < Duration::from_millis(400) {
                    if limiter.try_acquire().is_err() {
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                    calls += 1;
                }
                calls
            })
        })
        .collect();
    let mut calls = 0;
    for t in threads {
        calls += t.join().map_err(|_| "a thread panicked")?;
    }
    assert!(calls > 100_000, "{calls} calls");
    assert_eq!(refused.load(Ordering::Relaxed), 0, "of {calls} calls");
    Ok(())
}
