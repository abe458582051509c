//! A rate limiter layer's reservation: the permit reserved in `call` is
//! due at a fixed instant, whenever its response future is first polled.

#![allow(clippy::expect_used, clippy::unwrap_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::*;

use std::time::Duration;

use resilient_core::layer::Layered;
use resilient_core::{BoxError, RateLimiterSpec};
use tokio::time::Instant;
use tower::{service_fn, Layer, Service, ServiceExt};

#[derive(RateLimiterSpec)]
#[spec("reservations.rate")]
struct Rate;

fn echo() -> impl Service<u64, Response = u64, Error = BoxError, Future = impl Send> + Clone {
    service_fn(|x: u64| async move { Ok::<_, BoxError>(x) })
}

/// README: "a permit taken in `call`; one reserved within `max_wait` is
/// waited for inside the response future". The wait ends when the permit
/// is due, counted from `call`: a future first polled late (a `Buffer`'s
/// caller, a `join_all`, a spawned task that starts late) does not wait a
/// second full period.
#[tokio::test(start_paused = true)]
async fn a_reserved_permit_is_not_waited_for_again_when_its_future_is_first_polled_late() {
    for algorithm in ["token_bucket", "fixed_window"] {
        let r = registry::<Rate>(table([
            ("type", s(algorithm)),
            ("limit_for_period", int(1)),
            ("limit_refresh_period", s("1s")),
            ("max_wait", s("1s")),
        ]));
        let _registry = r.set_default();
        let mut svc = Rate::layer().layer(echo());
        svc.ready().await.unwrap().call(1).await.unwrap();
        let start = Instant::now();
        // Reserved now, due in 1s.
        let response = svc.ready().await.unwrap().call(2);
        // The caller is busy for that second; the permit is due.
        tokio::time::advance(Duration::from_secs(1)).await;
        response.await.unwrap();
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(1),
            "{algorithm}: the permit was due 1s after `call`"
        );
    }
}
