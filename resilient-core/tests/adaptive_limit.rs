//! The adaptive concurrency limit (`type = "adaptive"`) against a simulated
//! dependency on tokio's paused clock: a dependency with `capacity`
//! workers, whose calls take `base` while at most `capacity` run at once
//! and proportionally longer beyond (the excess queues). Every test counts:
//! calls admitted and rejected, the most in flight at the dependency, and
//! the limit window by window.
//!
//! The figures each test measures are printed (`cargo test --test
//! adaptive_limit -- --nocapture`).

mod support;
use support::*;

mod adaptive_support;
use adaptive_support::*;

use std::error::Error as StdError;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use resilient_core::concurrency::Places;
use resilient_core::settings::Value;
use resilient_core::{
    concurrency_limit, ConcurrencyLimitHandle, ConcurrencyLimitSpec, Error, Registry, Spec,
};
use tokio::time::sleep;

// ---------------------------------------------------------------- convergence

#[tokio::test(start_paused = true)]
async fn from_below_the_limit_settles_within_a_fifth_of_the_capacity() -> TestResult {
    const K: u32 = 40;
    let r = registry::<Reviews>(section(1, 400));
    let _default = r.set_default();
    let h = handle(&r)?;
    let dep = Dependency::new(K, BASE);
    let load = Load::start(&dep, 3 * K as usize);
    let limits = watch(&h, 80).await;
    let counts = load.stop().await?;
    println!("from below: {counts:?}, peak in flight {}", dep.peak());
    within_a_fifth("from below", K, &limits, &limits[40..])?;
    assert!(dep.peak() <= 400);
    assert!(counts.rejected > 0 && counts.admitted > 0, "{counts:?}");
    assert_eq!(h.in_use(), 0, "every place came back");
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn from_above_the_limit_settles_within_a_fifth_of_the_capacity() -> TestResult {
    const K: u32 = 40;
    // Four times the capacity, and as many callers: every call of the
    // first window queues, so no window is at the dependency's best until
    // the limit comes down.
    let r = registry::<Reviews>(section(160, 160));
    let _default = r.set_default();
    let h = handle(&r)?;
    let dep = Dependency::new(K, BASE);
    let load = Load::start(&dep, 200);
    let limits = watch(&h, 150).await;
    let counts = load.stop().await?;
    println!("from above: {counts:?}, peak in flight {}", dep.peak());
    within_a_fifth("from above", K, &limits, &limits[100..])?;
    assert!(dep.peak() <= 160, "never above `max`: {}", dep.peak());
    assert_eq!(dep.peak(), 160, "the initial limit was used");
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn the_limit_never_admits_above_max_where_the_dependency_would_take_more() -> TestResult {
    // The dependency serves 100 at once; the cap is 30.
    let r = registry::<Reviews>(section(1, 30));
    let _default = r.set_default();
    let h = handle(&r)?;
    let dep = Dependency::new(100, BASE);
    let load = Load::start(&dep, 200);
    let limits = watch(&h, 60).await;
    let counts = load.stop().await?;
    let (lo, hi, mean) = spread(&limits[20..]);
    println!(
        "capped at 30: {counts:?}, peak in flight {}, limits {lo}..={hi} (mean {mean:.1}): {limits:?}",
        dep.peak()
    );
    assert_eq!(dep.peak(), 30, "up to `max` and never beyond");
    assert_eq!(hi, 30);
    assert!(limits.iter().all(|l| *l <= 30));
    // Within the tolerance of a baseline in no doubt, a limit at `max` is
    // not probed: it stays there.
    assert_eq!(lo, 30, "{limits:?}");
    Ok(())
}

// ---------------------------------------------------------------- recovery

#[tokio::test(start_paused = true)]
async fn the_limit_comes_down_when_the_dependency_slows_and_grows_back_when_it_recovers(
) -> TestResult {
    let r = registry::<Reviews>(section(1, 400));
    let _default = r.set_default();
    let h = handle(&r)?;
    let dep = Dependency::new(40, BASE);
    let load = Load::start(&dep, 120);
    let fast = watch(&h, 60).await;
    within_a_fifth("before", 40, &fast, &fast[30..])?;
    // The dependency serves a quarter as many at once.
    dep.set_capacity(10);
    let slow = watch(&h, 80).await;
    within_a_fifth("slow phase", 10, &slow, &slow[40..])?;
    let during = load.counts();
    dep.set_capacity(40);
    let again = watch(&h, 80).await;
    let counts = load.stop().await?;
    println!("recovery: {during:?} by the end of the slow phase, {counts:?} in all");
    within_a_fifth("recovered", 40, &again, &again[40..])?;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn after_a_quiet_spell_the_limit_grows_back_when_the_load_returns() -> TestResult {
    let r = registry::<Reviews>(section(1, 400));
    let _default = r.set_default();
    let h = handle(&r)?;
    let dep = Dependency::new(10, BASE);
    let busy = Load::start(&dep, 60);
    let slow = watch(&h, 60).await;
    within_a_fifth("busy, slow dependency", 10, &slow, &slow[30..])?;
    let busy = busy.stop().await?;
    let before = h.limit();
    // Near zero: one caller. Meanwhile the dependency recovers.
    dep.set_capacity(40);
    let trickle = Load::start(&dep, 1);
    let quiet = watch(&h, 50).await;
    let trickle = trickle.stop().await?;
    println!(
        "quiet: {trickle:?}, limit {before} before, {:?} during",
        spread(&quiet)
    );
    // The window under way when the load stopped still saw it; from the
    // next one on, the limit is not used.
    assert!(
        quiet[2..].iter().all(|l| *l == quiet[2]),
        "an unused limit neither grows nor shrinks: {before} then {quiet:?}"
    );
    let back = Load::start(&dep, 120);
    let again = watch(&h, 80).await;
    let back = back.stop().await?;
    println!("load back: {busy:?} busy, {back:?} after the quiet spell");
    within_a_fifth("after the quiet spell", 40, &again, &again[40..])?;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_dependency_slower_at_any_load_takes_a_new_baseline_instead_of_pinning_the_limit_low(
) -> TestResult {
    let r = registry::<Reviews>(section(1, 400));
    let _default = r.set_default();
    let h = handle(&r)?;
    let dep = Dependency::new(40, BASE);
    let load = Load::start(&dep, 120);
    let before = watch(&h, 60).await;
    within_a_fifth("before the shift", 40, &before, &before[30..])?;
    // Every call takes three times as long, however many run: the
    // dependency did not lose capacity, it got slower for everyone.
    dep.set_base(BASE * 3);
    let after = watch(&h, 120).await;
    let counts = load.stop().await?;
    let (lo, _, _) = spread(&after);
    let low = after.iter().filter(|l| **l <= 10).count();
    println!("latency shift: {counts:?}, lowest {lo}, {low} windows at 10 or below: {after:?}");
    // One decrease (by half at most, and 10 % under: from the 43 to 45
    // calls held, to 19 or 20), and, since latency did not fall with it,
    // one probe step of half to measure the baseline again: never down to
    // `min`, and not for long. (Once grown to four times the calls that
    // measured it, the baseline is measured again: a probe at half.)
    assert!(lo >= 9, "one decrease and one probe step: {after:?}");
    assert!(low <= 4, "back up once the baseline is measured: {after:?}");
    let measured = status(&r)?.adaptive.ok_or("measured")?;
    assert_eq!(
        measured.baseline,
        BASE * 3,
        "the new latency without a queue"
    );
    // Three times as long per call: still 40 calls at once before queueing,
    // and windows three times as full of each call, so it settles slower.
    within_a_fifth("after the shift", 40, &after, &after[80..])?;
    Ok(())
}

// ---------------------------------------------------------------- what counts as a sample

#[tokio::test(start_paused = true)]
async fn calls_dropped_early_are_no_fast_successes() -> TestResult {
    let r = registry::<Reviews>(section(10, 400));
    let _default = r.set_default();
    let h = handle(&r)?;
    // Plenty of capacity; every call takes 10 ms, and every caller gives up
    // after 2 ms, cancelling it.
    let dep = Dependency::new(1000, BASE);
    let stop = Arc::new(AtomicBool::new(false));
    let cancelled = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let (dep, stop, cancelled) =
                (Arc::clone(&dep), Arc::clone(&stop), Arc::clone(&cancelled));
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    match tokio::time::timeout(Duration::from_millis(2), review(Arc::clone(&dep)))
                        .await
                    {
                        Err(_) => {
                            cancelled.fetch_add(1, Ordering::SeqCst);
                        }
                        Ok(_) => sleep(Duration::from_millis(2)).await,
                    }
                }
            })
        })
        .collect();
    let limits = watch(&h, 30).await;
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        t.await?;
    }
    let cancelled = cancelled.load(Ordering::SeqCst);
    println!(
        "dropped at 2 ms: {cancelled} calls cancelled, served {}, limits {:?}",
        dep.served.load(Ordering::SeqCst),
        spread(&limits)
    );
    assert!(cancelled > 1000, "{cancelled}");
    assert!(limits.iter().all(|l| *l == 10), "{limits:?}");
    let measured = status(&r)?.adaptive;
    assert_eq!(measured, None, "no window could close on them");
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn calls_dropped_after_running_slow_bring_the_limit_down() -> TestResult {
    let r = registry::<Reviews>(section(1, 400));
    let _default = r.set_default();
    let h = handle(&r)?;
    let dep = Dependency::new(40, BASE);
    let load = Load::start(&dep, 120);
    let settled = watch(&h, 60).await;
    within_a_fifth("before", 40, &settled, &settled[30..])?;
    load.stop().await?;
    let before = h.limit();
    // The dependency now serves 4 at once, and the callers give up after
    // 50 ms: at the limit found before, every call is dropped before it
    // ends. Were drops no samples, no window would close and the limit
    // would stay.
    dep.set_capacity(4);
    let stop = Arc::new(AtomicBool::new(false));
    let (dropped, answered) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let tasks: Vec<_> = (0..120)
        .map(|_| {
            let (dep, stop) = (Arc::clone(&dep), Arc::clone(&stop));
            let (dropped, answered) = (Arc::clone(&dropped), Arc::clone(&answered));
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    let call = review(Arc::clone(&dep));
                    match tokio::time::timeout(Duration::from_millis(50), call).await {
                        Err(_) => dropped.fetch_add(1, Ordering::SeqCst),
                        Ok(Ok(())) => answered.fetch_add(1, Ordering::SeqCst),
                        Ok(Err(_)) => {
                            sleep(Duration::from_millis(2)).await;
                            0
                        }
                    };
                }
            })
        })
        .collect();
    let first = watch(&h, 10).await;
    let answered_first = answered.load(Ordering::SeqCst);
    let after = watch(&h, 30).await;
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        t.await?;
    }
    let (dropped, answered) = (
        dropped.load(Ordering::SeqCst),
        answered.load(Ordering::SeqCst),
    );
    println!(
        "dropped after 50 ms: limit {before} before, then {first:?} {after:?}; {dropped} dropped, {answered} answered ({answered_first} in the first 10 windows)"
    );
    assert!(dropped > 0);
    let (lo, hi, _) = spread(&after[10..]);
    assert!(
        lo >= 3 && hi <= 8,
        "down near the 4 the dependency serves: {first:?} {after:?}"
    );
    assert!(
        answered > answered_first,
        "calls are answered again once the limit is down"
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn fast_failures_are_no_samples() -> TestResult {
    let r = registry::<Reviews>(section(1, 400));
    let _default = r.set_default();
    let h = handle(&r)?;
    let dep = Dependency::new(40, BASE);
    let load = Load::start(&dep, 120);
    let settled = watch(&h, 60).await;
    within_a_fifth("before", 40, &settled, &settled[30..])?;
    let before = status(&r)?.adaptive.ok_or("measured")?;
    // Every call now fails after 1 ms: ten times faster than the baseline.
    dep.fail_after(Some(Duration::from_millis(1)));
    let failing = watch(&h, 30).await;
    let counts = load.stop().await?;
    let after = status(&r)?.adaptive.ok_or("measured")?;
    println!("fast failures: {counts:?}, {before:?} before, {after:?} after: {failing:?}");
    assert!(
        after.windows <= before.windows + 1,
        "no window closed on fast failures: {before:?} then {after:?}"
    );
    let (_, hi, _) = spread(&failing);
    assert!(hi <= spread(&settled[30..]).1, "{failing:?}");
    Ok(())
}

// ---------------------------------------------------------------- reload

fn reload(r: &Registry, section: Value) -> Result<Vec<String>, Box<dyn StdError>> {
    let reloaded = r
        .reload(&root(vec![(Reviews::PATH, section)]))
        .map_err(|p| format!("{p:?}"))?;
    Ok(reloaded.specs.into_iter().flat_map(|s| s.notes).collect())
}

#[tokio::test(start_paused = true)]
async fn reload_switches_the_type_both_ways_and_keeps_the_measurements_within_adaptive(
) -> TestResult {
    let r = registry::<Reviews>(table([("limit", int(8))]));
    let _default = r.set_default();
    let h = handle(&r)?;
    assert_eq!((h.limit(), h.adaptive()), (8, None));
    let dep = Dependency::new(40, BASE);
    let load = Load::start(&dep, 120);
    sleep(WINDOW).await;
    assert_eq!(dep.peak(), 8);

    let notes = reload(&r, section(2, 400))?;
    assert_eq!(
        notes,
        ["`type` is now \"adaptive\": the limit starts at `initial` (2) and is measured afresh"]
    );
    assert_eq!(h.limit(), 2);
    assert_eq!(h.settings().limit, 400, "the cap, as one number");
    let limits = watch(&h, 60).await;
    within_a_fifth("after fixed -> adaptive", 40, &limits, &limits[30..])?;
    let measured = status(&r)?.adaptive.ok_or("measured")?;

    // A lower cap: the limit comes under it, the measurements stay.
    let notes = reload(&r, section(2, 20))?;
    let now = h.limit();
    assert_eq!(now, 20);
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].ends_with("it is now 20, its measurements kept"),
        "{notes:?}"
    );
    let kept = status(&r)?.adaptive.ok_or("measured")?;
    assert!(kept.windows >= measured.windows);
    assert_eq!(kept.baseline, measured.baseline);
    sleep(WINDOW * 3).await;
    assert!(dep.peak() <= 400);
    // Only `initial` changed: it applies at a switch, not to a running limit.
    let notes = reload(&r, section(5, 20))?;
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0].starts_with("`initial` applies when a limit becomes adaptive"));

    let notes = reload(&r, table([("limit", int(6))]))?;
    assert_eq!(
        notes,
        ["`type` is now \"fixed\": the limit is `limit` (6), and the adaptive limit's measurements are dropped"]
    );
    assert_eq!((h.limit(), h.adaptive()), (6, None));
    assert_eq!(status(&r)?.adaptive, None);
    // Back to adaptive: measured afresh from `initial`.
    reload(&r, section(3, 400))?;
    assert_eq!(h.limit(), 3);
    assert_eq!(status(&r)?.adaptive, None, "nothing measured yet");
    let counts = load.stop().await?;
    println!("reload: {counts:?}");
    assert_eq!(h.in_use(), 0, "every place came back across the switches");
    assert_eq!(dep.in_flight.load(Ordering::SeqCst), 0);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn an_adaptive_block_limit_queues_its_callers_and_does_not_count_their_wait() -> TestResult {
    let block = with(section(1, 400), "policy", s("block"));
    let r = registry::<Reviews>(block);
    let _default = r.set_default();
    let h = handle(&r)?;
    let dep = Dependency::new(40, BASE);
    let load = Load::start(&dep, 120);
    let limits = watch(&h, 80).await;
    let counts = load.stop().await?;
    println!("block: {counts:?}, peak {}", dep.peak());
    assert_eq!(counts.rejected, 0, "{counts:?}");
    within_a_fifth("block", 40, &limits, &limits[40..])?;
    let measured = status(&r)?.adaptive.ok_or("measured")?;
    assert_eq!(
        measured.baseline, BASE,
        "a waiter's wait is not its latency"
    );
    assert_eq!(h.in_use(), 0);
    Ok(())
}

