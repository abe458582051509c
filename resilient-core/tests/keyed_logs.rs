//! Keyed instances as the telemetry tells them: log lines carry the key,
//! metrics carry it only with `keys.label_metrics`. A test binary of its
//! own, as `reload_logs.rs`: a log line's callsite registered first by a
//! test without a subscriber would hide its lines from this one.

mod support;
use support::capture::{Capture, Meters};
use support::*;

use resilient_core::{circuit_breakable, CircuitBreakerSpec, Error};

#[derive(Debug, thiserror::Error)]
enum TestError {
    #[error("down")]
    Down,
    #[error(transparent)]
    Resilience(#[from] Error),
}

#[derive(CircuitBreakerSpec)]
#[spec("keyed.logs.labelled")]
struct Labelled;

#[derive(CircuitBreakerSpec)]
#[spec("keyed.logs.plain")]
struct Plain;

#[circuit_breakable(Labelled, key = host)]
async fn labelled(host: &str) -> Result<(), TestError> {
    if host == "down" {
        Err(TestError::Down)
    } else {
        Ok(())
    }
}

#[circuit_breakable(Plain, key = host)]
async fn plain(host: &str) -> Result<(), TestError> {
    let _ = host;
    Ok(())
}

#[circuit_breakable(Plain)]
async fn plain_unkeyed() -> Result<(), TestError> {
    Err(TestError::Down)
}

fn section(label: bool) -> resilient_core::settings::Value {
    table([
        ("failure_rate_threshold", int(50)),
        ("minimum_required_calls", int(2)),
        ("wait_duration_in_open_state", s("30s")),
        ("permitted_calls_in_half_open_state", int(1)),
        ("count_based", table([("window_size", int(2))])),
        ("keys", table([("label_metrics", boolean(label))])),
        (
            "telemetry",
            table([("metrics", table([("enabled", boolean(true))]))]),
        ),
    ])
}

#[test]
fn lines_name_the_key_and_metrics_label_it_only_when_asked() {
    let meters = Meters::default();
    let capture = Capture::default();
    let _subscriber = tracing::subscriber::set_default(capture.clone());
    metrics::with_local_recorder(&meters, || {
        let r = build(
            resilient_core::Registry::builder()
                .spec::<Labelled>()
                .spec::<Plain>(),
            vec![
                ("keyed.logs.labelled", section(true)),
                ("keyed.logs.plain", section(false)),
            ],
        );
        let Ok(rt) = tokio::runtime::Builder::new_current_thread().build() else {
            panic!("runtime");
        };
        rt.block_on(r.scope(async {
            for _ in 0..3 {
                let _ = labelled("down").await;
                let _ = labelled("up").await;
            }
            for host in ["a", "b", "a"] {
                assert!(plain(host).await.is_ok());
            }
            for _ in 0..2 {
                let _ = plain_unkeyed().await;
            }
        }));
    });
    // The keyed breaker's transition and rejection name their key; the
    // spec's own breaker's lines have no `key` field.
    let warns = capture.at("resilient::circuit_breaker", tracing::Level::WARN);
    let opened: Vec<(String, Option<String>)> = warns
        .iter()
        .filter(|l| l.message.contains("closed -> open"))
        .map(|l| (l.fields["spec"].clone(), l.fields.get("key").cloned()))
        .collect();
    assert_eq!(
        opened,
        [
            ("Labelled".to_owned(), Some("down".to_owned())),
            ("Plain".to_owned(), None)
        ]
    );
    let rejected = capture.at("resilient::circuit_breaker", tracing::Level::DEBUG);
    assert_eq!(rejected.len(), 1, "{rejected:#?}");
    assert_eq!(
        rejected[0].fields.get("key").map(String::as_str),
        Some("down")
    );

    // Labelled: one series per key.
    let calls = |spec: &str, path: &str, key: Option<&str>, outcome: &str| {
        let mut labels = vec![
            ("spec", spec),
            ("path", path),
            ("kind", "circuit_breaker"),
            ("outcome", outcome),
        ];
        if let Some(key) = key {
            labels.push(("key", key));
        }
        meters.counter("resilient_calls_total", &labels)
    };
    let l = ("Labelled", "keyed.logs.labelled");
    assert_eq!(calls(l.0, l.1, Some("down"), "failure"), Some(2));
    assert_eq!(calls(l.0, l.1, Some("down"), "rejected"), Some(1));
    assert_eq!(calls(l.0, l.1, Some("up"), "success"), Some(3));
    assert_eq!(calls(l.0, l.1, None, "success").unwrap_or(0), 0);
    // Plain: the keys' calls and the spec's own in one series, no `key`.
    let p = ("Plain", "keyed.logs.plain");
    assert_eq!(calls(p.0, p.1, None, "success"), Some(3));
    assert_eq!(calls(p.0, p.1, None, "failure"), Some(2));
    assert_eq!(calls(p.0, p.1, Some("a"), "success"), None);
}
