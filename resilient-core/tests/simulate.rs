//! Simulations on the paused clock (`simulate::run`) checked against
//! figures computed by hand: the waits of Spring's exponential backoff
//! example, the post-mortem's hits per attempts setting, a retry storm
//! under a budget, the virtual time a breaker opens at; a run's
//! determinism, and the inputs it refuses.

#![allow(clippy::expect_used, clippy::unwrap_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::*;

use std::time::Duration;

use resilient_core::layer::StackLayer;
use resilient_core::settings::Value;
use resilient_core::simulate::{self, Dependency, Latency, Load, Outage, SimulateError};
use resilient_core::{
    circuit_breakable, retryable, CircuitBreakerSpec, ConcurrencyLimitSpec, Error, Registry,
    RetrySpec, Spec, TimeoutSpec,
};

/// The retry of the runs.
#[derive(RetrySpec)]
#[spec("resilient.retry.sim")]
pub struct SimRetry;

/// The breaker of the runs.
#[derive(CircuitBreakerSpec)]
#[spec("resilient.circuitbreaker.sim")]
pub struct SimBreaker;

/// A retry of an HTTP client's answers.
#[derive(RetrySpec)]
#[spec("resilient.retry.simhttp", classify = http)]
pub struct SimHttpRetry;

/// The limit of the runs.
#[derive(ConcurrencyLimitSpec)]
#[spec("resilient.concurrencylimit.sim")]
pub struct SimLimit;

/// The timeout of the runs.
#[derive(TimeoutSpec)]
#[spec("resilient.timeout.sim")]
pub struct SimTimeout;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn retry_registry(section: Value) -> Registry {
    registry::<SimRetry>(section)
}

fn failing() -> Dependency {
    Dependency::new().failure_rate(1.0)
}

/// Spring's `@Retryable(maxRetries = 5, delay = 20, multiplier = 2.0,
/// maxDelay = 100)`: 6 calls, gaps 20, 40, 80, then capped at 100, 100 ms.
#[test]
fn exponential_backoff_capped_at_delay_max_calls_at_the_hand_computed_times() {
    let registry = retry_registry(table([
        ("delay", s("20ms")),
        ("attempts", int(5)),
        (
            "backoff",
            table([("multiplier", float(2.0)), ("delay_max", s("100ms"))]),
        ),
    ]));
    let report = simulate::run(
        &registry,
        StackLayer::new().spec::<SimRetry>(),
        &failing(),
        &Load::new(1, 1.0),
    )
    .unwrap();
    assert_eq!(report.calls, 6);
    let gaps: Vec<Duration> = report.call_times.windows(2).map(|w| w[1] - w[0]).collect();
    assert_eq!(gaps, [ms(20), ms(40), ms(80), ms(100), ms(100)]);
    assert_eq!(report.call_times[0], Duration::ZERO);
    assert_eq!(report.latency.max, ms(340));
    assert_eq!(report.outcomes.retry_exhausted, 1);
    assert_eq!(report.retries[0].retried, 5);
    assert_eq!(report.retries[0].gave_up_attempts, 1);
}

/// The post-mortem's rule: `attempts` counts retries after the first call,
/// so `attempts = 0..=3` makes 1..=4 hits per request.
#[test]
fn attempts_zero_to_three_make_one_to_four_hits_per_request() {
    for attempts in 0..=3u64 {
        let registry = retry_registry(table([
            ("delay", s("10ms")),
            ("attempts", int(i128::from(attempts))),
        ]));
        let report = simulate::run(
            &registry,
            StackLayer::new().spec::<SimRetry>(),
            &failing(),
            &Load::new(10, 10.0),
        )
        .unwrap();
        assert_eq!(report.calls, 10 * (attempts + 1), "attempts = {attempts}");
        assert!((report.amplification - (attempts + 1) as f64).abs() < 1e-12);
        assert_eq!(report.outcomes.succeeded, 0);
    }
}

