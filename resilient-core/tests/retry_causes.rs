//! Retry by cause (`cause.<cause>` tables): each test counts the attempts
//! that reached the body, the waits between them on tokio's paused clock,
//! and the budget tokens each retry took.

#![allow(clippy::expect_used, clippy::unwrap_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::capture::Capture;
use support::*;

use std::sync::Mutex;
use std::time::Duration;

use resilient_core::settings::Value;
use resilient_core::{
    retryable, timeout, Cause, Classify, Error, Registry, RetrySpec, Spec, TimeoutSpec, Verdict,
};
use tokio::time::Instant;
use tracing::Level;

#[derive(Debug, thiserror::Error)]
enum CloudError {
    #[error("slow down")]
    Throttling,
    #[error("connection reset")]
    Reset,
    #[error(transparent)]
    Resilience(#[from] Error),
}

/// How an attempt of [`call`] fails.
#[derive(Debug, Clone, Copy)]
enum Fails {
    Throttling,
    Reset,
}

impl Fails {
    fn error(self) -> CloudError {
        match self {
            Fails::Throttling => CloudError::Throttling,
            Fails::Reset => CloudError::Reset,
        }
    }
}

/// AWS's 2026 retry behaviour: a throttling error costs 5 quota tokens and
/// waits from 1 s, any other failure costs 14 and waits from 50 ms.
#[derive(RetrySpec)]
#[spec("causes.aws", classify = custom)]
struct Aws;

/// The same classification, and no `cause` table.
#[derive(RetrySpec)]
#[spec("causes.plain", classify = custom)]
struct Plain;

/// What both specs' classification says: every error a failure, a
/// throttling error throttled, every other failure transient.
fn verdict(outcome: &Result<u32, CloudError>) -> Verdict {
    match outcome {
        Ok(_) => Verdict::Success,
        Err(_) => Verdict::Failure,
    }
}

fn cause(outcome: &Result<u32, CloudError>) -> Cause {
    match outcome {
        Err(CloudError::Throttling) => Cause::Throttled,
        _ => Cause::Transient,
    }
}

impl Classify<u32, CloudError> for Aws {
    fn classify(outcome: &Result<u32, CloudError>) -> Verdict {
        verdict(outcome)
    }
    fn cause(outcome: &Result<u32, CloudError>) -> Cause {
        cause(outcome)
    }
}

impl Classify<u32, CloudError> for Plain {
    fn classify(outcome: &Result<u32, CloudError>) -> Verdict {
        verdict(outcome)
    }
    fn cause(outcome: &Result<u32, CloudError>) -> Cause {
        cause(outcome)
    }
}

/// 3 retries, exponential from 50 ms, and a budget of 500 tokens that
/// nothing refills.
fn base() -> Value {
    table([
        ("delay", s("50ms")),
        ("attempts", int(3)),
        (
            "backoff",
            table([("multiplier", float(2.0)), ("delay_max", s("20s"))]),
        ),
        (
            "retry_budget",
            table([
                ("tokens_max", int(500)),
                ("tokens_initial", int(500)),
                ("ratio", float(0.0)),
            ]),
        ),
    ])
}

/// `base` with AWS 2026's costs and delays.
fn aws() -> Value {
    with(
        base(),
        "cause",
        table([
            ("throttled", table([("delay", s("1s")), ("cost", int(5))])),
            ("transient", table([("cost", int(14))])),
        ]),
    )
}

fn registry_of_both() -> Registry {
    build(
        Registry::builder().spec::<Aws>().spec::<Plain>(),
        vec![(Aws::PATH, aws()), (Plain::PATH, base())],
    )
}

/// One call of spec `S` whose attempts fail as `failures` says, then
/// succeed: the attempts made, the waits between them, and the tokens the
/// budget holds after.
async fn call<S>(r: &Registry, failures: &[Fails]) -> (usize, Vec<Duration>, f64)
where
    S: RetrySpec,
    S::Classifier: Classify<u32, CloudError>,
    CloudError: resilient_core::retry::Exhaustion<S::Exhausted>,
{
    let starts = Mutex::new(Vec::<Instant>::new());
    let out: Result<u32, CloudError> = r
        .scope(async {
            S::get()?
                .call(|| {
                    let mut starts = starts.lock().unwrap();
                    starts.push(Instant::now());
                    let n = starts.len();
                    let failure = failures.get(n - 1).copied();
                    async move {
                        match failure {
                            Some(f) => Err(f.error()),
                            None => Ok(n as u32),
                        }
                    }
                })
                .await
        })
        .await;
    let starts = starts.into_inner().unwrap();
    let waits = starts.windows(2).map(|w| w[1] - w[0]).collect();
    let tokens = r
        .sync_scope(S::get)
        .unwrap()
        .budget_tokens()
        .expect("a budget");
    if failures.len() < 4 {
        assert!(out.is_ok(), "{out:?}");
    }
    (starts.len(), waits, tokens)
}

const MS: fn(u64) -> Duration = Duration::from_millis;

#[tokio::test(start_paused = true)]
async fn throttled_waits_start_at_a_second_and_cost_five_tokens() {
    let r = registry_of_both();
    let (attempts, waits, tokens) = call::<Aws>(&r, &[Fails::Throttling; 3]).await;
    println!("throttled ×3: {attempts} attempts, waits {waits:?}, tokens left {tokens}");
    assert_eq!(attempts, 4);
    assert_eq!(waits, vec![MS(1000), MS(2000), MS(4000)]);
    assert_eq!(tokens, 500.0 - 3.0 * 5.0);
}

#[tokio::test(start_paused = true)]
async fn transient_waits_start_at_50_ms_and_cost_fourteen_tokens() {
    let r = registry_of_both();
    let (attempts, waits, tokens) = call::<Aws>(&r, &[Fails::Reset; 3]).await;
    println!("transient ×3: {attempts} attempts, waits {waits:?}, tokens left {tokens}");
    assert_eq!(attempts, 4);
    assert_eq!(waits, vec![MS(50), MS(100), MS(200)]);
    assert_eq!(tokens, 500.0 - 3.0 * 14.0);
}

/// Each retry waits and pays as the failure just before it says; the
/// backoff's step counts every retry of the call, whatever its cause.
#[tokio::test(start_paused = true)]
async fn each_retry_waits_and_pays_by_the_cause_of_the_failure_before_it() {
    let r = registry_of_both();
    let failures = [Fails::Throttling, Fails::Reset, Fails::Throttling];
    let (attempts, waits, tokens) = call::<Aws>(&r, &failures).await;
    println!("throttled, transient, throttled: {attempts} attempts, waits {waits:?}, tokens left {tokens}");
    assert_eq!(attempts, 4);
    assert_eq!(waits, vec![MS(1000), MS(100), MS(4000)]);
    assert_eq!(tokens, 500.0 - 5.0 - 14.0 - 5.0);
}

/// A spec without a `cause` table waits and pays as before, whatever
/// causes its classification names: from `delay`, one token a retry.
#[tokio::test(start_paused = true)]
async fn a_spec_without_cause_tables_waits_and_pays_as_before() {
    let r = registry_of_both();
    let (attempts, waits, tokens) = call::<Plain>(&r, &[Fails::Throttling; 3]).await;
    println!(
        "no cause table, throttled ×3: {attempts} attempts, waits {waits:?}, tokens left {tokens}"
    );
    assert_eq!(attempts, 4);
    assert_eq!(waits, vec![MS(50), MS(100), MS(200)]);
    assert_eq!(tokens, 497.0);
    let (attempts, waits, tokens) = call::<Plain>(&r, &[Fails::Reset; 3]).await;
    assert_eq!(attempts, 4);
    assert_eq!(waits, vec![MS(50), MS(100), MS(200)]);
    assert_eq!(tokens, 494.0);
}

/// A retry the bucket cannot pay for is not made: 20 tokens pay for one
/// transient retry (14), not for a second; a throttled one (5) still
/// passes.
#[tokio::test(start_paused = true)]
async fn a_retry_the_bucket_cannot_pay_for_ends_the_call() {
    let section = with(
        aws(),
        "retry_budget",
        table([
            ("tokens_max", int(500)),
            ("tokens_initial", int(20)),
            ("ratio", float(0.0)),
        ]),
    );
    let r = registry::<Aws>(section);
    let (attempts, waits, tokens) = call::<Aws>(&r, &[Fails::Reset; 4]).await;
    println!("20 tokens, transient: {attempts} attempts, waits {waits:?}, tokens left {tokens}");
    assert_eq!((attempts, tokens), (2, 6.0));
    let (attempts, _, tokens) = call::<Aws>(&r, &[Fails::Throttling; 4]).await;
    assert_eq!((attempts, tokens), (2, 1.0));
}

// ------------------------------------------------------------ timeouts

#[derive(RetrySpec)]
#[spec("causes.timed")]
struct TimedRetry;

#[derive(TimeoutSpec)]
#[spec("causes.attempt")]
struct AttemptTimeout;

static STARTS: Mutex<Vec<Instant>> = Mutex::new(Vec::new());

#[retryable(TimedRetry)]
#[timeout(AttemptTimeout)]
async fn slow() -> Result<(), CloudError> {
    STARTS.lock().unwrap().push(Instant::now());
    tokio::time::sleep(Duration::from_secs(10)).await;
    Ok(())
}

/// A timeout inside the retry is a failure of cause `timeout`: its retries
/// wait from `cause.timeout.delay`.
#[tokio::test(start_paused = true)]
async fn an_attempt_timed_out_inside_waits_from_the_timeout_delay() {
    let r = build(
        Registry::builder()
            .spec::<TimedRetry>()
            .spec::<AttemptTimeout>(),
        vec![
            (
                TimedRetry::PATH,
                table([
                    ("delay", s("50ms")),
                    ("attempts", int(2)),
                    ("cause", table([("timeout", table([("delay", s("3s"))]))])),
                ]),
            ),
            (AttemptTimeout::PATH, table([("duration", s("200ms"))])),
        ],
    );
    let out = r.scope(slow()).await;
    let starts = STARTS.lock().unwrap().clone();
    let gaps: Vec<Duration> = starts.windows(2).map(|w| w[1] - w[0]).collect();
    println!(
        "timed out ×3: {} attempts, gaps {gaps:?}, {out:?}",
        starts.len()
    );
    assert!(matches!(
        out,
        Err(CloudError::Resilience(Error::RetryExhausted(_)))
    ));
    assert_eq!(starts.len(), 3);
    // Each gap: the 200 ms the attempt ran, then the wait.
    assert_eq!(gaps, vec![MS(3200), MS(3200)]);
}

// ------------------------------------------------------------ settings

#[derive(RetrySpec)]
#[spec("causes.checked")]
struct Checked;

/// The problems of `section` for [`Checked`], as displayed.
fn problems(section: Value) -> Vec<String> {
    match Registry::builder()
        .spec::<Checked>()
        .build(&root(vec![(Checked::PATH, section)]))
    {
        Ok(_) => Vec::new(),
        Err(problems) => problems.iter().map(ToString::to_string).collect(),
    }
}

fn with_cause(section: Value, name: &str, keys: Value) -> Value {
    with(section, "cause", table([(name, keys)]))
}

#[test]
fn a_misspelt_cause_is_an_unknown_key_with_the_nearest_suggested() {
    let found = problems(with_cause(base(), "throttle", table([("cost", int(5))])));
    println!("{found:#?}");
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].contains("cause.throttle"), "{found:#?}");
    assert!(found[0].contains("did you mean `throttled`?"), "{found:#?}");
}

