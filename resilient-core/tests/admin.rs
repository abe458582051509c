//! The admin routes (feature `admin`), called as axum calls them: the read
//! routes answer the snapshot, the readiness (503 when not ready), one
//! spec, the recent events and the dashboard, and take no POST; the write
//! routes act on breakers, refuse what is no breaker, and reload through
//! what the application gave; the stream sends the snapshot at once, then
//! each event, and drops a client that reads too slowly without slowing
//! a call.

#![allow(clippy::expect_used, clippy::unwrap_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::*;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use futures_util::StreamExt;
use resilient_core::admin::Admin;
use resilient_core::circuit_breaker::State;
use resilient_core::settings::Value;
use resilient_core::{
    circuit_breakable, retryable, CircuitBreakerSpec, Error, Registry, RetrySpec, Spec,
};
use serde_json::Value as Json;
use tower::ServiceExt;

#[derive(Debug, thiserror::Error)]
enum StoreError {
    #[error("store unavailable")]
    Unavailable,
    #[error(transparent)]
    Resilience(#[from] Error),
}

#[derive(CircuitBreakerSpec)]
#[spec("admin.breaker")]
struct Breaker;

#[derive(CircuitBreakerSpec)]
#[spec("admin.hosts")]
struct HostBreaker;

#[derive(RetrySpec)]
#[spec("admin.retry")]
struct Retry;

static RAN: AtomicU32 = AtomicU32::new(0);

#[circuit_breakable(Breaker)]
async fn call(fail: bool) -> Result<(), StoreError> {
    if fail {
        Err(StoreError::Unavailable)
    } else {
        Ok(())
    }
}

/// A successful call, counted (only the slow-client test calls it).
#[circuit_breakable(Breaker)]
async fn counted() -> Result<(), StoreError> {
    RAN.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[circuit_breakable(HostBreaker, key = host)]
async fn on_host(host: &str) -> Result<(), StoreError> {
    let _ = host;
    Ok(())
}

#[retryable(Retry)]
async fn retried() -> Result<(), StoreError> {
    Ok(())
}

fn sections(readiness: &str) -> Vec<(&'static str, Value)> {
    vec![
        (
            Breaker::PATH,
            with(breaker_section(100, 1, "10s", 1), "readiness", s(readiness)),
        ),
        (HostBreaker::PATH, breaker_section(100, 1, "10s", 1)),
        (
            Retry::PATH,
            table([("delay", s("1ms")), ("attempts", int(1))]),
        ),
    ]
}

fn registry_with(readiness: &str) -> Registry {
    build(
        Registry::builder()
            .spec::<Breaker>()
            .spec::<HostBreaker>()
            .spec::<Retry>(),
        sections(readiness),
    )
}

/// `method path` on `router`: the status and the body as text.
async fn send(router: &Router, method: &str, path: &str) -> (StatusCode, String) {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .body(Body::empty())
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

async fn get_json(router: &Router, path: &str) -> (StatusCode, Json) {
    let (status, body) = send(router, "GET", path).await;
    (
        status,
        serde_json::from_str(&body).unwrap_or(Json::String(body)),
    )
}

#[tokio::test(start_paused = true)]
async fn the_read_routes_answer_the_snapshot_the_readiness_a_spec_and_its_events() {
    let r = registry_with("not_ready");
    let read: Router = Admin::new(r.clone()).read_routes();
    let (status, ready) = get_json(&read, "/ready").await;
    assert_eq!(
        (status, &ready["status"]),
        (StatusCode::OK, &Json::from("ready"))
    );

    r.scope(call(true)).await.unwrap_err();
    let (status, ready) = get_json(&read, "/ready").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(ready["status"], "not_ready");
    assert_eq!(ready["reasons"][0]["spec"], "Breaker");

    let (status, snapshot) = get_json(&read, "/snapshot").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(snapshot["specs"].as_array().unwrap().len(), 3);
    assert_eq!(snapshot["specs"][0]["status"]["state"], "open");

    let (status, spec) = get_json(&read, "/specs/admin.breaker").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(spec["spec"], "Breaker");
    let (status, missing) = get_json(&read, "/specs/admin.breakr").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        missing["error"],
        "no spec at `admin.breakr`; the specs are at `admin.breaker`, `admin.hosts`, `admin.retry`"
    );

    let (status, events) = get_json(&read, "/specs/admin.breaker/events").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(events[0]["type"], "state_transition");
    assert_eq!(events[0]["to"], "open");
    let seq = events[0]["seq"].as_u64().unwrap();
    r.scope(call(false)).await.unwrap_err();
    let (_, after) = get_json(&read, &format!("/events?after={seq}")).await;
    assert_eq!(after.as_array().unwrap().len(), 1);
    assert_eq!(after[0]["type"], "rejected");
    let (status, bad) = get_json(&read, "/events?after=soon").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        bad["error"],
        "`after` must be an event's `seq`, a whole number ≥ 0 (found `soon`)"
    );

    let (status, page) = send(&read, "GET", "/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.starts_with("<!doctype html>"), "{page:.40}");
    for loads in ["src=", "<link", "@import", "url("] {
        assert!(
            !page.contains(loads),
            "nothing loaded from elsewhere: {loads}"
        );
    }
    let _ = retried;
}

#[tokio::test(start_paused = true)]
async fn the_read_routes_change_nothing() {
    let r = registry_with("degraded");
    let read: Router = Admin::new(r.clone()).read_routes();
    for path in [
        "/breakers/admin.breaker/force_open",
        "/reload",
        "/snapshot",
        "/specs/admin.breaker",
    ] {
        let (status, _) = send(&read, "POST", path).await;
        assert!(
            status == StatusCode::NOT_FOUND || status == StatusCode::METHOD_NOT_ALLOWED,
            "POST {path}: {status}"
        );
    }
    assert_eq!(r.sync_scope(Breaker::get).unwrap().state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn the_write_routes_act_on_a_breaker_and_refuse_what_is_no_breaker() {
    let r = registry_with("degraded");
    let write: Router = Admin::new(r.clone()).write_routes();
    let (status, body) = send(&write, "POST", "/breakers/admin.breaker/force_open").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let done: Json = serde_json::from_str(&body).unwrap();
    assert_eq!(
        done,
        serde_json::json!({
            "spec": "Breaker", "path": "admin.breaker", "action": "force_open",
            "from": "closed", "to": "forced_open"
        })
    );
    assert_eq!(
        r.sync_scope(Breaker::get).unwrap().state(),
        State::ForcedOpen
    );
    let (status, _) = send(&write, "POST", "/breakers/admin.breaker/close").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(r.sync_scope(Breaker::get).unwrap().state(), State::Closed);

    let (status, body) = send(&write, "POST", "/breakers/admin.breaker/open").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        body.contains(
            "unknown action `open`; a breaker takes `force_open`, `close`, `disable`, `reset`"
        ),
        "{body}"
    );
    let (status, _) = send(&write, "POST", "/breakers/admin.nowhere/force_open").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = send(&write, "POST", "/breakers/admin.retry/force_open").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");

    r.scope(on_host("api.example:8443")).await.unwrap();
    let (status, body) = send(
        &write,
        "POST",
        "/breakers/admin.hosts/keys/api.example%3A8443/disable",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("\"key\":\"api.example:8443\""), "{body}");
    let (status, _) = send(&write, "POST", "/breakers/admin.hosts/keys/other/disable").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // Reads are not here.
    let (status, _) = send(&write, "GET", "/snapshot").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn reload_runs_what_the_application_gave_and_says_why_it_refused() {
    let r = registry_with("degraded");
    let (status, body) = send(&Admin::new(r.clone()).write_routes(), "POST", "/reload").await;
    assert_eq!(status, StatusCode::NOT_IMPLEMENTED, "{body}");

    let target = r.clone();
    let good = root(sections("not_ready"));
    let write: Router = Admin::new(r.clone())
        .reload_with(move || {
            target
                .reload(&good)
                .map_err(|p| format!("{} problem(s)", p.len()).into())
        })
        .write_routes();
    let (status, body) = send(&write, "POST", "/reload").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let reloaded: Json = serde_json::from_str(&body).unwrap();
    assert_eq!(reloaded["specs"][0]["spec"], "Breaker");
    assert_eq!(
        reloaded["specs"][0]["keys"][0],
        "readiness: \"degraded\" -> \"not_ready\""
    );

    let target = r.clone();
    let bad = root(vec![(Retry::PATH, table([("attempts", int(-1))]))]);
    let write: Router = Admin::new(r.clone())
        .reload_with(move || {
            target
                .reload(&bad)
                .map_err(|p| format!("{} problem(s)", p.len()).into())
        })
        .write_routes();
    let (status, body) = send(&write, "POST", "/reload").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(body.contains("problem(s)"), "{body}");
}

/// One SSE frame: its event name and data.
fn frame(chunk: &[u8]) -> (String, String) {
    let text = String::from_utf8_lossy(chunk);
    let mut name = String::new();
    let mut data = String::new();
    for line in text.lines() {
        if let Some(n) = line.strip_prefix("event: ") {
            name = n.to_owned();
        } else if let Some(d) = line.strip_prefix("data: ") {
            data.push_str(d);
        }
    }
    (name, data)
}

type Frames = std::pin::Pin<
    Box<dyn futures_util::Stream<Item = Result<axum::body::Bytes, axum::Error>> + Send>,
>;

async fn stream(router: &Router) -> Frames {
    let request = Request::builder()
        .uri("/stream")
        .body(Body::empty())
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()["content-type"],
        "text/event-stream",
        "Server-Sent Events"
    );
    Box::pin(response.into_body().into_data_stream())
}

async fn next(frames: &mut Frames) -> Option<(String, String)> {
    let chunk = frames.next().await?.unwrap();
    Some(frame(&chunk))
}

#[tokio::test(start_paused = true)]
async fn a_stream_client_gets_the_snapshot_at_once_then_each_event() {
    let r = registry_with("degraded");
    let read: Router = Admin::new(r.clone()).read_routes();
    let mut frames = stream(&read).await;
    let (name, data) = next(&mut frames).await.unwrap();
    assert_eq!(name, "snapshot");
    let now: Json = serde_json::from_str(&data).unwrap();
    assert_eq!(now["readiness"]["status"], "ready");
    assert_eq!(now["snapshot"]["specs"][0]["status"]["state"], "closed");
    assert_eq!(now["dropped_clients"], 0);

    r.scope(call(true)).await.unwrap_err();
    let (name, data) = next(&mut frames).await.unwrap();
    assert_eq!(name, "recorded");
    let event: Json = serde_json::from_str(&data).unwrap();
    assert_eq!(
        (&event["type"], &event["to"]),
        (&Json::from("state_transition"), &Json::from("open"))
    );
    // Then the snapshot of every second, which says it open.
    let mut snapshot = None;
    while let Some((name, data)) = next(&mut frames).await {
        if name == "snapshot" {
            snapshot = Some(serde_json::from_str::<Json>(&data).unwrap());
            break;
        }
    }
    let snapshot = snapshot.unwrap();
    assert_eq!(snapshot["snapshot"]["specs"][0]["status"]["state"], "open");
    assert_eq!(snapshot["readiness"]["status"], "degraded");
}

#[tokio::test(start_paused = true)]
async fn a_client_that_reads_too_slowly_is_dropped_and_never_slows_a_call() {
    let r = registry_with("degraded");
    let read: Router = Admin::new(r.clone()).stream_buffer(8).read_routes();
    let mut stalled = stream(&read).await;
    let mut reader = stream(&read).await;
    assert_eq!(next(&mut reader).await.unwrap().0, "snapshot");

    // 100 periods of the stream, each with events: the stalled client's
    // queue of 8 fills in the first few, the reader keeps up.
    let before = RAN.load(Ordering::SeqCst);
    let mut recorded = 0;
    for round in 0..100 {
        let action = if round % 2 == 0 {
            "force_open"
        } else {
            "close"
        };
        r.operate_breaker(
            Breaker::PATH,
            None,
            resilient_core::circuit_breaker::Action::from_label(action).unwrap(),
        )
        .unwrap();
        for _ in 0..10 {
            let _ = r.scope(counted()).await;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
        while let Some(Some(Ok(chunk))) = futures_util::FutureExt::now_or_never(reader.next()) {
            if frame(&chunk).0 == "recorded" {
                recorded += 1;
            }
        }
    }
    assert_eq!(
        RAN.load(Ordering::SeqCst) - before,
        50 * 10,
        "every call ran while the breaker was closed, none waited for a client"
    );
    // Each round: the transition and the operator's action (and a run of
    // rejections every other round).
    assert!(recorded >= 200, "the reader got every event: {recorded}");

    let mut stalled_frames = Vec::new();
    while let Some((name, _)) = next(&mut stalled).await {
        stalled_frames.push(name);
    }
    assert_eq!(stalled_frames.len(), 9, "{stalled_frames:?}");
    assert_eq!(stalled_frames.last().map(String::as_str), Some("dropped"));

    let mut dropped = None;
    while let Some((name, data)) = next(&mut reader).await {
        if name == "snapshot" {
            dropped = serde_json::from_str::<Json>(&data).unwrap()["dropped_clients"].as_u64();
            break;
        }
    }
    assert_eq!(dropped, Some(1), "one client dropped, the reader kept");
}

#[tokio::test(start_paused = true)]
async fn a_run_of_rejections_that_grows_is_sent_again_with_its_count() {
    let r = registry_with("degraded");
    let read: Router = Admin::new(r.clone()).read_routes();
    let mut frames = stream(&read).await;
    assert_eq!(next(&mut frames).await.unwrap().0, "snapshot");
    r.scope(call(true)).await.unwrap_err();
    r.scope(call(false)).await.unwrap_err();
    // Every frame of the next period: the transition and the run of one.
    let mut counts = Vec::new();
    while counts.len() < 2 {
        let (name, data) = next(&mut frames).await.unwrap();
        if name == "recorded" {
            let e: Json = serde_json::from_str(&data).unwrap();
            counts.push((e["type"].as_str().unwrap().to_owned(), e["count"].as_u64()));
        }
    }
    assert_eq!(
        counts,
        [
            ("state_transition".to_owned(), Some(1)),
            ("rejected".to_owned(), Some(1))
        ]
    );
    for _ in 0..4 {
        r.scope(call(false)).await.unwrap_err();
    }
    let (seq, count) = loop {
        let (name, data) = next(&mut frames).await.unwrap();
        if name == "recorded" {
            let e: Json = serde_json::from_str(&data).unwrap();
            break (e["seq"].as_u64(), e["count"].as_u64());
        }
    };
    assert_eq!(count, Some(5), "the same entry, its count grown");
    let events = r.recent_events_of(Breaker::PATH).unwrap();
    assert_eq!(seq, Some(events[1].seq));
}
