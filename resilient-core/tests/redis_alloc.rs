//! What a keyed Redis decision allocates, counted by a global allocator:
//! a call answered in the process (a kept refusal, a leased permit)
//! allocates nothing,
//! keyed or not, and a round trip allocates as much keyed as unkeyed
//! (about 16 allocations, the client's included).
//! Needs RESILIENT_REDIS_URL (see `support/redis.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod counting;
mod support;
use counting::{allocations, Counting};
use support::redis as server;
use support::*;

use resilient_core::settings::Value;
use resilient_core::{RateLimiterHandle, RateLimiterSpec};

#[global_allocator]
static COUNTING: Counting = Counting;

#[derive(RateLimiterSpec)]
#[spec("redis_alloc.quota")]
struct TenantQuota;

fn quota(limit: i128) -> Value {
    table([
        ("limit_for_period", int(limit)),
        ("limit_refresh_period", s("1h")),
        ("backend", s("redis")),
    ])
}

/// Allocations of `calls` calls to `limiter`, and how many were admitted.
async fn counted(limiter: &RateLimiterHandle<TenantQuota>, calls: usize) -> (usize, usize) {
    let before = allocations();
    let mut admitted = 0;
    for _ in 0..calls {
        if limiter.acquire().await.is_ok() {
            admitted += 1;
        }
    }
    (allocations() - before, admitted)
}

/// 3 permits per hour, on a current-thread runtime (the client's
/// connection runs on the test's thread, so its allocations are counted
/// too): after a first call that connects and loads the script, two
/// admitted calls and one refused call each make a round trip, then 100
/// refused calls are answered by the kept refusal.
#[test]
fn a_call_answered_in_the_process_allocates_nothing_and_a_keyed_round_trip_as_an_unkeyed_one() {
    let Some(url) = server::url("a_kept_refusal_allocates_nothing") else {
        return;
    };
    let r =
        server::replica::<TenantQuota>(quota(3), server::section(&url, &server::prefix("alloc")));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let figures = rt.block_on(async {
        let mut figures = Vec::new();
        for key in [None, Some("acme")] {
            let limiter = r
                .sync_scope(|| match key {
                    None => TenantQuota::get(),
                    Some(k) => TenantQuota::for_key(k),
                })
                .expect("configured");
            let (_, first) = counted(&limiter, 1).await;
            assert_eq!(first, 1);
            let (trips, admitted) = counted(&limiter, 3).await;
            assert_eq!(admitted, 2);
            let (kept, admitted) = counted(&limiter, 100).await;
            assert_eq!(admitted, 0);
            figures.push((trips, kept));
        }
        figures
    });
    let ((unkeyed, unkeyed_kept), (keyed, keyed_kept)) = (figures[0], figures[1]);
    println!(
        "allocations per round trip: unkeyed {:.1}, keyed {:.1}; 100 kept refusals: unkeyed {unkeyed_kept}, keyed {keyed_kept}",
        unkeyed as f64 / 3.0,
        keyed as f64 / 3.0
    );
    assert_eq!((unkeyed_kept, keyed_kept), (0, 0));
    // `lease = 10`: a tenant's first call takes 10 permits in one round
    // trip, and the 9 calls after it are given leased ones, allocating
    // nothing.
    let leased_registry = server::replica::<TenantQuota>(
        with(quota(100), "lease", int(10)),
        server::section(&url, &server::prefix("alloc-lease")),
    );
    let leased = rt.block_on(async {
        let limiter = leased_registry
            .sync_scope(|| TenantQuota::for_key("acme"))
            .expect("configured");
        let (_, first) = counted(&limiter, 1).await;
        assert_eq!(first, 1);
        let (allocated, admitted) = counted(&limiter, 9).await;
        assert_eq!(admitted, 9);
        allocated
    });
    println!("9 calls on leased permits of a tenant: {leased} allocations");
    assert_eq!(leased, 0);
    // The client's own buffers grow now and then: a few either way.
    assert!(
        keyed.abs_diff(unkeyed) <= 3,
        "a keyed round trip allocates as an unkeyed one: {keyed} against {unkeyed} in 3"
    );
}
