//! A `/health` endpoint: every spec's state, as JSON, from
//! [`Registry::snapshot`] (the `serde` feature of `resilient-core`); and
//! `/metrics`, the Prometheus text of the specs whose
//! `telemetry.metrics.enabled` is set, when a Prometheus recorder is given.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use resilient_core::Registry;

/// The body of `GET /health`.
///
/// # Errors
///
/// When the snapshot cannot be written as JSON (it always can).
pub fn body(registry: &Registry) -> serde_json::Result<String> {
    serde_json::to_string_pretty(&registry.snapshot())
}

/// What the two endpoints read.
#[derive(Clone)]
struct Sources {
    registry: Registry,
    metrics: Option<PrometheusHandle>,
}

/// The routes `GET /health`, answered with `registry`'s snapshot, and `GET
/// /metrics`, answered with `metrics`' Prometheus text (404 without a
/// recorder), to merge into an application's router.
pub fn routes<S>(registry: Registry, metrics: Option<PrometheusHandle>) -> Router<S> {
    Router::new()
        .route("/health", get(health))
        .route("/metrics", get(prometheus))
        .with_state(Sources { registry, metrics })
}

async fn health(State(sources): State<Sources>) -> Response {
    match body(&sources.registry) {
        Ok(json) => ([(header::CONTENT_TYPE, "application/json")], json).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

async fn prometheus(State(sources): State<Sources>) -> Response {
    match &sources.metrics {
        Some(handle) => (
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            handle.render(),
        )
            .into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}
