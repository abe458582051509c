//! One rate limiter permit, nothing refused: resilient's handle
//! (`try_acquire`) and attribute (`#[rate_limited]` on an async fn), both
//! algorithms, beside governor's direct limiter (`check`), its GCRA on its
//! default clock. Every limit is far above what one core can take (about a
//! billion permits per second), so no call is refused.

use std::hint::black_box;
use std::num::NonZeroU32;

use criterion::Criterion;
use resilient_core::{rate_limited, Error, RateLimiterSpec};

use super::{current_thread, install};

/// `fixed_window`, 1048575 permits per millisecond.
#[derive(RateLimiterSpec)]
#[spec("bench.rate_window")]
pub struct RateWindow;

/// `token_bucket`, a million permits per millisecond (one per ns).
#[derive(RateLimiterSpec)]
#[spec("bench.rate_bucket")]
pub struct RateBucket;

#[rate_limited(RateWindow)]
async fn window_only() -> Result<u64, Error> {
    Ok(black_box(1))
}

#[rate_limited(RateBucket)]
async fn bucket_only() -> Result<u64, Error> {
    Ok(black_box(1))
}

pub(crate) fn rate_limiter(c: &mut Criterion) {
    install();
    let (Ok(window), Ok(bucket)) = (RateWindow::get(), RateBucket::get()) else {
        panic!("configured")
    };
    let rt = current_thread();
    let mut g = c.benchmark_group("rate limiter permit");
    g.bench_function("resilient fixed_window, handle try_acquire", |bench| {
        bench.iter(|| black_box(window.try_acquire().is_ok()));
    });
    g.bench_function("resilient token_bucket, handle try_acquire", |bench| {
        bench.iter(|| black_box(bucket.try_acquire().is_ok()));
    });
    g.bench_function("resilient fixed_window, #[rate_limited]", |bench| {
        bench
            .to_async(&rt)
            .iter(|| async { black_box(window_only().await.is_ok()) });
    });
    g.bench_function("resilient token_bucket, #[rate_limited]", |bench| {
        bench
            .to_async(&rt)
            .iter(|| async { black_box(bucket_only().await.is_ok()) });
    });
    let Some(per_second) = NonZeroU32::new(u32::MAX) else {
        panic!("not zero")
    };
    let governor = governor::RateLimiter::direct(governor::Quota::per_second(per_second));
    g.bench_function("governor direct, check", |bench| {
        bench.iter(|| black_box(governor.check().is_ok()));
    });
    g.finish();
}