/// 30 % of calls fail, 3 retries. Without a budget a request makes
/// 1 + 0.3 + 0.09 + 0.027 = 1.417 calls on average. With a budget of
/// `ratio = 0.1` (a retry spends a token, a success returns 0.1), the
/// retries can never outrun the tokens: retries = 10 initial tokens +
/// 0.1 × successes − what is left (under 1 token while the budget
/// binds, and the few tokens of the successes after the last refused
/// retry). Each success being 0.7 of the first calls plus 0.7 of the
/// retries, retries per request r = 0.1 × (0.7 + 0.7 r), so r = 0.07 / 0.93
/// = 0.0753: 1.0753 calls per request.
#[test]
fn a_retry_storm_under_a_ten_percent_budget_stays_at_the_hand_computed_amplification() {
    let n = 20_000;
    let load = Load::new(n, 100.0).seed(11);
    let dependency = Dependency::new().failure_rate(0.3).latency_fixed(ms(5));

    let unbudgeted = retry_registry(table([("delay", s("1ms")), ("attempts", int(3))]));
    let storm = simulate::run(
        &unbudgeted,
        StackLayer::new().spec::<SimRetry>(),
        &dependency,
        &load,
    )
    .unwrap();
    println!("without a budget:\n{storm}");
    assert!(
        (storm.amplification - 1.417).abs() < 0.03,
        "{}",
        storm.amplification
    );

    let budgeted = retry_registry(table([
        ("delay", s("1ms")),
        ("attempts", int(3)),
        ("retry_budget", table([("ratio", float(0.1))])),
    ]));
    let report = simulate::run(
        &budgeted,
        StackLayer::new().spec::<SimRetry>(),
        &dependency,
        &load,
    )
    .unwrap();
    println!("with a budget:\n{report}");
    let retried = report.retries[0].retried;
    assert_eq!(report.calls, n + retried);
    // The token identity: spent ≤ initial + returned, short by a few.
    let earned = 10.0 + 0.1 * report.outcomes.succeeded as f64;
    assert!(
        (retried as f64) <= earned && earned - (retried as f64) < 3.0,
        "{retried} retries against {earned} tokens"
    );
    assert!(
        (report.amplification - 1.0753).abs() < 0.01,
        "{}",
        report.amplification
    );
    assert!(report.retries[0].gave_up_budget > 0);
    // The timeline says when: its buckets add up to the totals.
    let timeline = |f: fn(&simulate::Bucket) -> u64| report.timeline.iter().map(f).sum::<u64>();
    assert_eq!(timeline(|b| b.retries), retried);
    assert_eq!(
        timeline(|b| b.retries_refused),
        report.retries[0].gave_up_budget
    );
    assert_eq!(timeline(|b| b.calls), report.calls);
    assert_eq!(timeline(|b| b.requests), n);
}

/// A count-based breaker of 10 calls at 50 %, 20 requests a second... at
/// 100 a second, 5 ms each: the outage starts at 10 s; the calls of 10.00,
/// 10.01, .., 10.04 s fail, and the fifth failure (answered at 10.045 s)
/// makes 5 of the last 10 calls: the breaker opens then, not a call later.
/// It then rejects until its 1 s is over: the first call after 11.045 s is
/// the probe.
#[test]
fn a_breaker_opens_at_the_fifth_failure_of_its_window_of_ten() {
    let registry = build(
        Registry::builder().spec::<SimBreaker>(),
        vec![(SimBreaker::PATH, breaker_section(50, 10, "1s", 10))],
    );
    let dependency = Dependency::new().latency_fixed(ms(5)).outage(Outage::new(
        Duration::from_secs(10),
        Duration::from_secs(30),
    ));
    let report = simulate::run(
        &registry,
        StackLayer::new().spec::<SimBreaker>(),
        &dependency,
        &Load::new(6_000, 100.0),
    )
    .unwrap();
    println!("{report}");
    let opened: Vec<Duration> = report.transitions_to("SimBreaker", "open").collect();
    assert_eq!(opened[0], ms(10_045));
    let probed: Vec<Duration> = report.transitions_to("SimBreaker", "half-open").collect();
    assert!(
        probed[0] >= ms(11_045) && probed[0] <= ms(11_050),
        "{probed:?}"
    );
    // One probe per second of the outage reaches the dependency, beside
    // the five that opened it.
    let outage_calls: u64 = report.timeline[10..40].iter().map(|b| b.calls).sum();
    assert!((5..=5 + 31).contains(&outage_calls), "{outage_calls}");
    // After the outage, the breaker closes at its first probe.
    let closed: Vec<Duration> = report.transitions_to("SimBreaker", "closed").collect();
    assert!(closed
        .last()
        .is_some_and(|at| *at >= Duration::from_secs(40)));
    assert_eq!(
        report.outcomes.succeeded
            + report.outcomes.dependency_failed
            + report.outcomes.call_not_permitted,
        6_000
    );
    assert!(report
        .refusals
        .iter()
        .any(|r| r.spec == "SimBreaker" && r.refused > 2_900));
}

