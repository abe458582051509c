//! The Grafana dashboard (`examples/grafana/resilient.json`) and the alert
//! rules beside it query only metrics the library emits, and the
//! dashboard queries every metric the guide's Metrics table lists; the main
//! ones are checked against a real Prometheus exporter's page after the
//! pet store's calls, with the labels the panels group by.

use std::collections::BTreeSet;

use examples::petstore::PetClient;
use metrics_exporter_prometheus::PrometheusBuilder;
use resilient_core::Registry;

type TestResult = Result<(), Box<dyn std::error::Error>>;

const DASHBOARD: &str = include_str!("../grafana/resilient.json");
const ALERTS: &str = include_str!("../grafana/alerts.yml");
/// The telemetry chapter of the guide, which holds the Metrics table.
const GUIDE: &str = include_str!("../../resilient-core/guide/telemetry.md");

/// Every `resilient_…` name in `text`, a histogram's `_bucket`, `_sum`
/// and `_count` series named by the histogram.
fn names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("resilient_") {
        let name: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        rest = &rest[at + name.len()..];
        let base = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .filter(|b| b.ends_with("_seconds"))
            .unwrap_or(&name);
        out.insert(base.to_owned());
    }
    out
}

/// The queries of the dashboard's panels.
fn queries() -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let dashboard: serde_json::Value = serde_json::from_str(DASHBOARD)?;
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().ok_or("panels")? {
        for target in panel["targets"].as_array().into_iter().flatten() {
            out.push(target["expr"].as_str().ok_or("an expr")?.to_owned());
        }
    }
    Ok(out)
}

/// The metric names the guide's Metrics table lists (its rows' first cells).
fn documented() -> BTreeSet<String> {
    GUIDE
        .lines()
        .filter_map(|l| l.strip_prefix("| `resilient_"))
        .filter_map(|l| l.split('`').next())
        .map(|n| format!("resilient_{n}"))
        .collect()
}

#[test]
fn the_dashboard_and_the_alerts_query_documented_metrics_and_every_one_of_them() -> TestResult {
    let documented = documented();
    assert!(
        documented.len() >= 16,
        "the guide's metrics table: {documented:?}"
    );
    let queried: BTreeSet<String> = queries()?.iter().flat_map(|q| names(q)).collect();
    let unknown: Vec<_> = queried.difference(&documented).collect();
    assert!(
        unknown.is_empty(),
        "the dashboard queries undocumented metrics: {unknown:?}"
    );
    let missing: Vec<_> = documented.difference(&queried).collect();
    assert!(
        missing.is_empty(),
        "the dashboard does not show: {missing:?}"
    );
    let alerted = names(ALERTS);
    let unknown: Vec<_> = alerted.difference(&documented).collect();
    assert!(
        unknown.is_empty(),
        "the alerts query undocumented metrics: {unknown:?}"
    );
    for uid in [
        "\"uid\": \"${datasource}\"",
        "label_values(resilient_calls_total, spec)",
    ] {
        assert!(DASHBOARD.contains(uid), "{uid}");
    }
    Ok(())
}

#[tokio::test]
async fn the_main_metrics_are_on_the_exporters_page_with_the_labels_the_panels_group_by(
) -> TestResult {
    let prometheus = PrometheusBuilder::new().install_recorder()?;
    let toml = "[resilient.telemetry]
metrics = { enabled = true }
[resilient.retry.pet]
delay = \"1ms\"
attempts = 1
[resilient.circuitbreaker.pet]
failure_rate_threshold = 100
minimum_required_calls = 1
wait_duration_in_open_state = \"1m\"
permitted_calls_in_half_open_state = 1
count_based = { window_size = 1 }
[resilient.timeout.pet]
duration = \"2s\"
[resilient.concurrency.pets]
limit = 8";
    let registry: Registry = examples::petstore::registry(toml)?;
    let upstream = examples::petstore::flaky_upstream().await?;
    let client = PetClient::new(upstream.addr());
    registry
        .scope(async {
            // 503, 503: retried once, given up; then the breaker is open
            // and the cached pet is none: fallbacks taken, no pet.
            for _ in 0..3 {
                let _ = client.find(7).await;
            }
        })
        .await;
    let limit = registry.sync_scope(|| {
        use resilient_core::ConcurrencyLimitSpec;
        examples::petstore::PetsLimit::get()
    })?;
    drop(limit.try_acquire());
    let page = prometheus.render();
    let shown = names(&page);
    for main in [
        "resilient_calls_total",
        "resilient_call_duration_seconds",
        "resilient_retries_total",
        "resilient_retry_exhausted_total",
        "resilient_circuit_breaker_state",
        "resilient_circuit_breaker_transitions_total",
        "resilient_concurrency_in_use",
        "resilient_concurrency_limit",
        "resilient_fallbacks_total",
    ] {
        assert!(shown.contains(main), "{main} is not on the page:\n{page}");
        assert!(queries()?.iter().any(|q| names(q).contains(main)), "{main}");
    }
    // The labels the panels group and filter by.
    for series in [
        "resilient_calls_total{spec=\"PetBreaker\",path=\"resilient.circuitbreaker.pet\",kind=\"circuit_breaker\",outcome=\"failure\"}",
        "resilient_calls_total{spec=\"PetBreaker\",path=\"resilient.circuitbreaker.pet\",kind=\"circuit_breaker\",outcome=\"rejected\"}",
        "resilient_circuit_breaker_transitions_total{spec=\"PetBreaker\",path=\"resilient.circuitbreaker.pet\",to=\"open\"}",
        "resilient_retry_exhausted_total{spec=\"PetRetry\",path=\"resilient.retry.pet\",reason=\"attempts\"}",
        "resilient_fallbacks_total{function=\"find\"}",
        "resilient_call_duration_seconds{spec=\"PetRetry\",path=\"resilient.retry.pet\",kind=\"retry\",quantile=\"0.99\"}",
    ] {
        assert!(page.contains(series), "{series} is not on the page:\n{page}");
    }
    Ok(())
}
