//! Circuit breakers under real threads and the real clock: calls from
//! spawned tasks on two workers, resets racing with calls, and waits that a
//! rounding must not skip. Every loop is bounded.

#![allow(clippy::expect_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::*;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use resilient_core::circuit_breaker::State;
use resilient_core::settings::Value;
use resilient_core::{CircuitBreakerHandle, CircuitBreakerSpec, Error};

#[derive(CircuitBreakerSpec)]
#[spec("races.breaker.main")]
struct B;

fn breaker(section: Value) -> CircuitBreakerHandle<B> {
    registry::<B>(section)
        .sync_scope(B::get)
        .expect("configured")
}

/// threshold `threshold` %, window = minimum = `size`, no type: the default.
fn count_based(size: i128, threshold: i128, wait: &str) -> Value {
    table([
        ("failure_rate_threshold", int(threshold)),
        ("minimum_required_calls", int(size)),
        ("wait_duration_in_open_state", s(wait)),
        ("permitted_calls_in_half_open_state", int(1)),
        ("count_based", table([("window_size", int(size))])),
    ])
}

async fn failing(calls: &AtomicU64) -> Result<(), Error> {
    calls.fetch_add(1, Ordering::SeqCst);
    Err(Error::Timeout {
        spec: "dependency",
        after: std::time::Duration::ZERO,
    })
}

/// As a server makes calls: each in its own spawned task on a 2-worker
/// runtime, awaited one at a time. Ten failures in a window of ten at 50 %
/// must open the default window, every time.
#[test]
fn ten_failures_from_spawned_tasks_open_the_default_window() {
    let rt = two_workers();
    let b = breaker(count_based(10, 50, "1h"));
    let calls = Arc::new(AtomicU64::new(0));
    rt.block_on(async {
        for round in 0..200 {
            b.reset();
            for _ in 0..10 {
                let (b, calls) = (b.clone(), Arc::clone(&calls));
                let call = tokio::spawn(async move { b.call(|| failing(&calls)).await });
                assert!(call.await.expect("task").is_err());
            }
            assert_eq!(
                b.state(),
                State::Open,
                "round {round}: window {:?}",
                b.metrics().window
            );
        }
    });
    assert_eq!(calls.load(Ordering::SeqCst), 2000, "every call ran");
    assert_eq!(b.metrics().opened, 200);
}

/// No call leaves the window before `window_size` newer calls: after
/// thousands of successes from 64 concurrent tasks, 256 failures made
/// concurrently by 64 tasks fill a window of 256 entirely, so a 100 %
/// threshold opens it, once.
#[test]
fn concurrent_failures_all_stay_in_the_window() {
    let rt = two_workers();
    for kind in ["ring_buffer", "default"] {
        let mut section = count_based(256, 100, "1h");
        if kind != "default" {
            section = with(section, "type", s(kind));
        }
        let b = breaker(section);
        rt.block_on(async {
            for round in 0..20 {
                b.reset();
                for phase_fails in [false, true] {
                    let tasks: Vec<_> = (0..64)
                        .map(|_| {
                            let b = b.clone();
                            tokio::spawn(async move {
                                for _ in 0..if phase_fails { 4 } else { 50 } {
                                    let p = b.acquire().expect("closed");
                                    if phase_fails {
                                        p.failure();
                                    } else {
                                        p.success();
                                    }
                                    tokio::task::yield_now().await;
                                }
                            })
                        })
                        .collect();
                    for t in tasks {
                        t.await.expect("task");
                    }
                }
                assert_eq!(b.state(), State::Open, "{kind}, round {round}");
            }
            assert_eq!(b.metrics().opened, 20, "{kind}");
        });
    }
}

