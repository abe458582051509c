//! A simulation's real time: 100,000 virtual requests at 1,000 a second
//! (100 s of virtual time) through a retry, a breaker, a concurrency limit
//! and a timeout, against a dependency that fails 10 % of calls, takes
//! 20 ms at the median and 200 ms at p99, and is down for 10 s. The
//! figure is the real time of one whole run (registry built fresh each
//! time), on a paused clock.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, SamplingMode};
use resilient_core::layer::StackLayer;
use resilient_core::settings::Value;
use resilient_core::simulate::{self, Dependency, Latency, Load, Outage};
use resilient_core::{
    CircuitBreakerSpec, ConcurrencyLimitSpec, Registry, RetrySpec, TimeoutSpec,
};

#[derive(RetrySpec)]
#[spec("sim.retry")]
struct SimRetry;

#[derive(CircuitBreakerSpec)]
#[spec("sim.breaker")]
struct SimBreaker;

#[derive(ConcurrencyLimitSpec)]
#[spec("sim.limit")]
struct SimLimit;

#[derive(TimeoutSpec)]
#[spec("sim.timeout")]
struct SimTimeout;

fn table<const N: usize>(pairs: [(&str, Value); N]) -> Value {
    Value::Table(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

fn s(v: &str) -> Value {
    Value::Str(v.to_owned())
}

fn registry() -> Registry {
    let root = table([(
        "sim",
        table([
            (
                "retry",
                table([
                    ("delay", s("10ms")),
                    ("attempts", Value::Int(3)),
                    ("retry_budget", table([("ratio", Value::Float(0.1))])),
                ]),
            ),
            (
                "breaker",
                table([
                    ("failure_rate_threshold", Value::Int(50)),
                    ("minimum_required_calls", Value::Int(20)),
                    ("wait_duration_in_open_state", s("2s")),
                    ("permitted_calls_in_half_open_state", Value::Int(5)),
                    ("count_based", table([("window_size", Value::Int(100))])),
                ]),
            ),
            ("limit", table([("limit", Value::Int(64))])),
            ("timeout", table([("duration", s("150ms"))])),
        ]),
    )]);
    match Registry::builder()
        .spec::<SimRetry>()
        .spec::<SimBreaker>()
        .spec::<SimLimit>()
        .spec::<SimTimeout>()
        .build(&root)
    {
        Ok(r) => r,
        Err(problems) => panic!("invalid bench settings: {problems:?}"),
    }
}

pub(crate) fn simulate(c: &mut Criterion) {
    let dependency = Dependency::new()
        .failure_rate(0.1)
        .latency(Latency::LogNormal {
            p50: Duration::from_millis(20),
            p99: Duration::from_millis(200),
        })
        .outage(Outage::new(Duration::from_secs(40), Duration::from_secs(10)));
    let load = Load::new(100_000, 1_000.0).seed(1);
    let run = || {
        let registry = registry();
        simulate::run(
            &registry,
            StackLayer::new()
                .spec::<SimRetry>()
                .spec::<SimBreaker>()
                .spec::<SimLimit>()
                .spec::<SimTimeout>(),
            &dependency,
            &load,
        )
    };
    // Checked once before it is timed: every request ran.
    match run() {
        Ok(report) => {
            assert_eq!(report.requests, 100_000);
            eprintln!("{report}");
        }
        Err(e) => panic!("the simulation did not run: {e}"),
    }
    let mut g = c.benchmark_group("simulate");
    // Seconds per run: ten runs, each timed alone.
    g.sampling_mode(SamplingMode::Flat);
    g.sample_size(10);
    g.warm_up_time(Duration::from_millis(1));
    g.measurement_time(Duration::from_secs(10));
    g.bench_function("100k requests, 4 specs", |b| b.iter(|| black_box(run())));
    g.finish();
}
