//! A handle's `call` runs nothing until its future is polled: a future made
//! and dropped unpolled (a `select!` branch not taken) never calls the
//! closure, for every kind of handle, and leaves no permit or count behind.

mod support;
use support::*;

use std::sync::atomic::{AtomicU32, Ordering};

use resilient_core::{
    CircuitBreakerSpec, ConcurrencyLimitSpec, Error, RateLimiterSpec, Registry, RetrySpec,
    TimeoutSpec,
};

#[derive(RetrySpec)]
#[spec("lazy.retry")]
struct R;
#[derive(CircuitBreakerSpec)]
#[spec("lazy.breaker")]
struct B;
#[derive(TimeoutSpec)]
#[spec("lazy.timeout")]
struct T;
#[derive(ConcurrencyLimitSpec)]
#[spec("lazy.limit")]
struct C;
#[derive(RateLimiterSpec)]
#[spec("lazy.rate")]
struct L;

#[derive(Debug, thiserror::Error)]
enum TestError {
    #[error(transparent)]
    Resilience(#[from] Error),
}

fn registry() -> Registry {
    build(
        Registry::builder()
            .spec::<R>()
            .spec::<B>()
            .spec::<T>()
            .spec::<C>()
            .spec::<L>(),
        vec![
            (
                "lazy.retry",
                table([("delay", s("1ms")), ("attempts", int(2))]),
            ),
            (
                "lazy.breaker",
                table([
                    ("failure_rate_threshold", int(50)),
                    ("minimum_required_calls", int(2)),
                    ("wait_duration_in_open_state", s("1s")),
                    ("permitted_calls_in_half_open_state", int(1)),
                    ("count_based", table([("window_size", int(2))])),
                ]),
            ),
            ("lazy.timeout", table([("duration", s("1s"))])),
            ("lazy.limit", table([("limit", int(1))])),
            (
                "lazy.rate",
                table([
                    ("limit_for_period", int(1)),
                    ("limit_refresh_period", s("1h")),
                ]),
            ),
        ],
    )
}

#[test]
fn a_call_dropped_unpolled_runs_nothing_and_holds_nothing() -> Result<(), Error> {
    let registry = registry();
    let runs = AtomicU32::new(0);
    let op = || {
        runs.fetch_add(1, Ordering::SeqCst);
        async { Ok::<u32, TestError>(1) }
    };
    registry.sync_scope(|| -> Result<(), Error> {
        let (r, b, t, c, l) = (R::get()?, B::get()?, T::get()?, C::get()?, L::get()?);
        drop(r.call(op));
        drop(b.call(op));
        drop(t.call(op));
        drop(c.call(op));
        drop(l.call(op));
        assert_eq!(runs.load(Ordering::SeqCst), 0, "a closure ran unpolled");
        // Nothing was taken: the limit's one place and the rate limiter's
        // one permit of the hour are still free.
        assert_eq!(c.in_use(), 0);
        assert!(l.try_acquire().is_ok());
        assert_eq!(b.metrics().window.total, 0);
        Ok(())
    })
}