/// The same inputs give the same report, to the byte; another seed does
/// not.
#[test]
fn a_seeded_run_repeats_byte_for_byte() {
    let dependency = Dependency::new()
        .failure_rate(0.2)
        .latency(Latency::LogNormal {
            p50: ms(20),
            p99: ms(300),
        })
        .outage(Outage::new(Duration::from_secs(5), Duration::from_secs(5)).failing(0.5))
        .capacity(8);
    let run = |seed: u64| {
        let registry = build(
            Registry::builder()
                .spec::<SimRetry>()
                .spec::<SimBreaker>()
                .spec::<SimLimit>()
                .spec::<SimTimeout>(),
            vec![
                (
                    SimRetry::PATH,
                    table([
                        ("delay", s("10ms")),
                        ("attempts", int(2)),
                        ("jitter", table([("type", s("full"))])),
                        ("retry_budget", table([("ratio", float(0.2))])),
                    ]),
                ),
                (SimBreaker::PATH, breaker_section(50, 20, "2s", 50)),
                (SimLimit::PATH, table([("limit", int(10))])),
                (SimTimeout::PATH, table([("duration", s("200ms"))])),
            ],
        );
        let report = simulate::run(
            &registry,
            StackLayer::new()
                .spec::<SimRetry>()
                .spec::<SimBreaker>()
                .spec::<SimLimit>()
                .spec::<SimTimeout>(),
            &dependency,
            &Load::new(2_000, 200.0).poisson().seed(seed),
        )
        .unwrap();
        (serde_json::to_string(&report).unwrap(), report)
    };
    let (first, report) = run(42);
    let (second, _) = run(42);
    let (other, _) = run(43);
    assert_eq!(first, second);
    assert_ne!(first, other);
    println!("{report}");
    // Every part of the stack acted.
    assert!(report.outcomes.timed_out + report.retries[0].retried > 0);
    assert!(report.max_in_flight <= 10);
}

/// A dependency with room for one call: the second call at once takes
/// twice as long, the third three times.
#[test]
fn calls_beyond_capacity_take_longer_in_proportion() {
    let registry = retry_registry(table([("delay", s("1ms")), ("attempts", int(0))]));
    let report = simulate::run(
        &registry,
        StackLayer::new().spec::<SimRetry>(),
        &Dependency::new().latency_fixed(ms(100)).capacity(1),
        &Load::new(3, 1000.0),
    )
    .unwrap();
    assert_eq!(report.max_in_flight, 3);
    assert_eq!(report.latency.max, ms(300));
    assert_eq!(report.latency.p50, ms(200));
    assert_eq!(report.virtual_time, ms(302));
}

