//! What a stack will do, read before it runs: the calls and waits of each
//! spec, the most calls and the longest wait of each annotated fn, and the
//! checks of specs against each other at startup and at each reload. The
//! figures are the seeds' own, counted by hand.

#![allow(clippy::expect_used, clippy::unwrap_used)] // a test that panics on an unexpected outcome is the point
#![allow(dead_code)] // the annotated fns are explained, not called

mod support;
use support::capture::Capture;
use support::*;

use std::time::Duration;

use resilient_core::explain::{Wait, WorstCase};
use resilient_core::settings::Value;
use resilient_core::{
    circuit_breakable, concurrency_limit, fallback, hedged, rate_limited, retryable, timeout,
    CircuitBreakerSpec, ConcurrencyLimitSpec, Error, HedgingSpec, RateLimiterSpec, Registry,
    RetrySpec, TimeoutSpec,
};
use tracing::Level;

#[derive(Debug, thiserror::Error)]
enum TestError {
    #[error(transparent)]
    Resilience(#[from] Error),
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

// ---------------------------------------------------------------- seed 000

#[derive(RetrySpec)]
#[spec("explain.seed000")]
struct Seed000;

#[retryable(Seed000)]
async fn seed000() -> Result<u32, TestError> {
    Ok(1)
}

/// Seed 000: a delay of 20 ms doubling, capped at 100 ms, 5 attempts: 6
/// calls, waits of 20, 40, 80, 100 and 100 ms.
#[test]
fn seed_000_reads_as_six_calls_and_its_five_waits() {
    let r = registry::<Seed000>(table([
        ("delay", s("20ms")),
        ("attempts", int(5)),
        (
            "backoff",
            table([("multiplier", float(2.0)), ("delay_max", s("100ms"))]),
        ),
    ]));
    let explained = r.explain();
    let spec = explained.spec("Seed000").unwrap();
    let waits: Vec<Duration> = spec.waits.iter().map(|w| w.max).collect();
    assert_eq!(waits, [ms(20), ms(40), ms(80), ms(100), ms(100)]);
    assert!(spec.waits.iter().all(|w| w.min == w.max), "no jitter");
    assert_eq!(
        spec.says,
        [
            "at most 6 calls per call: the first, then up to 5 retries (`attempts = 5`)",
            "waits before each retry: 20ms, 40ms, 80ms, 100ms, 100ms; 340ms in all at most",
        ]
    );
    let f = explained.function("seed000").unwrap();
    assert_eq!(f.max_calls, Some(6));
    assert_eq!(
        f.worst_case,
        WorstCase::Body {
            waits: ms(340),
            bodies: 6
        }
    );
}

// ---------------------------------------------------------------- seed 002

#[derive(RetrySpec)]
#[spec("explain.seed002")]
struct Seed002;

#[retryable(Seed002)]
async fn seed002() -> Result<u32, TestError> {
    Ok(1)
}

/// Seed 002: `attempts` 0..=3 are 1..=4 calls per request, at a glance.
#[test]
fn seed_002_attempts_read_as_calls() {
    for attempts in 0..=3u32 {
        let r = registry::<Seed002>(table([
            ("delay", s("100ms")),
            ("attempts", int(i128::from(attempts))),
        ]));
        let explained = r.explain();
        let calls = u64::from(attempts) + 1;
        assert_eq!(
            explained.function("seed002").unwrap().max_calls,
            Some(calls)
        );
        assert!(
            explained.spec("Seed002").unwrap().says[0]
                .starts_with(&format!("at most {calls} call")),
            "{:?}",
            explained.spec("Seed002").unwrap().says
        );
    }
}

// ---------------------------------------------------------------- a whole stack

#[derive(CircuitBreakerSpec)]
#[spec("explain.breaker")]
struct Breaker;

#[derive(RetrySpec)]
#[spec("explain.retry")]
struct Retry;

#[derive(TimeoutSpec)]
#[spec("explain.timeout")]
struct Timeout;

#[derive(ConcurrencyLimitSpec)]
#[spec("explain.limit")]
struct Limit;

#[derive(HedgingSpec)]
#[spec("explain.hedging")]
struct Hedging;

#[fallback(method = "cached(id)")]
#[circuit_breakable(Breaker)]
#[concurrency_limit(Limit)]
#[retryable(Retry)]
#[hedged(Hedging)]
#[timeout(Timeout)]
async fn find(id: u64) -> Result<u64, TestError> {
    Ok(id)
}

async fn cached(id: u64) -> Result<u64, TestError> {
    Ok(id)
}

fn stack() -> Registry {
    build(
        Registry::builder()
            .spec::<Breaker>()
            .spec::<Retry>()
            .spec::<Timeout>()
            .spec::<Limit>()
            .spec::<Hedging>(),
        vec![
            ("explain.breaker", breaker_section(50, 10, "30s", 100)),
            (
                "explain.retry",
                table([
                    ("delay", s("100ms")),
                    ("attempts", int(2)),
                    (
                        "jitter",
                        table([("type", s("full")), ("ratio", float(0.5))]),
                    ),
                ]),
            ),
            ("explain.timeout", table([("duration", s("1s"))])),
            (
                "explain.limit",
                table([
                    ("limit", int(8)),
                    ("policy", s("block")),
                    ("max_wait", s("250ms")),
                ]),
            ),
            (
                "explain.hedging",
                table([("delay", s("300ms")), ("max_hedged_attempts", int(1))]),
            ),
        ],
    )
}

#[test]
fn a_whole_stack_multiplies_retries_by_hedges_and_is_bounded_by_its_timeouts() {
    let explained = stack().explain();
    let f = explained.function("find").unwrap();
    assert_eq!(
        f.chain,
        [
            "#[fallback(method = \"cached(id)\")]",
            "#[circuit_breakable(Breaker)]",
            "#[concurrency_limit(Limit)]",
            "#[retryable(Retry)]",
            "#[hedged(Hedging)]",
            "#[timeout(Timeout)]",
        ]
    );
    assert_eq!(
        f.max_calls,
        Some(6),
        "3 calls of the retry, each 2 attempts"
    );
    // Each attempt: 1s, and a hedge started 300ms in; 3 of them with 2
    // waits of at most 100ms; the limit's wait of 250ms first.
    assert_eq!(
        f.worst_case,
        WorstCase::Bounded {
            at_most: ms(3 * 1300 + 200 + 250)
        }
    );
    assert_eq!(f.worst_case.to_string(), "4.35s");
    assert_eq!(
        explained.spec("Retry").unwrap().waits,
        [Wait {
            min: ms(50),
            max: ms(100)
        }; 2]
    );
    assert_eq!(f.outcomes.len(), 7, "{:#?}", f.outcomes);
    assert!(f.outcomes[0].starts_with("on any failure, the answer of `cached(id)`"));
    let text = explained.to_string();
    assert!(
        text.contains("fn explain::find (async)\n  #[fallback(method = \"cached(id)\")]\n"),
        "{text}"
    );
    assert!(
        text.contains("  calls to the dependency per call: at most 6 (a retry budget permitting)\n  longest before an answer: 4.35s\n"),
        "{text}"
    );
}

// ---------------------------------------------------------------- checks

#[derive(RetrySpec)]
#[spec("explain.inner_retry")]
struct InnerRetry;

#[derive(TimeoutSpec)]
#[spec("explain.attempt")]
struct Attempt;

#[retryable(InnerRetry)]
#[timeout(Attempt)]
async fn outer_timeout() -> Result<u32, TestError> {
    Ok(1)
}

fn outer_timeout_registry(retry: Value) -> Result<Registry, Vec<String>> {
    Registry::builder()
        .spec::<InnerRetry>()
        .spec::<Attempt>()
        .build(&root(vec![
            ("explain.inner_retry", retry),
            ("explain.attempt", table([("duration", s("1s"))])),
        ]))
        .map_err(|p| p.iter().map(ToString::to_string).collect())
}

fn warnings_of<T>(f: impl FnOnce() -> T) -> (T, Vec<String>) {
    let capture = Capture::default();
    let _subscriber = tracing::subscriber::set_default(capture.clone());
    let out = f();
    let lines = capture
        .at("resilient::registry", Level::WARN)
        .into_iter()
        .map(|l| l.message)
        .collect();
    (out, lines)
}

fn plain_retry(delay: &str) -> Value {
    table([("delay", s(delay)), ("attempts", int(2))])
}

#[test]
fn a_retry_timeout_shorter_than_its_first_wait_is_a_problem_and_one_shorter_than_an_attempt_a_warning(
) {
    let with_timeout = |t: &str| with(plain_retry("200ms"), "timeout", s(t));
    let problems = outer_timeout_registry(with_timeout("150ms")).unwrap_err();
    assert_eq!(
        problems,
        ["InnerRetry at `explain.inner_retry`: key `timeout` is 150ms, no longer than the wait before the first retry (200ms): no retry can ever start; make `timeout` longer than `delay`, or remove it"]
    );
    let (built, warned) = warnings_of(|| outer_timeout_registry(with_timeout("1s")));
    assert!(built.is_ok());
    assert_eq!(
        warned,
        ["`explain.inner_retry.timeout` (1s) leaves no time to retry an attempt that `Attempt` ended after 1s in `explain::outer_timeout` (200ms wait first): only failures faster than 800ms are retried; lengthen `explain.inner_retry.timeout` past 1.2s, or shorten `explain.attempt.duration`"]
    );
}

#[test]
fn a_reload_into_a_retry_that_can_never_start_is_refused() {
    let r = outer_timeout_registry(plain_retry("200ms")).unwrap();
    let problems = r
        .reload(&root(vec![
            (
                "explain.inner_retry",
                with(plain_retry("200ms"), "timeout", s("100ms")),
            ),
            ("explain.attempt", table([("duration", s("1s"))])),
        ]))
        .unwrap_err();
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert_eq!(problems[0].key, "timeout");
    assert_eq!(
        r.sync_scope(|| InnerRetry::get().map(|h| h.settings().timeout))
            .unwrap(),
        None,
        "the running settings stay"
    );
}

#[derive(HedgingSpec)]
#[spec("explain.late_hedge")]
struct LateHedge;

#[derive(TimeoutSpec)]
#[spec("explain.hedge_attempt")]
struct HedgeAttempt;

#[hedged(LateHedge)]
#[timeout(HedgeAttempt)]
async fn late_hedge() -> Result<u32, TestError> {
    Ok(1)
}

#[test]
fn a_hedge_that_starts_after_its_attempt_timed_out_is_a_warning() {
    let (built, warned) = warnings_of(|| {
        Registry::builder()
            .spec::<LateHedge>()
            .spec::<HedgeAttempt>()
            .build(&root(vec![
                (
                    "explain.late_hedge",
                    table([("delay", s("500ms")), ("max_hedged_attempts", int(2))]),
                ),
                ("explain.hedge_attempt", table([("duration", s("500ms"))])),
            ]))
    });
    assert!(built.is_ok());
    assert_eq!(
        warned,
        ["`explain.late_hedge.delay` (500ms) is at or past `explain.hedge_attempt.duration` (500ms) below it in `explain::late_hedge`: an attempt has timed out before the next one starts, so attempts never run side by side; make the hedge's `delay` shorter than the timeout (near the dependency's p95)"]
    );
}

#[derive(RateLimiterSpec)]
#[spec("explain.quota")]
struct Quota;

#[derive(CircuitBreakerSpec)]
#[spec("explain.timed_breaker")]
struct TimedBreaker;

#[rate_limited(Quota)]
#[circuit_breakable(TimedBreaker)]
async fn quota() -> Result<u32, TestError> {
    Ok(1)
}

#[test]
fn a_breaker_its_rate_limiter_cannot_feed_enough_calls_is_a_problem() {
    let timed = |minimum: i128| {
        table([
            ("failure_rate_threshold", int(50)),
            ("minimum_required_calls", int(minimum)),
            ("wait_duration_in_open_state", s("30s")),
            ("permitted_calls_in_half_open_state", int(1)),
            ("type", s("time_based")),
            ("time_based", table([("window_duration", s("10s"))])),
        ])
    };
    let registry = |minimum| {
        Registry::builder()
            .spec::<Quota>()
            .spec::<TimedBreaker>()
            .build(&root(vec![
                (
                    "explain.quota",
                    table([
                        ("limit_for_period", int(1)),
                        ("limit_refresh_period", s("1s")),
                    ]),
                ),
                ("explain.timed_breaker", timed(minimum)),
            ]))
    };
    let problems: Vec<String> = registry(100)
        .unwrap_err()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        problems,
        ["TimedBreaker at `explain.timed_breaker`: key `minimum_required_calls` is 100, and `Quota` above it in `explain::quota` lets at most 11 calls through in the breaker's window of 10s: the breaker can never open; lower `minimum_required_calls`, or lengthen the window"]
    );
    assert!(registry(11).is_ok(), "11 calls can reach it");
}

#[derive(RetrySpec)]
#[spec("explain.slow_retry")]
struct SlowRetry;

#[derive(CircuitBreakerSpec)]
#[spec("explain.quick_breaker")]
struct QuickBreaker;

#[retryable(SlowRetry)]
#[circuit_breakable(QuickBreaker)]
async fn slow_retry() -> Result<u32, TestError> {
    Ok(1)
}

#[test]
fn a_retry_of_rejections_that_waits_past_the_open_wait_is_a_warning() {
    let build = |retry_rejections: bool| {
        warnings_of(|| {
            Registry::builder()
                .spec::<SlowRetry>()
                .spec::<QuickBreaker>()
                .build(&root(vec![
                    (
                        "explain.slow_retry",
                        table([
                            ("delay", s("2s")),
                            ("attempts", int(3)),
                            ("retry_call_not_permitted", boolean(retry_rejections)),
                        ]),
                    ),
                    ("explain.quick_breaker", breaker_section(50, 10, "1s", 100)),
                ]))
        })
    };
    let (built, warned) = build(true);
    assert!(built.is_ok());
    assert_eq!(
        warned,
        ["`explain.slow_retry` waits at least 2s before a retry, past `explain.quick_breaker.wait_duration_in_open_state` (1s) in `explain::slow_retry`: every retry of a call the open breaker rejected arrives as a half-open probe; shorten the retry's `delay`, or lengthen the open wait (longest wait: 2s)"]
    );
    let (built, warned) = build(false);
    assert!(built.is_ok());
    assert_eq!(warned, Vec::<String>::new(), "a rejection ends the call");
}

// ---------------------------------------------------------------- retry settings read as calls and waits

#[derive(RetrySpec)]
#[spec("explain.by_cause")]
struct ByCause;

#[retryable(ByCause)]
async fn by_cause() -> Result<u32, TestError> {
    Ok(1)
}

/// AWS's 2026 retry behaviour as cause tables: a transient failure waits
/// from 50 ms, a throttling one from 1 s and costs 5 tokens. The worst case
/// is the longest wait before each retry, whatever the cause: 1 s, 2 s and
/// 4 s, not the 50, 100 and 200 ms of `delay` alone.
#[test]
fn a_cause_that_waits_longer_sets_the_worst_case_and_is_said_with_its_waits_and_cost() {
    let r = registry::<ByCause>(table([
        ("delay", s("50ms")),
        ("attempts", int(3)),
        ("backoff", table([("multiplier", float(2.0))])),
        ("retry_budget", table([("tokens_max", int(500))])),
        (
            "cause",
            table([("throttled", table([("delay", s("1s")), ("cost", int(5))]))]),
        ),
    ]));
    let explained = r.explain();
    let f = explained.function("by_cause").unwrap();
    assert_eq!(f.max_calls, Some(4));
    assert_eq!(
        f.worst_case,
        WorstCase::Body {
            waits: ms(1000 + 2000 + 4000),
            bodies: 4
        }
    );
    let says = &explained.spec("ByCause").unwrap().says;
    assert!(
        says.contains(
            &"waits before each retry after a transient or timeout failure: 50ms, 100ms, 200ms; 350ms in all at most".to_owned()
        ),
        "{says:#?}"
    );
    assert!(
        says.contains(
            &"waits before each retry after a throttled failure (`cause.throttled.delay`): 1s, 2s, 4s; 7s in all at most".to_owned()
        ),
        "{says:#?}"
    );
    assert!(
        says.contains(
            &"a retry after a throttled failure spends 5 tokens of the budget (`cause.throttled.cost`)"
                .to_owned()
        ),
        "{says:#?}"
    );
    // A transient failure with a delay of its own: `delay`'s waits are
    // said for the other causes, and the transient ones apart.
    let r = registry::<ByCause>(table([
        ("delay", s("50ms")),
        ("attempts", int(2)),
        (
            "cause",
            table([("transient", table([("delay", s("10ms"))]))]),
        ),
    ]));
    let explained = r.explain();
    assert_eq!(
        explained.spec("ByCause").unwrap().says[1..],
        [
            "waits before each retry after a throttled or timeout failure: 50ms, 50ms; 100ms in all at most",
            "waits before each retry after a transient failure (`cause.transient.delay`): 10ms, 10ms; 20ms in all at most",
        ]
    );
}

#[derive(RetrySpec)]
#[spec("explain.many")]
struct Many;

#[retryable(Many)]
async fn many() -> Result<u32, TestError> {
    Ok(1)
}

/// `attempts` may be `u32::MAX`: the worst case is not summed wait by wait
/// past the first 10,000 (four billion of them took the explanation minutes),
/// and stays exact where each wait past those is the same.
#[test]
fn the_largest_attempts_are_explained_at_once_and_exactly() {
    let started = std::time::Instant::now();
    let r = registry::<Many>(table([
        ("delay", s("0ms")),
        ("attempts", int(4_294_967_295)),
    ]));
    let f = r.explain().function("many").unwrap().clone();
    assert_eq!(f.max_calls, Some(4_294_967_296));
    assert_eq!(
        f.worst_case,
        WorstCase::Body {
            waits: Duration::ZERO,
            bodies: 4_294_967_296
        }
    );
    // Capped at 100ms from the fourth wait on: 20 + 40 + 80 + 100 × 19,997.
    let r = registry::<Many>(table([
        ("delay", s("20ms")),
        ("attempts", int(20_000)),
        (
            "backoff",
            table([("multiplier", float(2.0)), ("delay_max", s("100ms"))]),
        ),
    ]));
    let f = r.explain().function("many").unwrap().clone();
    assert_eq!(
        f.worst_case,
        WorstCase::Body {
            waits: ms(20 + 40 + 80 + 100 * 19_997),
            bodies: 20_001
        }
    );
    // A step that grows each wait: 1ms, 2ms, … 20,000ms, counted at the
    // longest past the first 10,000: at most 20,000 × 20,000ms, at least
    // the exact sum.
    let r = registry::<Many>(table([
        ("delay", s("1ms")),
        ("delay_step", s("1ms")),
        ("attempts", int(20_000)),
    ]));
    let f = r.explain().function("many").unwrap().clone();
    let exact = ms(20_000 * 20_001 / 2);
    match f.worst_case {
        WorstCase::Body { waits, bodies } => {
            assert_eq!(bodies, 20_001);
            assert!(waits >= exact && waits <= ms(20_000 * 20_000), "{waits:?}");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[derive(RetrySpec)]
#[spec("explain.announced")]
struct Announced;

#[derive(ConcurrencyLimitSpec)]
#[spec("explain.shedding")]
struct Shedding;

#[concurrency_limit(Shedding)]
#[retryable(Announced)]
async fn announced() -> Result<u32, TestError> {
    Ok(1)
}

/// Every setting that changes what a call does is said: adaptive
/// throttling, the attempt header, a shared outer budget, and the limit's
/// shedding of announced retries (which the attribute does not read).
#[test]
fn throttling_the_attempt_header_the_outer_budget_and_shedding_are_said() {
    let r = build(
        Registry::builder().spec::<Announced>().spec::<Shedding>(),
        vec![
            (
                "explain.announced",
                table([
                    ("delay", s("10ms")),
                    ("attempts", int(2)),
                    ("attempt_header", s("x-retry-attempt")),
                    ("share_outer_budget", Value::Bool(true)),
                    (
                        "throttle",
                        table([
                            ("k", float(2.0)),
                            ("window", s("2m")),
                            ("first_calls", Value::Bool(true)),
                        ]),
                    ),
                ]),
            ),
            (
                "explain.shedding",
                table([
                    ("limit", int(10)),
                    ("retry_header", s("x-retry-attempt")),
                    ("retry_share", float(0.25)),
                ]),
            ),
        ],
    );
    let explained = r.explain();
    let retry = &explained.spec("Announced").unwrap().says;
    for said in [
        "adaptive throttling: over the last 120s, a retry and a first call (`first_calls = true`) are refused with probability max(0, (requests - 2·accepts) / (requests + 1)), so that the attempts stay near 2 times those the dependency accepts",
        "each retry of an HTTP request sends `x-retry-attempt: <attempts before it>`, none on the first call (`attempt_header`; sent by the retry middleware, `AttemptHeaderLayer` and `retry::with_attempt_header`)",
        "a retry made inside another retry's call spends the outer spec's budget, at once (`share_outer_budget`)",
    ] {
        assert!(retry.contains(&said.to_owned()), "{said}\n{retry:#?}");
    }
    let limit = &explained.spec("Shedding").unwrap().says;
    assert_eq!(
        limit[1],
        "a request that announces a retry in `x-retry-attempt` is refused at once when it is full, and never waits, and retries hold at most 2 of its 10 places (`retry_share = 0.25`); read by the layers applied with `reading_retry_header`, not by `#[concurrency_limit]`",
        "{limit:#?}"
    );
}

/// A cause table that waits less than `delay` lets a retry start within
/// the retry's `timeout`: no problem then. An attempt that timed out waits
/// as `cause.timeout` says, and the warning counts that wait.
#[test]
fn a_cause_that_waits_less_lets_a_retry_start_within_the_timeout() {
    let retry = |overall: &str, cause_delay: &str| {
        let cause = table([("timeout", table([("delay", s(cause_delay))]))]);
        with(
            with(plain_retry("200ms"), "timeout", s(overall)),
            "cause",
            cause,
        )
    };
    // Timed-out attempts wait 10ms: a retry starts well within 1.5s.
    let (built, warned) = warnings_of(|| outer_timeout_registry(retry("1.5s", "10ms")));
    assert!(built.is_ok(), "{:?}", built.err());
    assert!(warned.is_empty(), "{warned:#?}");
    // 150ms is shorter than `delay`, not than the timeout cause's wait: no
    // problem, but a timed-out attempt (1s) is never retried.
    let (built, warned) = warnings_of(|| outer_timeout_registry(retry("150ms", "10ms")));
    assert!(built.is_ok(), "{:?}", built.err());
    assert_eq!(
        warned,
        ["`explain.inner_retry.timeout` (150ms) leaves no time to retry an attempt that `Attempt` ended after 1s in `explain::outer_timeout` (10ms wait first): only failures faster than 140ms are retried; lengthen `explain.inner_retry.timeout` past 1.01s, or shorten `explain.attempt.duration`"]
    );
    // Every cause waits 200ms or more: the problem stays.
    let problems = outer_timeout_registry(retry("150ms", "300ms")).unwrap_err();
    assert_eq!(
        problems,
        ["InnerRetry at `explain.inner_retry`: key `timeout` is 150ms, no longer than the wait before the first retry (200ms): no retry can ever start; make `timeout` longer than `delay`, or remove it"]
    );
}

// ---------------------------------------------------------------- a fallback on a retry's rejections

#[derive(RetrySpec)]
#[spec("explain.first_calls")]
struct FirstCalls;

#[fallback(method = "stale()", on = rejection)]
#[retryable(FirstCalls)]
async fn throttled() -> Result<u32, TestError> {
    Ok(1)
}

async fn stale() -> Result<u32, TestError> {
    Ok(0)
}

/// `on = rejection` above a retry alone compiles (adaptive throttling's
/// `first_calls` is a setting), and the registry warns, naming the fn and
/// the retry's path, when the retry cannot reject.
#[test]
fn a_fallback_on_rejections_of_a_retry_that_never_rejects_is_a_warning() {
    let expected = "`#[fallback(method = \"stale()\", on = rejection)]` in `explain::throttled` is never taken: below it only a retry can reject, and only a first call refused by adaptive throttling, which `explain.first_calls` does not enable; set `throttle.first_calls = true` there, or answer other failures (`on = resilience`, or no `on`)";
    let throttle =
        |first_calls: bool| table([("k", float(2.0)), ("first_calls", Value::Bool(first_calls))]);
    let cases = [
        (plain_retry("10ms"), true),
        (with(plain_retry("10ms"), "throttle", throttle(false)), true),
        (with(plain_retry("10ms"), "throttle", throttle(true)), false),
    ];
    for (section, warns) in cases {
        let (built, warned) = warnings_of(|| {
            Registry::builder()
                .spec::<FirstCalls>()
                .build(&root(vec![("explain.first_calls", section.clone())]))
        });
        let r = built.unwrap();
        let expect: &[&str] = if warns { &[expected] } else { &[] };
        assert_eq!(warned, expect, "{section:?}");
        // The same at a reload into the other setting.
        let (reloaded, warned) = warnings_of(|| {
            r.reload(&root(vec![(
                "explain.first_calls",
                with(plain_retry("10ms"), "throttle", throttle(warns)),
            )]))
        });
        assert!(reloaded.is_ok(), "{reloaded:?}");
        let expect: &[&str] = if warns { &[] } else { &[expected] };
        assert_eq!(warned, expect, "reloaded from {section:?}");
    }
}

// ---------------------------------------------------------------- slow calls a timeout ends first

#[derive(TimeoutSpec)]
#[spec("explain.slow_timeout")]
struct SlowTimeout;

#[derive(CircuitBreakerSpec)]
#[spec("explain.slow_breaker")]
struct SlowBreaker;

#[timeout(SlowTimeout)]
#[circuit_breakable(SlowBreaker)]
async fn slow_guarded() -> Result<u32, TestError> {
    Ok(1)
}

/// A breaker's slow-call threshold at or past the timeout above it counts
/// no call slow: warned of, naming both keys; a shorter one is not.
#[test]
fn a_slow_call_threshold_a_timeout_above_cuts_first_is_a_warning() {
    let build_with = |threshold: &str| {
        warnings_of(|| {
            Registry::builder()
                .spec::<SlowTimeout>()
                .spec::<SlowBreaker>()
                .build(&root(vec![
                    ("explain.slow_timeout", table([("duration", s("1s"))])),
                    (
                        "explain.slow_breaker",
                        with(
                            breaker_section(50, 10, "30s", 100),
                            "slow_call",
                            table([
                                ("duration_threshold", s(threshold)),
                                ("rate_threshold", int(50)),
                            ]),
                        ),
                    ),
                ]))
        })
    };
    for threshold in ["1s", "2s"] {
        let (built, warned) = build_with(threshold);
        assert!(built.is_ok(), "{:?}", built.err());
        assert_eq!(
            warned,
            [format!("`explain.slow_breaker.slow_call.duration_threshold` ({threshold}) is at or past `explain.slow_timeout.duration` (1s) above it in `explain::slow_guarded`: a call that slow is ended by the timeout first, and a call ended from outside counts neither way, so no call is ever counted slow and `slow_call.rate_threshold` never opens the breaker; make the threshold shorter than the timeout")]
        );
    }
    let (built, warned) = build_with("500ms");
    assert!(built.is_ok(), "{:?}", built.err());
    assert!(warned.is_empty(), "{warned:#?}");
}

// ---------------------------------------------------------------- a keyed breaker's windows

#[derive(CircuitBreakerSpec)]
#[spec("explain.big_window")]
struct BigWindow;

#[circuit_breakable(BigWindow, key = host)]
async fn per_host(host: &str) -> Result<u32, TestError> {
    let _ = host;
    Ok(1)
}

/// A breaker used with `key = ..` keeps one window per key: 4194304 calls
/// (32 MiB) at the default 1000 keys may hold some 31 GiB, which nothing
/// else bounds. Warned of, with both figures; a smaller product is not.
#[test]
fn a_keyed_breaker_whose_windows_may_hold_gigabytes_is_a_warning() {
    let build_with = |window: i128, keys: Option<i128>| {
        let section = breaker_section(50, 10, "30s", window);
        let section = match keys {
            Some(max) => with(section, "keys", table([("max", int(max))])),
            None => section,
        };
        warnings_of(|| {
            Registry::builder()
                .spec::<BigWindow>()
                .build(&root(vec![("explain.big_window", section)]))
        })
    };
    let (built, warned) = build_with(4_194_304, None);
    assert!(built.is_ok(), "{:?}", built.err());
    assert_eq!(
        warned,
        ["`explain.big_window` keeps a window of about 32 MiB per key, so its `keys.max` = 1000 keys may hold about 31.2 GiB at once (used with `key = ..` by `explain::per_host`): lower `keys.max`, or make the window smaller (`count_based.window_size`, or `time_based.sample_count` and `counter_stripes`), or use `type = \"fixed_window\"`"]
    );
    for (window, keys) in [(4_194_304, Some(10)), (100, None), (100, Some(1_000_000))] {
        let (built, warned) = build_with(window, keys);
        assert!(built.is_ok(), "{:?}", built.err());
        assert!(warned.is_empty(), "{window} {keys:?}: {warned:#?}");
    }
}
