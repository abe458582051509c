//! The peers' full stacks around the same op, with the settings resilient's
//! stack is given (see the constants in `peers.rs`): retry outermost, then
//! the breaker, the limit on calls in flight, and the timeout innermost.

use std::hint::black_box;

use criterion::measurement::WallTime;
use criterion::BenchmarkGroup;
use tokio::runtime::Runtime;
use tokio::sync::Semaphore;

use crate::{ATTEMPTS, LIMIT, OPEN_WAIT, RETRY_DELAY, TIMEOUT};

/// Why a peer stack's call failed.
#[derive(Debug, Clone)]
pub enum PeerError {
    Open,
    Full,
    TimedOut,
}

impl std::fmt::Display for PeerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

impl std::error::Error for PeerError {}

/// The limit of the stacks that take a tokio semaphore (backon's; seatbelt
/// has no limiter of its own).
static PERMITS: Semaphore = Semaphore::const_new(LIMIT);

/// backon's retry around recloser's breaker around a tokio semaphore
/// (`try_acquire`: reject when full) around `tokio::time::timeout`.
pub struct BackonStack {
    breaker: recloser::AsyncRecloser,
}

impl BackonStack {
    pub fn new() -> Self {
        let breaker = recloser::Recloser::custom()
            .error_rate(0.5)
            .closed_len(100)
            .open_wait(OPEN_WAIT)
            .build();
        Self {
            breaker: breaker.into(),
        }
    }

    pub async fn call(&self) -> Result<u32, PeerError> {
        use backon::Retryable as _;
        let attempt = || async {
            let guarded = self.breaker.call(async {
                let Ok(_permit) = PERMITS.try_acquire() else {
                    return Err(PeerError::Full);
                };
                match tokio::time::timeout(TIMEOUT, async { Ok::<u32, PeerError>(black_box(1)) })
                    .await
                {
                    Ok(result) => result,
                    Err(_) => Err(PeerError::TimedOut),
                }
            });
            match guarded.await {
                Ok(v) => Ok(v),
                Err(recloser::Error::Inner(e)) => Err(e),
                Err(recloser::Error::Rejected) => Err(PeerError::Open),
            }
        };
        attempt
            .retry(
                backon::ConstantBuilder::default()
                    .with_delay(RETRY_DELAY)
                    .with_max_times(ATTEMPTS as usize - 1),
            )
            .when(|e| !matches!(e, PeerError::Open))
            .await
    }
}

/// tower-resilience's circuit breaker layer with the bench's settings:
/// opening at 50% failures over 100 calls (at least 10), for 1s.
pub fn tower_resilience_breaker() -> tower_resilience::circuitbreaker::CircuitBreakerLayer {
    let Ok(breaker) = tower_resilience::circuitbreaker::CircuitBreakerLayer::builder()
        .failure_rate_threshold(0.5)
        .sliding_window_size(100)
        .minimum_number_of_calls(10)
        .wait_duration_in_open(OPEN_WAIT)
        .build()
    else {
        panic!("valid breaker settings")
    };
    breaker
}

/// tower-resilience's retry, circuit breaker, bulkhead and time limiter
/// layers around a `tower::service_fn` of the op, built once by
/// `ServiceBuilder`.
pub fn tower_resilience_stack() -> impl tower::Service<(), Response = u32> + Clone {
    use tower::ServiceBuilder;
    use tower_resilience::bulkhead::BulkheadLayer;
    use tower_resilience::retry::RetryLayer;
    use tower_resilience::timelimiter::TimeLimiterLayer;

    let Ok(bulkhead) = BulkheadLayer::builder()
        .max_concurrent_calls(LIMIT)
        .reject_when_full()
        .build()
    else {
        panic!("valid bulkhead settings")
    };
    ServiceBuilder::new()
        .layer(
            RetryLayer::builder()
                .max_attempts(ATTEMPTS as usize)
                .fixed_backoff(RETRY_DELAY)
                .build(),
        )
        .layer(tower_resilience_breaker())
        .layer(bulkhead)
        .layer(
            TimeLimiterLayer::builder()
                .timeout_duration(TIMEOUT)
                .build(),
        )
        .service(tower::service_fn(|()| async {
            Ok::<u32, PeerError>(black_box(1))
        }))
}

/// [`tower_resilience_stack`]; each call clones the service and calls it
/// once (`oneshot`), as tower services shared between callers are used.
pub fn bench_tower_resilience(g: &mut BenchmarkGroup<'_, WallTime>, rt: &Runtime, name: &str) {
    use tower::ServiceExt as _;

    let service = tower_resilience_stack();
    let first = rt.block_on(service.clone().oneshot(()));
    assert!(first.is_ok(), "{name}: the first call failed");
    g.bench_function(name, |bench| {
        bench.to_async(rt).iter(|| {
            let service = service.clone();
            async move {
                let result = service.oneshot(()).await;
                black_box(result.is_ok())
            }
        });
    });
}

/// seatbelt's retry, breaker and timeout layers; seatbelt has no limit on
/// calls in flight, so `with_limit` puts a tokio semaphore (reject when full)
/// into the op, inside the timeout.
pub fn bench_seatbelt(
    g: &mut BenchmarkGroup<'_, WallTime>,
    rt: &Runtime,
    name: &str,
    with_limit: bool,
) {
    use layered::{Execute, Service as _, Stack as _};
    use seatbelt::breaker::Breaker;
    use seatbelt::retry::{Backoff, Retry};
    use seatbelt::timeout::Timeout;
    use seatbelt::{RecoveryInfo, ResilienceContext};

    // The clock's timers are driven by a task on the bench's runtime.
    let clock = {
        let _runtime = rt.enter();
        tick::Clock::new_tokio()
    };
    let context: ResilienceContext<(), Result<u32, PeerError>> = ResilienceContext::new(&clock);
    let service = (
        Retry::layer("retry", &context)
            .clone_input()
            .max_retry_attempts(ATTEMPTS - 1)
            .backoff(Backoff::Constant)
            .base_delay(RETRY_DELAY)
            .recovery_with(|result: &Result<u32, PeerError>, _| match result {
                Ok(_) | Err(PeerError::Open) => RecoveryInfo::never(),
                Err(_) => RecoveryInfo::retry(),
            }),
        Breaker::layer("breaker", &context)
            .recovery_with(|result: &Result<u32, PeerError>, _| match result {
                Ok(_) => RecoveryInfo::never(),
                Err(_) => RecoveryInfo::retry(),
            })
            .rejected_input_error(|_, _| PeerError::Open)
            .failure_threshold(0.5)
            .min_throughput(10)
            .break_duration(OPEN_WAIT),
        Timeout::layer("timeout", &context)
            .timeout_error(|_| PeerError::TimedOut)
            .timeout(TIMEOUT),
        Execute::new(move |()| async move {
            if with_limit {
                let Ok(_permit) = PERMITS.try_acquire() else {
                    return Err(PeerError::Full);
                };
                Ok(black_box(1))
            } else {
                Ok(black_box(1))
            }
        }),
    )
        .into_service();
    let first = rt.block_on(service.execute(()));
    assert!(first.is_ok(), "{name}: the first call failed");
    g.bench_function(name, |bench| {
        bench.to_async(rt).iter(|| async {
            let result = service.execute(()).await;
            black_box(result.is_ok())
        });
    });
}