#[test]
fn zero_negative_and_overflowing_costs_are_problems() {
    for cost in [int(0), int(-1), int(5_000_000_000), s("five")] {
        let found = problems(with_cause(
            base(),
            "throttled",
            table([("cost", cost.clone())]),
        ));
        println!("cost {cost:?}: {found:#?}");
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(found[0].contains("cause.throttled.cost"), "{found:#?}");
    }
}

#[test]
fn a_cost_the_bucket_can_never_hold_is_a_problem() {
    let found = problems(with_cause(base(), "transient", table([("cost", int(501))])));
    println!("{found:#?}");
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(
        found[0].contains("must be ≤ `retry_budget.tokens_max` (500)"),
        "{found:#?}"
    );
}

#[test]
fn a_cause_delay_above_delay_max_is_a_problem() {
    let found = problems(with_cause(
        base(),
        "throttled",
        table([("delay", s("30s"))]),
    ));
    println!("{found:#?}");
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].contains("cause.throttled.delay"), "{found:#?}");
    assert!(found[0].contains("backoff.delay_max"), "{found:#?}");
}

#[test]
fn an_empty_cause_table_is_a_problem() {
    let found = problems(with_cause(base(), "timeout", table([])));
    println!("{found:#?}");
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].contains("has no effect"), "{found:#?}");
}

