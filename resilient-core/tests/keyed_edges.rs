//! Keyed instances at their edges: the spec's gauges beside keys whose
//! metrics carry no label, hosts dead for a day, a key disabled by hand, a
//! lower `max` after a reload. Each failed before the keyed store learned
//! it.

#![allow(clippy::expect_used)]

mod support;
use support::capture::Meters;
use support::*;

use std::sync::Arc;
use std::time::Duration;

use resilient_core::circuit_breaker::State;
use resilient_core::settings::Value;
use resilient_core::{
    circuit_breakable, concurrency_limit, CircuitBreakerSpec, ConcurrencyLimitSpec, Error,
    Registry, Spec,
};

#[derive(Debug, thiserror::Error)]
enum TestError {
    #[error("down")]
    Down,
    #[error(transparent)]
    Resilience(#[from] Error),
}

fn metrics_on() -> (&'static str, Value) {
    (
        "telemetry",
        table([("metrics", table([("enabled", boolean(true))]))]),
    )
}

// ------------------------------------------------ gauges without label_metrics

#[derive(ConcurrencyLimitSpec)]
#[spec("keyed.edges.gauged")]
struct Gauged;

#[concurrency_limit(Gauged, key = tenant)]
async fn hold(tenant: u32, release: Arc<tokio::sync::Notify>) -> Result<(), TestError> {
    let _ = tenant;
    release.notified().await;
    Ok(())
}

#[derive(CircuitBreakerSpec)]
#[spec("keyed.edges.gauged_breaker")]
struct GaugedBreaker;

#[circuit_breakable(GaugedBreaker, key = host)]
async fn keyed_call(host: &str) -> Result<(), TestError> {
    let _ = host;
    Ok(())
}

#[circuit_breakable(GaugedBreaker)]
async fn own_call() -> Result<(), TestError> {
    Err(TestError::Down)
}

/// With `label_metrics = false` every key's instance shares the spec's
/// gauge series; a new key's instance `set`s them to its own value.
#[test]
fn a_new_key_does_not_rewrite_the_spec_s_gauges() {
    let meters = Meters::default();
    let (in_use, state) = metrics::with_local_recorder(&meters, || {
        let r = build(
            Registry::builder().spec::<Gauged>().spec::<GaugedBreaker>(),
            vec![
                (
                    "keyed.edges.gauged",
                    table([("limit", int(1)), metrics_on()]),
                ),
                (
                    "keyed.edges.gauged_breaker",
                    table([
                        ("failure_rate_threshold", int(50)),
                        ("minimum_required_calls", int(2)),
                        ("wait_duration_in_open_state", s("30s")),
                        ("permitted_calls_in_half_open_state", int(1)),
                        ("count_based", table([("window_size", int(2))])),
                        metrics_on(),
                    ]),
                ),
            ],
        );
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let _default = r.set_default();
        rt.block_on(async {
            let release = Arc::new(tokio::sync::Notify::new());
            let first = tokio::spawn(hold(1, Arc::clone(&release)));
            tokio::task::yield_now().await;
            // Tenant 2 comes and goes while tenant 1 holds its place.
            let spare = Arc::new(tokio::sync::Notify::new());
            spare.notify_one();
            hold(2, spare).await.expect("tenant 2");
            release.notify_one();
            first.await.expect("task").expect("tenant 1");

            // The spec's own breaker opens; then a new host appears.
            let _ = own_call().await;
            let _ = own_call().await;
            keyed_call("new-host").await.expect("keyed");
        });
        let spec = |s: &'static str, p: &'static str| [("spec", s), ("path", p)];
        (
            meters.gauge(
                "resilient_concurrency_in_use",
                &spec("Gauged", "keyed.edges.gauged"),
            ),
            meters.gauge(
                "resilient_circuit_breaker_state",
                &spec("GaugedBreaker", "keyed.edges.gauged_breaker"),
            ),
        )
    });
    // Nothing is held any more (0 places), and the spec's own breaker is
    // open (2.0): the new host's closed breaker must not report it closed.
    assert_eq!(
        (in_use, state),
        (Some(0.0), Some(2.0)),
        "(in-use, state) gauges"
    );
}

// ------------------------------------------------ open breakers of dead keys

#[derive(CircuitBreakerSpec)]
#[spec("keyed.edges.host")]
struct HostBreaker;

#[circuit_breakable(HostBreaker, key = host)]
async fn fetch(host: &str, down: bool) -> Result<(), TestError> {
    let _ = host;
    if down {
        Err(TestError::Down)
    } else {
        Ok(())
    }
}

fn host_section(keys: Value) -> Value {
    table([
        ("failure_rate_threshold", int(50)),
        ("minimum_required_calls", int(4)),
        ("wait_duration_in_open_state", s("30s")),
        ("permitted_calls_in_half_open_state", int(1)),
        ("count_based", table([("window_size", int(10))])),
        ("keys", keys),
    ])
}

/// Hosts that died and were never called again keep their open breakers
/// forever: with `max` of them, every new host (a day later) shares the
/// spec's own breaker, and one failing new host rejects a healthy one.
#[tokio::test(start_paused = true)]
async fn hosts_dead_for_a_day_do_not_keep_new_hosts_out_of_their_own_breakers() {
    let r = registry::<HostBreaker>(host_section(table([
        ("max", int(2)),
        ("idle_timeout", s("1m")),
    ])));
    r.scope(async {
        for host in ["dead-1", "dead-2"] {
            for _ in 0..4 {
                let _ = fetch(host, true).await;
            }
        }
    })
    .await;
    tokio::time::advance(Duration::from_secs(86_400)).await;
    let _ = keys::<HostBreaker>(&r); // a sweep
    tokio::time::advance(Duration::from_secs(60)).await;
    r.scope(async {
        for _ in 0..4 {
            let _ = fetch("flaky", true).await;
        }
        let healthy = fetch("healthy", false).await;
        assert!(
            healthy.is_ok(),
            "a healthy new host rejected by another host's failures: {healthy:?}; keys {:?}",
            keys::<HostBreaker>(&r)
        );
    })
    .await;
}

// ------------------------------------------------ a manual disable

/// `for_key(..).disable()` is state a fresh instance does not have (the
/// settings say enabled); the key must not be evicted back to closed.
#[tokio::test(start_paused = true)]
async fn a_disabled_key_stays_disabled() {
    let r = registry::<HostBreaker>(host_section(table([("idle_timeout", s("1s"))])));
    let _guard = r.set_default();
    HostBreaker::for_key("maintenance")
        .expect("configured")
        .disable();
    for _ in 0..4 {
        tokio::time::advance(Duration::from_millis(600)).await;
        let _ = r.snapshot(); // sweeps
    }
    assert_eq!(
        HostBreaker::for_key("maintenance")
            .expect("configured")
            .state(),
        State::Disabled
    );
}

// ------------------------------------------------ a lower max on reload

/// After a reload lowers `max` below the keys held, a new key evicts one
/// eighth of the new `max` and, the map still over it, runs under the
/// spec's own instance although every key could go.
#[tokio::test]
async fn a_lower_max_does_not_send_new_keys_to_the_spec_s_own_instance() {
    let r = registry::<HostBreaker>(host_section(table([("max", int(16))])));
    r.scope(async {
        for i in 0..16 {
            fetch(&format!("h{i}"), false).await.expect("closed");
        }
    })
    .await;
    r.reload(&root(vec![(
        HostBreaker::PATH,
        host_section(table([("max", int(4))])),
    )]))
    .expect("valid");
    r.scope(async {
        fetch("new", false).await.expect("closed");
    })
    .await;
    let k = keys::<HostBreaker>(&r);
    assert_eq!(
        (k.overflowed, k.count <= 4),
        (0, true),
        "16 idle closed keys, max 4: {} keys, {} overflowed",
        k.count,
        k.overflowed
    );
}
