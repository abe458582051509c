//! The rate limiter's warning for a paused tokio clock it does not read,
//! on its reservations' path, and never on a clock that is not paused (nor
//! when two threads look at once): one test, since the warning is once per
//! process.

mod support;
use support::*;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use resilient_core::settings::Value;
use resilient_core::{Error, RateLimiterSpec, Registry};
use tracing::Level;

type TestResult = Result<(), Box<dyn std::error::Error>>;

#[derive(RateLimiterSpec)]
#[spec("rate_clock.refusing")]
struct Refusing;

#[derive(RateLimiterSpec)]
#[spec("rate_clock.reserving")]
struct Reserving;

#[derive(RateLimiterSpec)]
#[spec("rate_clock.racing")]
struct Racing;

fn limit(n: i128, period: &str) -> Value {
    table([
        ("type", s("token_bucket")),
        ("limit_for_period", int(n)),
        ("limit_refresh_period", s(period)),
    ])
}

fn current_thread() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
}

#[test]
fn no_warning_on_a_running_clock_and_one_for_reservations_on_a_paused_one() -> TestResult {
    let capture = support::capture::Capture::default();
    let _subscriber = tracing::subscriber::set_default(capture.clone());
    let warnings = || capture.at("resilient::rate_limiter", Level::WARN);

    // A running clock: 300 refusals and reservations over 300 ms, on a
    // current-thread runtime whose clock is not paused; each look compares
    // what both clocks moved by. No warning.
    let running = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()?;
    // One permit an hour: the refusals do not depend on how fast a loaded
    // machine runs the 300 sleeps (with one a second, a slow run let a
    // refilled permit through).
    let r: Registry = registry::<Refusing>(with(limit(1, "1h"), "max_wait", s("1ms")));
    running.block_on(async {
        let limiter = r.sync_scope(Refusing::get)?;
        let mut refused = 0;
        for _ in 0..300 {
            if limiter.try_acquire().is_err() {
                refused += 1;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert!(refused >= 299, "{refused}");
        Ok::<_, Error>(())
    })?;
    assert!(warnings().is_empty(), "{:?}", warnings());

    // Two threads refused at the same moment after a quiet 1.5 ms, 1000
    // times: their looks must not mix one's counter with the other's
    // tokio reading. A warning on the other thread would not reach this
    // thread's subscriber, but it would spend the process's one warning,
    // and the reservations below would find none left to give.
    let r: Registry = registry::<Racing>(limit(1, "1h"));
    let limiter = r.sync_scope(Racing::get)?;
    let _ = limiter.try_acquire();
    let round = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let other = {
        let (limiter, round, stop) = (limiter.clone(), Arc::clone(&round), Arc::clone(&stop));
        // Each thread in a current-thread runtime of its own (its clock
        // running): only there does a refusal look at the clocks.
        std::thread::spawn(move || -> std::io::Result<()> {
            current_thread()?.block_on(async {
                let mut seen = 0;
                while !stop.load(Ordering::Relaxed) {
                    let now = round.load(Ordering::Acquire);
                    if now != seen {
                        seen = now;
                        assert!(limiter.try_acquire().is_err());
                    }
                    std::hint::spin_loop();
                }
            });
            Ok(())
        })
    };
    current_thread()?.block_on(async {
        for i in 1..=1000 {
            std::thread::sleep(Duration::from_micros(1500));
            round.store(i, Ordering::Release);
            assert!(limiter.try_acquire().is_err());
        }
    });
    stop.store(true, Ordering::Relaxed);
    other.join().map_err(|_| "the other thread panicked")??;
    assert!(warnings().is_empty(), "{:?}", warnings());

    // Built outside any runtime, used under a paused clock with `max_wait`:
    // the first call takes the permit, the second reserves one 100 ms on,
    // which tokio's sleep passes while the counter does not move; the third
    // reservation finds the clocks apart.
    let r: Registry = registry::<Reserving>(with(limit(1, "100ms"), "max_wait", s("1h")));
    let paused = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()?;
    paused.block_on(async {
        let limiter = r.sync_scope(Reserving::get)?;
        for _ in 0..3 {
            limiter.acquire().await?;
        }
        Ok::<_, Error>(())
    })?;
    let lines = warnings();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(
        lines[0].fields.get("spec").map(String::as_str),
        Some("Reserving")
    );
    assert!(
        lines[0].message.contains("use_tokio_clock"),
        "{}",
        lines[0].message
    );
    Ok(())
}