#[test]
fn a_key_of_a_cause_written_in_the_cause_table_is_a_problem() {
    let found = problems(with(base(), "cause", table([("delay", s("1s"))])));
    println!("{found:#?}");
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(
        found[0]
            .contains("key `cause.delay` belongs in the table of a cause: `cause.transient.delay`"),
        "{found:#?}"
    );
}

/// The WARN lines of building a registry of [`Checked`] from `section`.
fn warnings(section: Value) -> Vec<String> {
    let capture = Capture::default();
    let _subscriber = tracing::subscriber::set_default(capture.clone());
    drop(registry::<Checked>(section));
    capture
        .at("resilient::registry", Level::WARN)
        .into_iter()
        .map(|l| l.message)
        .collect()
}

#[test]
fn a_cost_without_a_budget_is_warned_about() {
    let no_budget = table([("delay", s("50ms")), ("attempts", int(3))]);
    let warned = warnings(with_cause(
        no_budget.clone(),
        "throttled",
        table([("cost", int(5))]),
    ));
    assert_eq!(
        warned,
        vec!["`causes.checked.cause.throttled.cost` has no effect: the spec has no retry budget to take tokens from: add a `retry_budget` table, or remove `cost`".to_owned()]
    );
    // A delay needs no budget; a cost with one is in use.
    assert_eq!(
        warnings(with_cause(
            no_budget,
            "throttled",
            table([("delay", s("1s"))])
        )),
        Vec::<String>::new()
    );
    assert_eq!(
        warnings(with_cause(base(), "throttled", table([("cost", int(5))]))),
        Vec::<String>::new()
    );
}

/// A shared bucket gives one token per retry: another cost is a problem.
#[test]
fn a_cost_on_a_shared_budget_is_a_problem() {
    let shared = with(
        base(),
        "retry_budget",
        table([
            ("tokens_max", int(500)),
            ("backend", s("redis")),
            ("on_backend_failure", s("deny")),
        ]),
    );
    let found = problems(with_cause(shared, "throttled", table([("cost", int(5))])));
    println!("{found:#?}");
    assert!(
        found.iter().any(|p| p.contains(
            "key `cause.throttled.cost` must be 1 with `retry_budget.backend = \"redis\"`"
        )),
        "{found:#?}"
    );
}
