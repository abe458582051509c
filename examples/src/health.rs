//! A `/health` endpoint: every spec's state, as JSON, from
//! [`Registry::snapshot`] (the `serde` feature of `resilient-core`); and
//! `/metrics`, the Prometheus text of the specs whose
//! `telemetry.metrics.enabled` is set, when a Prometheus recorder is given.

use metrics_exporter_prometheus::PrometheusHandle;
use resilient_core::Registry;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// The body of `GET /health`.
///
/// # Errors
///
/// When the snapshot cannot be written as JSON (it always can).
pub fn body(registry: &Registry) -> serde_json::Result<String> {
    serde_json::to_string_pretty(&registry.snapshot())
}

/// Answers `GET /health` on `listener` with `registry`'s snapshot, `GET
/// /metrics` with `metrics`' Prometheus text (404 without a recorder), and
/// any other path with 404, one request per connection, until the task is
/// dropped.
pub async fn serve(listener: TcpListener, registry: Registry, metrics: Option<PrometheusHandle>) {
    while let Ok((stream, _)) = listener.accept().await {
        let (registry, metrics) = (registry.clone(), metrics.clone());
        tokio::spawn(async move {
            let _ = answer(stream, &registry, metrics.as_ref()).await;
        });
    }
}

async fn answer(
    stream: TcpStream,
    registry: &Registry,
    metrics: Option<&PrometheusHandle>,
) -> std::io::Result<()> {
    let mut stream = BufReader::new(stream);
    let mut request_line = String::new();
    stream.read_line(&mut request_line).await?;
    // Drain the headers.
    let mut line = String::new();
    while stream.read_line(&mut line).await? > 2 {
        line.clear();
    }
    let path = request_line.split_whitespace().nth(1).unwrap_or("");
    let json = "application/json";
    let (status, kind, content) = match path {
        "/health" => match body(registry) {
            Ok(body) => ("200 OK", json, body),
            Err(e) => ("500 Internal Server Error", json, e.to_string()),
        },
        "/metrics" => match metrics {
            Some(handle) => ("200 OK", "text/plain; version=0.0.4", handle.render()),
            None => ("404 Not Found", json, String::new()),
        },
        _ => ("404 Not Found", json, String::new()),
    };
    let reply = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {kind}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{content}",
        content.len()
    );
    stream.get_mut().write_all(reply.as_bytes()).await
}
