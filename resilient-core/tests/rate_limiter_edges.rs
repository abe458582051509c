//! Rate limiter reservations and extreme settings on tokio's paused clock:
//! when each call got its permit, which ones failed at once, and that no
//! accepted setting panics.

#![allow(clippy::expect_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::*;

use std::time::Duration;

use resilient_core::{Error, RateLimiterHandle, RateLimiterSpec};
use tokio::time::Instant;

#[derive(RateLimiterSpec)]
#[spec("edges.rate.main")]
struct Rate;

fn limiter(kind: &str, limit: i128, period: &str, max_wait: &str) -> RateLimiterHandle<Rate> {
    registry::<Rate>(table([
        ("type", s(kind)),
        ("limit_for_period", int(limit)),
        ("limit_refresh_period", s(period)),
        ("max_wait", s(max_wait)),
    ]))
    .sync_scope(Rate::get)
    .expect("configured")
}

/// `n` callers that all ask at once; for each, whether it got a permit and
/// how long it took, in call order.
async fn callers(h: &RateLimiterHandle<Rate>, n: usize) -> Vec<(bool, Duration)> {
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let h = h.clone();
            tokio::spawn(async move {
                let start = Instant::now();
                let ok = h.acquire().await.is_ok();
                (ok, start.elapsed())
            })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.expect("task"));
    }
    out
}

/// One permit a second and `max_wait = 1s`: of five callers at once, the
/// first runs now, the second reserves the next permit and runs after 1 s,
/// and the three that could not be served within 1 s fail at once instead of
/// sleeping first.
#[tokio::test(start_paused = true)]
async fn callers_that_cannot_be_served_within_max_wait_fail_at_once() {
    for kind in ["fixed_window", "token_bucket"] {
        let h = limiter(kind, 1, "1s", "1s");
        let out = callers(&h, 5).await;
        let ms = |d: Duration| d.as_millis();
        let served: Vec<_> = out.iter().filter(|o| o.0).map(|o| ms(o.1)).collect();
        let failed: Vec<_> = out.iter().filter(|o| !o.0).map(|o| ms(o.1)).collect();
        assert_eq!(served, [0, 1000], "{kind}: permits at 0 and 1 s");
        assert_eq!(failed, [0, 0, 0], "{kind}: the rest fail without waiting");
    }
}

/// Reservations fill the windows that follow, back to back: two permits a
/// second, `max_wait = 3s`, eight callers at once run at 0, 0, 1, 1, 2, 2,
/// 3 and 3 s; the ninth would run at 4 s and fails at once.
#[tokio::test(start_paused = true)]
async fn fixed_window_reservations_fill_the_following_windows() {
    let h = limiter("fixed_window", 2, "1s", "3s");
    let out = callers(&h, 9).await;
    let times: Vec<_> = out.iter().map(|&(ok, d)| (ok, d.as_millis())).collect();
    assert_eq!(
        times,
        [
            (true, 0),
            (true, 0),
            (true, 1000),
            (true, 1000),
            (true, 2000),
            (true, 2000),
            (true, 3000),
            (true, 3000),
            (false, 0)
        ]
    );
    // Now at 3 s, inside the window [3 s, 4 s) that two reservations took.
    assert!(matches!(
        h.try_acquire(),
        Err(Error::RateLimitExceeded { retry_after, .. }) if retry_after == Duration::from_secs(1)
    ));
}

/// A token bucket call cancelled while it waits for its reserved permit
/// gives the permit back, when no later call reserved one meanwhile.
#[tokio::test(start_paused = true)]
async fn a_cancelled_token_bucket_reservation_gives_its_permit_back() {
    let h = limiter("token_bucket", 1, "1s", "1s");
    h.acquire().await.expect("the burst");
    let waiting = tokio::time::timeout(Duration::from_millis(100), h.acquire()).await;
    assert!(
        waiting.is_err(),
        "still waiting for its permit when cancelled"
    );
    tokio::time::advance(Duration::from_millis(900)).await;
    h.try_acquire()
        .expect("the permit the cancelled call reserved");
    assert!(h.try_acquire().is_err(), "and only that one");
}

/// A fixed window call cancelled while it waits keeps its permit spent (the
/// window's count cannot tell which reservation left).
#[tokio::test(start_paused = true)]
async fn a_cancelled_fixed_window_reservation_stays_spent() {
    let h = limiter("fixed_window", 1, "1s", "1s");
    h.acquire().await.expect("the window's permit");
    let waiting = tokio::time::timeout(Duration::from_millis(100), h.acquire()).await;
    assert!(waiting.is_err());
    tokio::time::advance(Duration::from_millis(900)).await;
    assert!(
        h.try_acquire().is_err(),
        "the next window's permit was reserved"
    );
    tokio::time::advance(Duration::from_secs(1)).await;
    h.try_acquire().expect("the window after");
}

/// The largest `max_wait` the duration syntax accepts must not overflow an
/// instant when a call waits.
#[tokio::test(start_paused = true)]
async fn a_huge_max_wait_never_panics() {
    for kind in ["fixed_window", "token_bucket"] {
        let h = limiter(kind, 1, "1s", "300000000000y");
        h.acquire().await.expect("first");
        let start = Instant::now();
        h.acquire().await.expect("waits for the next permit");
        assert_eq!(start.elapsed(), Duration::from_secs(1), "{kind}");
    }
}

/// A fixed window due beyond what u64 nanoseconds hold (584 years): the
/// wait is exact, so a `max_wait` shorter than it rejects with the true
/// wait, as one past u64 nanoseconds does too.
#[tokio::test(start_paused = true)]
async fn a_window_due_past_584_years_is_weighed_exactly() {
    let thousand_years = Duration::from_secs(1000 * 31_557_600);
    for max_wait in ["500y", "600y"] {
        let h = limiter("fixed_window", 1, "1000y", max_wait);
        h.acquire().await.expect("first");
        match h.acquire().await {
            Err(Error::RateLimitExceeded { retry_after, .. }) => {
                assert_eq!(retry_after, thousand_years, "max_wait {max_wait}");
            }
            other => panic!("max_wait {max_wait}: {other:?}"),
        }
    }
}