/// A hung outage that a timeout gives up on: the dependency's calls in
/// flight are counted out as the timeout drops them.
#[test]
fn a_slow_outage_ends_in_timeouts() {
    let registry = registry::<SimTimeout>(table([("duration", s("50ms"))]));
    let report = simulate::run(
        &registry,
        StackLayer::new().spec::<SimTimeout>(),
        &Dependency::new().latency_fixed(ms(10)).outage(
            Outage::new(Duration::ZERO, Duration::from_secs(1)).slow(Duration::from_secs(60)),
        ),
        &Load::new(200, 100.0),
    )
    .unwrap();
    assert_eq!(report.outcomes.timed_out, 100);
    assert_eq!(report.outcomes.succeeded, 100);
    assert_eq!(report.latency.max, ms(50));
    // 50 ms at 100 a second: at most 5 hung calls at once, and one more
    // arriving as the oldest is dropped.
    assert!(report.max_in_flight <= 6, "{}", report.max_in_flight);
}

#[test]
fn inputs_that_cannot_be_simulated_are_errors_not_panics() {
    let registry = retry_registry(table([("delay", s("1ms")), ("attempts", int(1))]));
    let run = |dependency: Dependency, load: Load| {
        simulate::run(
            &registry,
            StackLayer::new().spec::<SimRetry>(),
            &dependency,
            &load,
        )
        .map(|_| ())
    };
    let load = || Load::new(10, 10.0);
    let cases = [
        run(Dependency::new().failure_rate(1.5), load()),
        run(Dependency::new().failure_rate(f64::NAN), load()),
        run(Dependency::new().failure_rate(-0.1), load()),
        run(Dependency::new(), Load::new(0, 10.0)),
        run(Dependency::new(), Load::new(10, 0.0)),
        run(Dependency::new(), Load::new(10, f64::INFINITY)),
        run(Dependency::new(), Load::new(u64::MAX, 1.0)),
        run(Dependency::new(), load().timeline(Duration::ZERO)),
        run(Dependency::new().capacity(0), load()),
        run(
            Dependency::new().outage(Outage::new(Duration::ZERO, Duration::ZERO)),
            load(),
        ),
        run(
            Dependency::new().outage(Outage::new(Duration::ZERO, ms(1)).failing(2.0)),
            load(),
        ),
        run(
            Dependency::new().latency(Latency::Uniform {
                min: ms(2),
                max: ms(1),
            }),
            load(),
        ),
        run(
            Dependency::new().latency(Latency::LogNormal {
                p50: ms(0),
                p99: ms(1),
            }),
            load(),
        ),
    ];
    let messages: Vec<String> = cases
        .into_iter()
        .map(|c| c.expect_err("refused").to_string())
        .collect();
    for m in &messages {
        println!("{m}");
    }
    assert!(messages[0].contains("`failure_rate` is 1.5"));
    assert_eq!(
        simulate::run(
            &registry,
            StackLayer::new().spec::<SimRetry>(),
            &Dependency::new(),
            &Load::new(0, 1.0)
        )
        .unwrap_err(),
        SimulateError::NoRequests
    );
}

/// Windows and latencies at the ends of `Duration` neither overflow nor
/// panic.
#[test]
fn extreme_durations_saturate() {
    let registry = retry_registry(table([("delay", s("1ms")), ("attempts", int(1))]));
    let report = simulate::run(
        &registry,
        StackLayer::new().spec::<SimRetry>(),
        &Dependency::new()
            .latency(Latency::Uniform {
                min: Duration::ZERO,
                max: ms(1),
            })
            .outage(Outage::new(Duration::MAX, Duration::MAX))
            .outage(Outage::new(ms(5), Duration::MAX).failing(0.0)),
        &Load::new(100, 1e9).timeline(Duration::MAX),
    )
    .unwrap();
    assert_eq!(report.outcomes.succeeded, 100);
    assert_eq!(report.timeline.len(), 1);
}

/// A run can start from a test that runs on a runtime already.
#[tokio::test]
async fn a_run_inside_a_runtime_works() {
    let registry = retry_registry(table([("delay", s("1ms")), ("attempts", int(1))]));
    let report = simulate::run(
        &registry,
        StackLayer::new().spec::<SimRetry>(),
        &Dependency::new(),
        &Load::new(5, 10.0),
    )
    .unwrap();
    assert_eq!(report.calls, 5);
}

