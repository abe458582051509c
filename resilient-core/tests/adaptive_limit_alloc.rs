//! An adaptive limit's success path allocates nothing, the windows it
//! closes and the limits it publishes included: a counting global allocator
//! watches calls through `#[concurrency_limit]` on tokio's paused clock.

use std::time::Duration;

use resilient_core::settings::Value;
use resilient_core::{concurrency_limit, ConcurrencyLimitSpec, Registry};

mod counting;
use counting::{allocations, Counting};

#[global_allocator]
static GLOBAL: Counting = Counting;

#[derive(ConcurrencyLimitSpec)]
#[spec("alloc.adaptive")]
struct Adaptive;

#[derive(Debug, thiserror::Error)]
#[error(transparent)]
struct Failed(#[from] resilient_core::Error);

#[concurrency_limit(Adaptive)]
async fn limited(x: u64, millis: u64) -> Result<u64, Failed> {
    tokio::time::sleep(Duration::from_millis(millis)).await;
    Ok(x + 1)
}

/// Eight calls at once, each `millis` long (tokio's timer counts whole
/// milliseconds): never more than the limit's
/// `min`, so none is rejected or waits (a rejection builds an error, a wait
/// allocates its queue entry); whether all eight succeeded.
async fn eight(millis: u64) -> bool {
    let (a, b, c, d, e, f, g, h) = tokio::join!(
        limited(0, millis),
        limited(1, millis),
        limited(2, millis),
        limited(3, millis),
        limited(4, millis),
        limited(5, millis),
        limited(6, millis),
        limited(7, millis),
    );
    [a, b, c, d, e, f, g, h]
        .iter()
        .enumerate()
        .all(|(i, r)| r.as_ref().ok() == Some(&(i as u64 + 1)))
}

fn table<const N: usize>(pairs: [(&str, Value); N]) -> Value {
    Value::Table(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

fn registry(policy: &str) -> Result<Registry, String> {
    let section = table([
        ("type", Value::Str("adaptive".into())),
        // Eight calls at once use at least half of any limit up to 16:
        // every window teaches the limit something.
        ("max", Value::Int(16)),
        ("min", Value::Int(8)),
        ("window", Value::Str("10ms".into())),
        ("policy", Value::Str(policy.into())),
    ]);
    Registry::builder()
        .spec::<Adaptive>()
        .build(&table([("alloc", table([("adaptive", section)]))]))
        .map_err(|p| format!("{p:?}"))
}

#[test]
fn successful_calls_and_the_windows_they_close_allocate_nothing(
) -> Result<(), Box<dyn std::error::Error>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()?;
    for policy in ["reject", "block"] {
        let r = registry(policy)?;
        let h = r.sync_scope(Adaptive::get)?;
        let (allocated, limits) = rt.block_on(r.scope(async {
            // Warm up: thread-locals, the timer wheel and the like may
            // allocate once.
            for _ in 0..20 {
                eight(1).await;
            }
            let mut limits = Vec::with_capacity(500);
            let before = allocations();
            for i in 0..500 {
                // Calls four times slower every other 50 rounds: windows
                // of both kinds, so that the limit moves both ways.
                let millis = if (i / 50) % 2 == 0 { 1 } else { 4 };
                if !eight(millis).await {
                    return Err(format!("round {i} failed"));
                }
                limits.push(h.limit());
            }
            let allocated = allocations() - before;
            Ok((allocated, limits))
        }))?;
        let moved = limits.windows(2).filter(|w| w[0] != w[1]).count();
        let fell = limits.windows(2).any(|w| w[1] < w[0]);
        assert!(
            moved > 0 && fell,
            "{policy}: the limit moved both ways: {limits:?}"
        );
        assert_eq!(
            allocated, 0,
            "{policy}: {allocated} allocations in 4000 successful calls ({moved} limit changes)"
        );
    }
    Ok(())
}