// ---------------------------------------------------------------- two workers

#[derive(ConcurrencyLimitSpec)]
#[spec("adaptive.threads")]
struct Threads;

/// One call that checks, once it runs, that no more calls run than the
/// limit allowed: the limit read just before the call asked for its place
/// (`before`) or read now, whichever is higher. (The limit in force at the
/// admission lies between the two reads unless it moved twice in that
/// instant; it moves at most once per window of 50 ms.)
#[concurrency_limit(Threads)]
async fn counted(
    dep: Arc<Dependency>,
    h: ConcurrencyLimitHandle<Threads>,
    before: u32,
    over: Arc<AtomicU64>,
) -> Result<(), TestError> {
    let n = dep.in_flight.load(Ordering::SeqCst) + 1;
    if n > before.max(h.limit()) {
        over.fetch_add(1, Ordering::SeqCst);
    }
    dep.serve().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_tasks_on_two_workers_stay_under_the_limit_and_lose_no_place() -> TestResult {
    const MAX: u32 = 24;
    const CALLS: u64 = 150;
    let r = registry::<Threads>(adaptive([
        ("max", int(i128::from(MAX))),
        ("initial", int(4)),
        ("window", s("50ms")),
    ]));
    let h = r.sync_scope(Threads::get)?;
    // 8 workers, 2 ms per call: the limit has room to move both ways.
    let dep = Dependency::new(8, Duration::from_millis(2));
    let admitted = Arc::new(AtomicU64::new(0));
    let rejected = Arc::new(AtomicU64::new(0));
    let other = Arc::new(AtomicU64::new(0));
    let over = Arc::new(AtomicU64::new(0));
    let highest = Arc::new(AtomicU32::new(0));
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let (r, h, dep) = (r.clone(), h.clone(), Arc::clone(&dep));
            let (admitted, rejected, other, over, highest) = (
                Arc::clone(&admitted),
                Arc::clone(&rejected),
                Arc::clone(&other),
                Arc::clone(&over),
                Arc::clone(&highest),
            );
            tokio::spawn(async move {
                for _ in 0..CALLS {
                    let before = h.limit();
                    highest.fetch_max(h.in_use(), Ordering::SeqCst);
                    let call = counted(Arc::clone(&dep), h.clone(), before, Arc::clone(&over));
                    match r.scope(call).await {
                        Ok(()) => admitted.fetch_add(1, Ordering::SeqCst),
                        Err(TestError::Resilience(Error::ConcurrencyLimitReached { .. })) => {
                            let n = rejected.fetch_add(1, Ordering::SeqCst);
                            sleep(Duration::from_millis(1)).await;
                            n
                        }
                        Err(_) => other.fetch_add(1, Ordering::SeqCst),
                    };
                }
            })
        })
        .collect();
    for t in tasks {
        t.await?;
    }
    let (admitted, rejected, other, over) = (
        admitted.load(Ordering::SeqCst),
        rejected.load(Ordering::SeqCst),
        other.load(Ordering::SeqCst),
        over.load(Ordering::SeqCst),
    );
    let measured = r
        .snapshot()
        .specs
        .iter()
        .find(|s| s.path == Threads::PATH)
        .and_then(|s| s.status::<Places>().copied())
        .ok_or("places")?;
    println!(
        "two workers: {admitted} admitted, {rejected} rejected, peak in flight {}, highest in use seen {}, limit now {}, {measured:?}",
        dep.peak(),
        highest.load(Ordering::SeqCst),
        h.limit()
    );
    assert_eq!(
        admitted + rejected,
        64 * CALLS,
        "every call admitted or rejected"
    );
    assert_eq!(other, 0);
    assert_eq!(over, 0, "a call ran with more in flight than the limit");
    assert!(dep.peak() <= MAX, "never above `max`: {}", dep.peak());
    assert!(
        highest.load(Ordering::SeqCst) <= MAX,
        "places in use never wrapped below zero nor passed `max`"
    );
    assert!(admitted > 0 && rejected > 0);
    assert_eq!(h.in_use(), 0, "every place came back");
    assert_eq!(measured.permits_in_use, 0);
    assert_eq!(dep.in_flight.load(Ordering::SeqCst), 0);
    assert!(
        measured.adaptive.is_some_and(|m| m.windows > 0),
        "the limit was measured under contention"
    );
    Ok(())
}