/// The fn whose chain `run_fn` checks a stack against.
#[retryable(SimRetry)]
#[circuit_breakable(SimBreaker)]
async fn find_pet(id: u64) -> Result<u64, Error> {
    Ok(id)
}

/// A fn named by its path runs when the stack is its chain; a misspelt
/// name is answered with the closest one, a stack in another order with
/// both lists.
#[test]
fn a_fn_is_simulated_only_through_its_own_chain() {
    let _ = find_pet;
    let registry = build(
        Registry::builder().spec::<SimRetry>().spec::<SimBreaker>(),
        vec![
            (
                SimRetry::PATH,
                table([("delay", s("1ms")), ("attempts", int(2))]),
            ),
            (SimBreaker::PATH, breaker_section(50, 10, "1s", 10)),
        ],
    );
    let load = Load::new(10, 10.0);
    let report = simulate::run_fn(
        &registry,
        "simulate::find_pet",
        StackLayer::new().spec::<SimRetry>().spec::<SimBreaker>(),
        &failing(),
        &load,
    )
    .unwrap();
    // The breaker (10 calls, 50 %) opens at the 10th failure, inside the
    // 4th request's retries; the retry passes its rejection on.
    assert_eq!(report.calls, 10);
    assert_eq!(report.transitions_to("SimBreaker", "open").count(), 1);

    let misspelt = simulate::run_fn(
        &registry,
        "find_pte",
        StackLayer::new().spec::<SimRetry>().spec::<SimBreaker>(),
        &failing(),
        &load,
    )
    .unwrap_err();
    println!("{misspelt}");
    assert_eq!(
        misspelt,
        SimulateError::UnknownFn {
            name: "find_pte".into(),
            near: Some("simulate::find_pet".into()),
        }
    );

    let reversed = simulate::run_fn(
        &registry,
        "find_pet",
        StackLayer::new().spec::<SimBreaker>().spec::<SimRetry>(),
        &failing(),
        &load,
    )
    .unwrap_err();
    println!("{reversed}");
    assert_eq!(
        reversed.to_string(),
        "the stack (SimBreaker, SimRetry) is not the chain of `simulate::find_pet` (SimRetry, SimBreaker): give the stack the fn's specs, outermost first, as its attributes are written (its `#[fallback]` is not simulated)"
    );
}

/// A server that answers 503 with `Retry-After: 2`: a retry that reads
/// HTTP answers waits the 2 s it asks (not its own 10 ms); one that
/// counts only errors takes the 503 for a success and never retries.
#[test]
fn retry_after_answers_are_waited_by_an_http_retry_and_missed_by_a_default_one() {
    let dependency = Dependency::new()
        .failure_rate(1.0)
        .retry_after(Duration::from_millis(1_500));
    let http = registry::<SimHttpRetry>(table([
        ("delay", s("10ms")),
        ("attempts", int(2)),
        ("max_hinted_delay", s("5s")),
    ]));
    let report = simulate::run(
        &http,
        StackLayer::new().spec::<SimHttpRetry>(),
        &dependency,
        &Load::new(1, 1.0),
    )
    .unwrap();
    assert_eq!(
        report.call_times,
        [
            Duration::ZERO,
            Duration::from_secs(2),
            Duration::from_secs(4)
        ]
    );
    assert_eq!(report.outcomes.retry_exhausted, 1);

    let plain = retry_registry(table([("delay", s("10ms")), ("attempts", int(2))]));
    let report = simulate::run(
        &plain,
        StackLayer::new().spec::<SimRetry>(),
        &dependency,
        &Load::new(10, 10.0),
    )
    .unwrap();
    assert_eq!(report.calls, 10);
    assert_eq!(report.outcomes.failed_responses, 10);
    assert_eq!(report.outcomes.succeeded, 0);
    assert_eq!(report.success_rate, 0.0);
}
