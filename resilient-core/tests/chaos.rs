//! Fault injection: a seeded spec injects into exactly the same calls on
//! every run, at about its rate; an injected latency is bounded by a
//! timeout outside it; an injected error is retried by a retry outside it
//! and not by one inside; a disabled spec injects nothing; a reload turns
//! it on and off; calls from two threads are all accounted for. Every test
//! counts calls, body runs and injections. The log lines are read in
//! `chaos_logs.rs`, a binary of its own.

mod support;
use support::*;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use resilient_core::chaos::{ChaosCounts, ChaosSettings};
use resilient_core::settings::Value;
use resilient_core::{
    chaos, retryable, timeout, ChaosSpec, Error, Registry, RetrySpec, TimeoutSpec,
};

type TestResult = Result<(), Box<dyn std::error::Error>>;

#[derive(Debug, thiserror::Error)]
enum TestError {
    #[error(transparent)]
    Resilience(#[from] Error),
}

fn counts<S: ChaosSpec>(registry: &Registry) -> Result<ChaosCounts, Error> {
    registry.sync_scope(|| S::get().map(|h| h.counts()))
}

// ------------------------------------------------------------ seeded draws

#[derive(ChaosSpec)]
#[spec("chaos.seeded")]
struct Seeded;

static SEEDED_BODY: AtomicU64 = AtomicU64::new(0);

#[chaos(Seeded)]
async fn seeded() -> Result<(), TestError> {
    SEEDED_BODY.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// Calls `seeded` `n` times under a new registry with `section`; the
/// indices of the calls that got an injected error.
async fn injected_calls(section: Value, n: u64) -> Result<(Vec<u64>, ChaosCounts), Error> {
    let registry = registry::<Seeded>(section);
    let mut injected = Vec::new();
    for i in 0..n {
        match registry.scope(seeded()).await {
            Ok(()) => {}
            Err(TestError::Resilience(Error::Injected { call, .. })) => {
                // The error names the call's index in the spec's sequence.
                assert_eq!(call, i);
                injected.push(i);
            }
            Err(TestError::Resilience(e)) => return Err(e),
        }
    }
    Ok((injected, counts::<Seeded>(&registry)?))
}

/// Injections observed at rate 0.3 over 10 000 calls with seed 20 240 611:
/// a fixed figure, since the draws are splitmix64 of the seed and the call
/// index and nothing else.
const SEEDED_INJECTED: usize = 3015;

#[tokio::test]
async fn a_seed_injects_into_the_same_calls_on_every_run() -> TestResult {
    let section = || {
        table([
            ("enabled", boolean(true)),
            ("error_rate", float(0.3)),
            ("seed", int(20_240_611)),
        ])
    };
    let before = SEEDED_BODY.load(Ordering::Relaxed);
    let (first, first_counts) = injected_calls(section(), 10_000).await?;
    let (second, second_counts) = injected_calls(section(), 10_000).await?;
    // Binomial(10 000, 0.3): mean 3000, standard deviation about 46. Checked
    // first: a generator that no longer draws at the rate fails here, one
    // that draws at the rate but otherwise fails only the exact figure.
    assert!((2800..=3200).contains(&first.len()), "{}", first.len());
    assert_eq!(first.len(), SEEDED_INJECTED);
    let first: BTreeSet<u64> = first.into_iter().collect();
    let second: BTreeSet<u64> = second.into_iter().collect();
    assert_eq!(first, second);
    assert_eq!(first_counts, second_counts);
    assert_eq!(first_counts.calls, 10_000);
    assert_eq!(first_counts.errors_injected, SEEDED_INJECTED as u64);
    assert_eq!(first_counts.latency_injected, 0);
    // The body ran exactly for the calls that were not injected.
    let ran = SEEDED_BODY.load(Ordering::Relaxed) - before;
    assert_eq!(ran, 2 * (10_000 - SEEDED_INJECTED as u64));
    // Another seed chooses other calls.
    let (other, _) = injected_calls(
        table([
            ("enabled", boolean(true)),
            ("error_rate", float(0.3)),
            ("seed", int(7)),
        ]),
        10_000,
    )
    .await?;
    assert_ne!(first, other.into_iter().collect::<BTreeSet<u64>>());
    Ok(())
}

// ---------------------------------------------------------- disabled: zero

#[derive(ChaosSpec)]
#[spec("chaos.disabled")]
struct Disabled;

static DISABLED_BODY: AtomicU64 = AtomicU64::new(0);

#[chaos(Disabled)]
async fn disabled() -> Result<(), TestError> {
    DISABLED_BODY.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

#[tokio::test]
async fn a_spec_without_enabled_injects_nothing_even_at_rate_one() -> TestResult {
    // Every rate at 1.0, `enabled` left out: the default is off.
    let registry = registry::<Disabled>(table([
        ("error_rate", float(1.0)),
        ("latency_rate", float(1.0)),
        ("latency", s("1h")),
    ]));
    let mut failed = 0u64;
    for _ in 0..10_000 {
        if registry.scope(disabled()).await.is_err() {
            failed += 1;
        }
    }
    assert_eq!(failed, 0);
    assert_eq!(DISABLED_BODY.load(Ordering::Relaxed), 10_000);
    // No draw was made: the call counter did not move.
    assert_eq!(counts::<Disabled>(&registry)?, ChaosCounts::default());
    let settings = registry.sync_scope(|| Disabled::get().map(|h| *h.settings()))?;
    assert!(!settings.enabled);
    Ok(())
}

// -------------------------------------------- latency below a timeout

#[derive(TimeoutSpec)]
#[spec("chaos.timeout")]
struct Limit;

#[derive(ChaosSpec)]
#[spec("chaos.slow")]
struct Slow;

static SLOW_BODY: AtomicU64 = AtomicU64::new(0);

#[timeout(Limit)]
#[chaos(Slow)] // inside the timeout: its latency counts against the limit
async fn slow() -> Result<(), TestError> {
    SLOW_BODY.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

fn slow_registry(latency: &str) -> Registry {
    slow_failing_registry(latency, 0.0)
}

fn slow_failing_registry(latency: &str, error_rate: f64) -> Registry {
    build(
        Registry::builder().spec::<Limit>().spec::<Slow>(),
        vec![
            ("chaos.timeout", table([("duration", s("100ms"))])),
            (
                "chaos.slow",
                table([
                    ("enabled", boolean(true)),
                    ("latency_rate", float(1.0)),
                    ("latency", s(latency)),
                    ("error_rate", float(error_rate)),
                ]),
            ),
        ],
    )
}

#[tokio::test(start_paused = true)]
async fn injected_latency_below_a_timeout_times_out() -> TestResult {
    let before = SLOW_BODY.load(Ordering::Relaxed);
    let registry = slow_registry("1s");
    let started = tokio::time::Instant::now();
    let out = registry.scope(slow()).await;
    assert!(
        matches!(out, Err(TestError::Resilience(Error::Timeout { after, .. })) if after == Duration::from_millis(100)),
        "{out:?}"
    );
    // Ended at the limit, not after the injected second; the body never ran.
    assert_eq!(started.elapsed(), Duration::from_millis(100));
    assert_eq!(SLOW_BODY.load(Ordering::Relaxed) - before, 0);
    let c = counts::<Slow>(&registry)?;
    assert_eq!((c.calls, c.latency_injected, c.errors_injected), (1, 1, 0));

    // A latency within the limit delays the call, which then runs.
    let registry = slow_registry("40ms");
    let started = tokio::time::Instant::now();
    registry.scope(slow()).await?;
    assert_eq!(started.elapsed(), Duration::from_millis(40));
    assert_eq!(SLOW_BODY.load(Ordering::Relaxed) - before, 1);
    Ok(())
}

/// A call that draws a latency and an error gets the error after the wait:
/// counted then, and not at all when a timeout outside ends the wait first.
#[tokio::test(start_paused = true)]
async fn an_error_drawn_with_a_latency_counts_only_when_delivered() -> TestResult {
    let registry = slow_failing_registry("1s", 1.0);
    let out = registry.scope(slow()).await;
    assert!(
        matches!(out, Err(TestError::Resilience(Error::Timeout { .. }))),
        "{out:?}"
    );
    let c = counts::<Slow>(&registry)?;
    assert_eq!((c.calls, c.latency_injected, c.errors_injected), (1, 1, 0));

    let registry = slow_failing_registry("40ms", 1.0);
    let started = tokio::time::Instant::now();
    let out = registry.scope(slow()).await;
    assert!(
        matches!(
            out,
            Err(TestError::Resilience(Error::Injected { call: 0, .. }))
        ),
        "{out:?}"
    );
    assert_eq!(started.elapsed(), Duration::from_millis(40));
    let c = counts::<Slow>(&registry)?;
    assert_eq!((c.calls, c.latency_injected, c.errors_injected), (1, 1, 1));
    Ok(())
}

// --------------------------------------- errors and a retry, both orders

#[derive(RetrySpec)]
#[spec("chaos.retry")]
struct Again;

#[derive(ChaosSpec)]
#[spec("chaos.failing")]
struct Failing;

static ATTEMPTS_INSIDE: AtomicU64 = AtomicU64::new(0);
static BODY_INSIDE: AtomicU64 = AtomicU64::new(0);
static BODY_OUTSIDE: AtomicU64 = AtomicU64::new(0);

/// Counts each attempt the retry makes (a chaos layer outside the counter
/// would hide the attempts it fails), then the chaos draw, then the body.
#[retryable(Again)]
async fn retried_through_chaos() -> Result<(), TestError> {
    ATTEMPTS_INSIDE.fetch_add(1, Ordering::Relaxed);
    chaos_then_body().await
}

#[chaos(Failing)]
async fn chaos_then_body() -> Result<(), TestError> {
    BODY_INSIDE.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

#[chaos(Failing)] // outermost: its error reaches the caller, not the retry
#[retryable(Again)]
async fn chaos_outside_retry() -> Result<(), TestError> {
    BODY_OUTSIDE.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

fn failing_registry() -> Registry {
    build(
        Registry::builder().spec::<Again>().spec::<Failing>(),
        vec![
            (
                "chaos.retry",
                table([("delay", s("10ms")), ("attempts", int(2))]),
            ),
            (
                "chaos.failing",
                table([("enabled", boolean(true)), ("error_rate", float(1.0))]),
            ),
        ],
    )
}

#[tokio::test(start_paused = true)]
async fn an_injected_error_inside_a_retry_is_retried_and_outside_it_is_not() -> TestResult {
    // Inside: each of the 1 + 2 attempts draws, fails, and is retried.
    let registry = failing_registry();
    let out = registry.scope(retried_through_chaos()).await;
    match out {
        Err(TestError::Resilience(Error::RetryExhausted(x))) => {
            assert_eq!(x.calls, 3);
            let last = x.last.downcast_ref::<TestError>();
            assert!(
                matches!(last, Some(TestError::Resilience(Error::Injected { .. }))),
                "{last:?}"
            );
        }
        other => panic!("expected the retry to give up, got {other:?}"),
    }
    assert_eq!(ATTEMPTS_INSIDE.load(Ordering::Relaxed), 3);
    assert_eq!(BODY_INSIDE.load(Ordering::Relaxed), 0);
    let c = counts::<Failing>(&registry)?;
    assert_eq!((c.calls, c.errors_injected), (3, 3));

    // Outside: one draw, and the call ends there, without a retry.
    let registry = failing_registry();
    let out = registry.scope(chaos_outside_retry()).await;
    assert!(
        matches!(
            out,
            Err(TestError::Resilience(Error::Injected { call: 0, .. }))
        ),
        "{out:?}"
    );
    assert_eq!(BODY_OUTSIDE.load(Ordering::Relaxed), 0);
    let c = counts::<Failing>(&registry)?;
    assert_eq!((c.calls, c.errors_injected), (1, 1));
    Ok(())
}

// ------------------------------------------------------------------ reload

#[derive(ChaosSpec)]
#[spec("chaos.reloaded")]
struct Reloaded;

static RELOADED_BODY: AtomicU64 = AtomicU64::new(0);

#[chaos(Reloaded)]
async fn reloaded() -> Result<(), TestError> {
    RELOADED_BODY.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

fn reloaded_section(enabled: bool) -> Value {
    table([("enabled", boolean(enabled)), ("error_rate", float(1.0))])
}

/// Makes 10 calls; how many failed.
async fn ten_calls(registry: &Registry) -> u64 {
    let mut failed = 0;
    for _ in 0..10 {
        if registry.scope(reloaded()).await.is_err() {
            failed += 1;
        }
    }
    failed
}

#[tokio::test]
async fn a_reload_turns_injection_on_and_off() -> TestResult {
    let registry = registry::<Reloaded>(reloaded_section(true));
    let reload = |enabled: bool| {
        registry
            .reload(&root(vec![("chaos.reloaded", reloaded_section(enabled))]))
            .map_err(|problems| format!("reload refused: {problems:?}"))
    };
    let enabled = || -> Result<bool, String> {
        let snapshot = registry.snapshot();
        let settings = snapshot
            .specs
            .iter()
            .find_map(|s| s.settings::<ChaosSettings>())
            .ok_or("no chaos settings in the snapshot")?;
        Ok(settings.enabled)
    };

    assert!(enabled()?);
    assert_eq!(ten_calls(&registry).await, 10);
    assert_eq!(RELOADED_BODY.load(Ordering::Relaxed), 0);

    reload(false)?;
    assert!(!enabled()?);
    assert_eq!(ten_calls(&registry).await, 0);
    assert_eq!(RELOADED_BODY.load(Ordering::Relaxed), 10);

    reload(true)?;
    assert!(enabled()?);
    assert_eq!(ten_calls(&registry).await, 10);
    assert_eq!(RELOADED_BODY.load(Ordering::Relaxed), 10);

    // Only the enabled calls drew; the disabled ones left no trace.
    let c = counts::<Reloaded>(&registry)?;
    assert_eq!((c.calls, c.errors_injected), (20, 20));
    Ok(())
}

// ------------------------------------------------------------ two threads

#[derive(ChaosSpec)]
#[spec("chaos.threads")]
struct Threads;

static THREADS_BODY: AtomicU64 = AtomicU64::new(0);

#[chaos(Threads)]
async fn threaded() -> Result<(), TestError> {
    THREADS_BODY.fetch_add(1, Ordering::Relaxed);
    tokio::task::yield_now().await;
    Ok(())
}

#[test]
fn calls_from_two_threads_are_each_injected_or_not_once() -> TestResult {
    const TASKS: u64 = 64;
    const CALLS: u64 = 100;
    let registry = registry::<Threads>(table([
        ("enabled", boolean(true)),
        ("error_rate", float(0.3)),
        ("seed", int(99)),
    ]));
    let rt = two_workers();
    let (injected, passed) = rt.block_on(async {
        let mut tasks = Vec::new();
        for _ in 0..TASKS {
            let registry = registry.clone();
            tasks.push(tokio::spawn(async move {
                let (mut injected, mut passed) = (0u64, 0u64);
                for _ in 0..CALLS {
                    match registry.scope(threaded()).await {
                        Ok(()) => passed += 1,
                        Err(TestError::Resilience(Error::Injected { .. })) => injected += 1,
                        Err(e) => return Err(e),
                    }
                }
                Ok((injected, passed))
            }));
        }
        let (mut injected, mut passed) = (0, 0);
        for task in tasks {
            let (i, p) = task.await.map_err(|e| e.to_string())??;
            injected += i;
            passed += p;
        }
        Ok::<_, Box<dyn std::error::Error>>((injected, passed))
    })?;
    assert_eq!(injected + passed, TASKS * CALLS);
    assert_eq!(THREADS_BODY.load(Ordering::Relaxed), passed);
    let c = counts::<Threads>(&registry)?;
    assert_eq!(c.calls, TASKS * CALLS);
    assert_eq!(c.errors_injected, injected);
    // Whichever call took which index, the indices taken are 0..6400: the
    // total is the one the same seed gives on one thread.
    let one_thread = support::registry::<Threads>(table([
        ("enabled", boolean(true)),
        ("error_rate", float(0.3)),
        ("seed", int(99)),
    ]));
    let sequential = rt.block_on(async {
        let mut injected = 0u64;
        for _ in 0..TASKS * CALLS {
            if one_thread.scope(threaded()).await.is_err() {
                injected += 1;
            }
        }
        injected
    });
    assert_eq!(sequential, injected);
    Ok(())
}

// -------------------------------------------------------------- validation

#[derive(ChaosSpec)]
#[spec("chaos.checked")]
struct Checked;

#[test]
fn every_problem_of_a_chaos_section_is_reported_at_once() -> TestResult {
    let section = table([
        ("enabled", s("yes")),
        ("error_rate", float(1.5)),
        ("latency_rate", float(0.2)),
        ("seed", int(-1)),
        ("error_rat", float(0.1)),
    ]);
    let problems = match Registry::builder()
        .spec::<Checked>()
        .build(&root(vec![("chaos.checked", section)]))
    {
        Ok(_) => return Err("an invalid chaos section was accepted".into()),
        Err(problems) => problems,
    };
    let mut keys: Vec<&str> = problems.iter().map(|p| p.key.as_str()).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        ["enabled", "error_rat", "error_rate", "latency", "seed"],
        "{problems:#?}"
    );
    let rule = |key: &str| {
        problems
            .iter()
            .find(|p| p.key == key)
            .map(|p| p.rule.clone())
            .unwrap_or_default()
    };
    assert!(rule("error_rate").contains("0.0..=1.0"), "{problems:#?}");
    assert!(
        rule("latency").contains("`latency_rate` > 0"),
        "{problems:#?}"
    );
    assert!(
        rule("error_rat").contains("did you mean `error_rate`?"),
        "{problems:#?}"
    );
    // A latency with no `latency_rate` delays nothing: refused, not kept in
    // silence. Written at 0 it is switched off on purpose, and kept.
    let silent = Registry::builder().spec::<Checked>().build(&root(vec![(
        "chaos.checked",
        table([("enabled", boolean(true)), ("latency", s("200ms"))]),
    )]));
    let problems = silent
        .err()
        .ok_or("a latency without latency_rate was accepted")?;
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert_eq!(problems[0].key, "latency");
    assert!(
        problems[0]
            .rule
            .contains("has no effect while `latency_rate` is 0"),
        "{problems:#?}"
    );
    Registry::builder()
        .spec::<Checked>()
        .build(&root(vec![(
            "chaos.checked",
            table([("latency", s("200ms")), ("latency_rate", float(0.0))]),
        )]))
        .map_err(|p| format!("{p:?}"))?;
    // An outcome rate beside an error rate of 1 would draw for no call.
    let dead = Registry::builder().spec::<Checked>().build(&root(vec![(
        "chaos.checked",
        table([("error_rate", float(1.0)), ("outcome_rate", float(0.5))]),
    )]));
    let problems = dead
        .err()
        .ok_or("an outcome rate under an error rate of 1 was accepted")?;
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert_eq!(problems[0].key, "outcome_rate");
    assert!(
        problems[0]
            .rule
            .contains("has no effect with `error_rate` = 1"),
        "{problems:#?}"
    );
    // Polly's name for a rate is answered with this project's.
    let polly = Registry::builder().spec::<Checked>().build(&root(vec![(
        "chaos.checked",
        table([("injection_rate", float(0.1))]),
    )]));
    let problems = polly.err().ok_or("`injection_rate` was accepted")?;
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert!(
        problems[0].to_string().contains("error_rate"),
        "{problems:#?}"
    );
    Ok(())
}

// ------------------------------------------------------------- a new seed

#[derive(ChaosSpec)]
#[spec("chaos.reseeded")]
struct Reseeded;

#[chaos(Reseeded)]
async fn reseeded() -> Result<(), TestError> {
    Ok(())
}

/// The index of the call that got the injected error.
async fn injected_index(registry: &Registry) -> Result<u64, String> {
    match registry.scope(reseeded()).await {
        Err(TestError::Resilience(Error::Injected { call, .. })) => Ok(call),
        other => Err(format!("expected an injected error, got {other:?}")),
    }
}

/// A reload that changes the seed starts the draws at call 0; one that
/// changes another setting goes on from the index reached.
#[tokio::test]
async fn a_new_seed_starts_the_draws_at_call_0() -> TestResult {
    let section = |seed: i128, latency_rate: f64| {
        table([
            ("enabled", boolean(true)),
            ("error_rate", float(1.0)),
            ("latency_rate", float(latency_rate)),
            ("latency", s("1ms")),
            ("seed", int(seed)),
        ])
    };
    let registry = registry::<Reseeded>(section(1, 0.0));
    for expected in 0..3 {
        assert_eq!(injected_index(&registry).await?, expected);
    }
    let reload = |seed, latency_rate| {
        registry
            .reload(&root(vec![("chaos.reseeded", section(seed, latency_rate))]))
            .map_err(|problems| format!("reload refused: {problems:?}"))
    };
    reload(2, 0.0)?;
    assert_eq!(counts::<Reseeded>(&registry)?.calls, 0);
    assert_eq!(injected_index(&registry).await?, 0);
    assert_eq!(injected_index(&registry).await?, 1);
    // The same seed, another setting: the index goes on.
    reload(2, 0.5)?;
    assert_eq!(counts::<Reseeded>(&registry)?.calls, 2);
    Ok(())
}

#[derive(ChaosSpec)]
#[spec("chaos.revisited")]
struct Revisited;

#[chaos(Revisited)]
async fn revisited() -> Result<(), TestError> {
    Ok(())
}

/// `n` calls of `revisited`: for each, whether it got an injected error,
/// with the index the error names checked against its place from `first`.
async fn decisions(registry: &Registry, first: u64, n: u64) -> Result<Vec<bool>, String> {
    let mut out = Vec::new();
    for i in 0..n {
        match registry.scope(revisited()).await {
            Ok(()) => out.push(false),
            Err(TestError::Resilience(Error::Injected { call, .. })) => {
                if call != first + i {
                    return Err(format!("call {i} drew index {call}, not {}", first + i));
                }
                out.push(true);
            }
            Err(other) => return Err(format!("call {i}: {other:?}")),
        }
    }
    Ok(out)
}

/// A reload back to a seed used before starts its draws at call 0 again,
/// as for any changed seed: a staging run that returns to seed 11 repeats
/// seed 11's injections exactly, also when it comes back disabled first
/// and is enabled by a later reload.
#[tokio::test]
async fn a_seed_used_before_starts_again_at_call_0() -> TestResult {
    let section = |seed: i128, enabled: bool| {
        table([
            ("enabled", boolean(enabled)),
            ("error_rate", float(0.5)),
            ("seed", int(seed)),
        ])
    };
    let registry = registry::<Revisited>(section(11, true));
    let reload = |seed, enabled| {
        registry
            .reload(&root(vec![("chaos.revisited", section(seed, enabled))]))
            .map_err(|problems| format!("reload refused: {problems:?}"))
    };
    let first = decisions(&registry, 0, 100).await?;
    let injected = first.iter().filter(|&&d| d).count();
    // Binomial(100, 0.5): a sequence with both kinds of decision in it.
    assert!((30..=70).contains(&injected), "{injected}");
    assert_eq!(counts::<Revisited>(&registry)?.calls, 100);

    reload(12, true)?;
    let twelve = decisions(&registry, 0, 100).await?;
    assert_ne!(twelve, first, "another seed, other decisions");

    reload(11, true)?;
    assert_eq!(counts::<Revisited>(&registry)?.calls, 0);
    let again = decisions(&registry, 0, 100).await?;
    assert_eq!(again, first);
    let c = counts::<Revisited>(&registry)?;
    assert_eq!(c.calls, 100);
    assert_eq!(
        c.errors_injected,
        (2 * injected + twelve.iter().filter(|&&d| d).count()) as u64
    );

    // Back to 11 by way of 12 again, disabled on the way: the calls made
    // while disabled draw nothing, and enabling starts at call 0.
    reload(12, true)?;
    decisions(&registry, 0, 10).await?;
    reload(11, false)?;
    assert_eq!(decisions(&registry, 0, 10).await?, vec![false; 10]);
    reload(11, true)?;
    assert_eq!(counts::<Revisited>(&registry)?.calls, 0);
    assert_eq!(decisions(&registry, 0, 100).await?, first);
    Ok(())
}

// ------------------------------------------------- a replaced outcome

#[derive(RetrySpec)]
#[spec("chaos.judged_retry", classify = custom)]
struct JudgedRetry;

/// A status of 500 or more is a failure, as an HTTP classifier says.
impl resilient_core::Classify<u16, TestError> for JudgedRetry {
    fn classify(outcome: &Result<u16, TestError>) -> resilient_core::Verdict {
        match outcome {
            Ok(status) if *status < 500 => resilient_core::Verdict::Success,
            _ => resilient_core::Verdict::Failure,
        }
    }
}

#[derive(ChaosSpec)]
#[spec("chaos.replacing")]
struct Replacing;

static REPLACED_BODY: AtomicU64 = AtomicU64::new(0);

/// What a failing dependency answers: a 503, for the classifier to judge.
fn unavailable() -> Result<u16, TestError> {
    Ok(503)
}

#[retryable(JudgedRetry)]
#[chaos(Replacing, outcome = unavailable)]
async fn judged() -> Result<u16, TestError> {
    REPLACED_BODY.fetch_add(1, Ordering::Relaxed);
    Ok(200)
}

fn judged_registry(outcome_rate: f64, seed: i128) -> Registry {
    build(
        Registry::builder()
            .spec::<JudgedRetry>()
            .spec::<Replacing>(),
        vec![
            (
                "chaos.judged_retry",
                table([("delay", s("1ms")), ("attempts", int(2))]),
            ),
            (
                "chaos.replacing",
                table([
                    ("enabled", boolean(true)),
                    ("outcome_rate", float(outcome_rate)),
                    ("seed", int(seed)),
                ]),
            ),
        ],
    )
}

/// A replaced outcome is judged by the spec's own classifier outside, as
/// the body's would be: the retry sees three 503s and gives up, and the
/// body never runs.
#[tokio::test(start_paused = true)]
async fn a_replaced_outcome_is_judged_by_the_classifier_outside() -> TestResult {
    let before = REPLACED_BODY.load(Ordering::Relaxed);
    let registry = judged_registry(1.0, 1);
    let out = registry.scope(judged()).await;
    match out {
        Err(TestError::Resilience(Error::RetryExhausted(gave_up))) => {
            assert_eq!(gave_up.calls, 3, "{gave_up:?}");
        }
        other => return Err(format!("expected the retry to give up, got {other:?}").into()),
    }
    assert_eq!(REPLACED_BODY.load(Ordering::Relaxed) - before, 0);
    let c = counts::<Replacing>(&registry)?;
    assert_eq!((c.calls, c.outcomes_injected, c.errors_injected), (3, 3, 0));
    Ok(())
}

#[derive(ChaosSpec)]
#[spec("chaos.replacing_once")]
struct ReplacingOnce;

#[chaos(ReplacingOnce, outcome = unavailable)]
async fn judged_once() -> Result<u16, TestError> {
    Ok(200)
}

/// Replaced outcomes observed at rate 0.3 over 10 000 calls with seed
/// 20 240 611, from the outcome draws' own stream.
const REPLACED: u64 = 3046;

#[tokio::test]
async fn a_seed_replaces_the_same_share_on_every_run() -> TestResult {
    let mut replaced = Vec::new();
    for _ in 0..2 {
        let registry = registry::<ReplacingOnce>(table([
            ("enabled", boolean(true)),
            ("outcome_rate", float(0.3)),
            ("seed", int(20_240_611)),
        ]));
        let mut n = 0;
        for _ in 0..10_000 {
            if matches!(registry.scope(judged_once()).await, Ok(503)) {
                n += 1;
            }
        }
        let c = counts::<ReplacingOnce>(&registry)?;
        assert_eq!((c.calls, c.outcomes_injected), (10_000, n));
        replaced.push(n);
    }
    // Binomial(10 000, 0.3), as for the errors; then the exact figure.
    assert!((2800..=3200).contains(&replaced[0]), "{replaced:?}");
    assert_eq!(replaced[0], replaced[1]);
    assert_eq!(replaced[0], REPLACED);
    Ok(())
}
