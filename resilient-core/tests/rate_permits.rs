//! A rate limiter kept in the process shows its permits in the snapshot:
//! what a call could take now, for both algorithms, refilled as time
//! passes; a limiter whose permits are decided elsewhere (disabled) shows
//! none. A binary of its own: it follows tokio's paused clock.

#![allow(clippy::expect_used, clippy::unwrap_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::*;

use std::time::Duration;

use resilient_core::rate_limiter::Permits;
use resilient_core::{RateLimiterSpec, Registry, Spec};

#[derive(RateLimiterSpec)]
#[spec("rate_permits.window")]
struct Window;

#[derive(RateLimiterSpec)]
#[spec("rate_permits.bucket")]
struct Bucket;

fn permits<S: Spec>(r: &Registry) -> Option<Permits> {
    r.snapshot()
        .specs
        .into_iter()
        .find(|s| s.path == S::PATH)
        .and_then(|s| s.status::<Permits>().copied())
}

#[tokio::test(start_paused = true)]
async fn each_algorithm_shows_the_permits_a_call_could_take_now() {
    resilient_core::rate_limiter::use_tokio_clock();
    let r = build(
        Registry::builder().spec::<Window>().spec::<Bucket>(),
        vec![
            (
                Window::PATH,
                table([
                    ("type", s("fixed_window")),
                    ("limit_for_period", int(5)),
                    ("limit_refresh_period", s("1s")),
                ]),
            ),
            (
                Bucket::PATH,
                table([
                    ("type", s("token_bucket")),
                    ("limit_for_period", int(4)),
                    ("limit_refresh_period", s("1s")),
                ]),
            ),
        ],
    );
    let window = r.sync_scope(Window::get).unwrap();
    let bucket = r.sync_scope(Bucket::get).unwrap();
    assert_eq!(permits::<Window>(&r).unwrap().available, 5);
    assert_eq!(permits::<Bucket>(&r).unwrap().available, 4);
    for _ in 0..3 {
        window.try_acquire().unwrap();
    }
    for _ in 0..4 {
        bucket.try_acquire().unwrap();
    }
    let w = permits::<Window>(&r).unwrap();
    assert_eq!((w.available, w.limit_for_period), (2, 5));
    assert_eq!(permits::<Bucket>(&r).unwrap().available, 0);
    assert!(bucket.try_acquire().is_err(), "none, as the snapshot said");
    tokio::time::advance(Duration::from_millis(250)).await;
    assert_eq!(permits::<Bucket>(&r).unwrap().available, 1, "one came back");
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(permits::<Window>(&r).unwrap().available, 5, "a new window");
    assert_eq!(permits::<Bucket>(&r).unwrap().available, 4, "full again");
    // Disabled: every call goes through, no permit is counted.
    let off = registry::<Window>(table([
        ("enabled", boolean(false)),
        ("limit_for_period", int(5)),
        ("limit_refresh_period", s("1s")),
    ]));
    assert_eq!(permits::<Window>(&off), None);
}
