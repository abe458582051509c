//! Fault injection: a seeded spec injects into exactly the same calls on
//! every run, at about its rate; an injected latency is bounded by a
//! timeout outside it; an injected error is retried by a retry outside it
//! and not by one inside; a disabled spec injects nothing; a reload turns
//! it on and off; calls from two threads are all accounted for. Every test
//! counts calls, body runs and injections.

mod support;
use support::*;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use resilient_core::chaos::{ChaosCounts, ChaosSettings};
use resilient_core::settings::Value;
use resilient_core::{
    chaos, retryable, timeout, ChaosSpec, Error, Registry, RegistryBuilder, RetrySpec, Spec,
    TimeoutSpec,
};

type TestResult = Result<(), Box<dyn std::error::Error>>;

#[derive(Debug, thiserror::Error)]
enum TestError {
    #[error(transparent)]
    Resilience(#[from] Error),
}

fn float(x: f64) -> Value {
    Value::Float(x)
}

fn boolean(b: bool) -> Value {
    Value::Bool(b)
}

/// `section` with its spec's log lines off. Only the test that reads the
/// log lines logs: tracing caches, per log line, whether any subscriber
/// listens, and a line first met on another test's thread while this file's
/// capturing subscriber was being set could be cached as unheard.
fn quiet(section: Value) -> Value {
    with(
        section,
        "telemetry",
        table([("logging", table([("enabled", boolean(false))]))]),
    )
}

/// A registry for spec `S` alone, its log lines off.
fn registry<S: Spec>(section: Value) -> Registry {
    support::registry::<S>(quiet(section))
}

/// A registry built with `builder` from `sections`, their log lines off.
fn build(builder: RegistryBuilder, sections: Vec<(&str, Value)>) -> Registry {
    let sections = sections.into_iter().map(|(p, v)| (p, quiet(v))).collect();
    support::build(builder, sections)
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
    assert_eq!(first.len(), SEEDED_INJECTED);
    // Binomial(10 000, 0.3): mean 3000, standard deviation about 46.
    assert!((2800..=3200).contains(&first.len()), "{}", first.len());
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
    let one_thread = crate::registry::<Threads>(table([
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

// --------------------------------------------------------------- telemetry

#[derive(ChaosSpec)]
#[spec("chaos.observed")]
struct Observed;

#[chaos(Observed)]
async fn observed() -> Result<(), TestError> {
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn each_injection_is_counted_by_fault_and_logged_at_debug() -> TestResult {
    let meters = support::capture::Meters::default();
    let capture = support::capture::Capture::default();
    let _subscriber = tracing::subscriber::set_default(capture.clone());
    let section = table([
        ("enabled", boolean(true)),
        ("latency_rate", float(0.5)),
        ("latency", s("10ms")),
        ("error_rate", float(0.25)),
        ("seed", int(5)),
        (
            "telemetry",
            table([("metrics", table([("enabled", boolean(true))]))]),
        ),
    ]);
    // Logging on: the spec's own section, not `quiet`.
    let registry = metrics::with_local_recorder(&meters, || support::registry::<Observed>(section));
    for _ in 0..200 {
        let _ = registry.scope(observed()).await;
    }
    let c = counts::<Observed>(&registry)?;
    assert_eq!(c.calls, 200);
    assert!(c.latency_injected > 0 && c.errors_injected > 0, "{c:?}");
    let labels = |fault| {
        [
            ("spec", "Observed"),
            ("path", "chaos.observed"),
            ("fault", fault),
        ]
    };
    let counter = |fault| meters.counter("resilient_chaos_injected_total", &labels(fault));
    assert_eq!(counter("latency"), Some(c.latency_injected));
    assert_eq!(counter("error"), Some(c.errors_injected));
    let lines = capture.at("resilient::chaos", tracing::Level::DEBUG);
    assert_eq!(
        lines.len() as u64,
        c.latency_injected + c.errors_injected,
        "one DEBUG line per injection"
    );
    let errors = lines
        .iter()
        .filter(|l| l.fields["fault"] == "error")
        .count();
    assert_eq!(errors as u64, c.errors_injected);
    // The snapshot shows the same counts as the handle.
    let snapshot = registry.snapshot();
    let shown = snapshot
        .specs
        .iter()
        .find_map(|s| s.status::<ChaosCounts>())
        .ok_or("no chaos counts in the snapshot")?;
    assert_eq!(*shown, c);
    Ok(())
}