/// A success that finds the window full of successes takes no slot. Racing
/// with failures from other threads, that must neither lose a failure nor
/// keep one longer than the window's length of newer calls.
#[test]
fn skipped_successes_neither_lose_nor_keep_failures() {
    let rt = two_workers();
    let b = breaker(count_based(256, 100, "1h"));
    let counts = |b: &CircuitBreakerHandle<B>| {
        let w = b.metrics().window;
        (w.total, w.failures)
    };
    let succeed = |b: &CircuitBreakerHandle<B>, n: usize| {
        for _ in 0..n {
            b.acquire().expect("closed").success();
        }
    };
    rt.block_on(async {
        for round in 0..50 {
            b.reset();
            succeed(&b, 256);
            assert_eq!(counts(&b), (256, 0), "round {round}: full of successes");
            // 64 tasks on two workers, each: a success, a failure, a success.
            let tasks: Vec<_> = (0..64)
                .map(|_| {
                    let b = b.clone();
                    tokio::spawn(async move {
                        for fail in [false, true, false] {
                            let p = b.acquire().expect("closed");
                            tokio::task::yield_now().await;
                            if fail {
                                p.failure();
                            } else {
                                p.success();
                            }
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.expect("task");
            }
            assert_eq!(
                counts(&b),
                (256, 64),
                "round {round}: every failure counted"
            );
            // At most 192 calls were recorded since the window was clean: 63
            // more keep every failure among the last 256.
            succeed(&b, 63);
            assert_eq!(
                counts(&b),
                (256, 64),
                "round {round}: no failure left early"
            );
            // 256 newer calls in all: every failure has left.
            succeed(&b, 193);
            assert_eq!(counts(&b), (256, 0), "round {round}: no failure stays");
        }
    });
}

/// A permit taken while closed belongs to that closed period: after a
/// reset it counts nothing (minimum 1, so one failure would reopen).
#[test]
fn a_permit_from_before_a_reset_counts_nothing() {
    let b = breaker(count_based(1, 100, "1h"));
    let early = b.acquire().expect("closed");
    b.reset();
    early.failure();
    assert_eq!(b.state(), State::Closed);
    assert_eq!(b.metrics().window.total, 0);
    assert_eq!(b.metrics().opened, 0);
    // Nor after a whole open/half-open/closed cycle.
    let early = b.acquire().expect("closed");
    b.acquire().expect("closed").failure();
    assert_eq!(b.state(), State::Open);
    b.reset();
    early.failure();
    assert_eq!(b.state(), State::Closed);
    assert_eq!(b.metrics().opened, 1);
}

/// On the real clock, a call right after the breaker opened (often in the
/// same microsecond) is rejected: the open wait (1 h) is never skipped.
#[test]
fn the_open_wait_is_never_skipped_on_the_real_clock() {
    let b = breaker(count_based(1, 100, "1h"));
    let mut admitted = 0;
    for _ in 0..200_000 {
        b.reset();
        b.acquire().expect("closed").failure();
        if let Some(p) = b.try_acquire() {
            admitted += 1;
            p.ignore();
        }
    }
    assert_eq!(admitted, 0, "calls admitted by an open breaker");
    assert_eq!(b.metrics().opened, 200_000);
}

/// The same for `max_wait_in_half_open` (1 h): the first probe's period is
/// not cut short, so no second probe is admitted.
#[test]
fn the_half_open_wait_is_never_skipped_on_the_real_clock() {
    let section = with(count_based(1, 100, "0s"), "max_wait_in_half_open", s("1h"));
    let b = breaker(section);
    let mut second_probes = 0;
    for _ in 0..200_000 {
        b.reset();
        b.acquire().expect("closed").failure();
        let first = b.acquire().expect("wait is 0s: the first probe");
        if let Some(p) = b.try_acquire() {
            second_probes += 1;
            p.ignore();
        }
        first.ignore();
    }
    assert_eq!(
        second_probes, 0,
        "probes beyond permitted_calls_in_half_open_state = 1"
    );
}

/// Resets racing with calls on two workers: every snapshot has at most as
/// many failures (and slow calls) as calls, for every window type.
#[test]
fn snapshots_during_resets_never_exceed_one_hundred_percent() {
    let rt = two_workers();
    for kind in [
        "ring_buffer",
        "striped_approx",
        "fixed_window",
        "time_based",
    ] {
        let section = if kind == "time_based" {
            table([
                ("type", s(kind)),
                ("failure_rate_threshold", int(100)),
                ("minimum_required_calls", int(1_000_000)),
                ("wait_duration_in_open_state", s("1h")),
                ("permitted_calls_in_half_open_state", int(1)),
                ("time_based", table([("window_duration", s("1h"))])),
            ])
        } else {
            with(count_based(64, 100, "1h"), "type", s(kind))
        };
        let b = breaker(section);
        rt.block_on(async {
            let callers: Vec<_> = (0..4)
                .map(|i| {
                    let b = b.clone();
                    tokio::spawn(async move {
                        for n in 0..20_000u32 {
                            if let Some(p) = b.try_acquire() {
                                if (n + i) % 3 == 0 {
                                    p.success();
                                } else {
                                    p.failure();
                                }
                            }
                            if n % 64 == 0 {
                                tokio::task::yield_now().await;
                            }
                        }
                    })
                })
                .collect();
            let resetter = {
                let b = b.clone();
                tokio::spawn(async move {
                    let mut worst = 0;
                    for n in 0..20_000u32 {
                        if n % 8 == 0 {
                            b.reset();
                        }
                        let m = b.metrics();
                        assert!(
                            m.window.failures <= m.window.total && m.window.slow <= m.window.total,
                            "{kind}: {:?}",
                            m.window
                        );
                        worst = worst.max(m.failure_rate.unwrap_or(0));
                        if n % 64 == 0 {
                            tokio::task::yield_now().await;
                        }
                    }
                    worst
                })
            };
            for c in callers {
                c.await.expect("caller");
            }
            let worst = resetter.await.expect("resetter");
            assert!(worst <= 100, "{kind}: a failure rate of {worst} %");
        });
    }
}
