//! Two retry specs in one stack nest as two `#[retryable]`s on nested fns
//! do: the inner retry sees the outer's attempt, so that
//! `share_outer_budget` bounds both by the outer's budget and an unbounded
//! product is warned of, through the tower stack and the stack as reqwest
//! middleware alike; counted in upstream hits, budget tokens and WARNs.

#![allow(clippy::expect_used, clippy::unwrap_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::capture::Capture;
use support::*;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use resilient_core::layer::StackLayer;
use resilient_core::settings::Value;
use resilient_core::{BoxError, Registry, RetrySpec, Spec};
use tower::{Layer, ServiceExt};
use tracing::Level;

#[derive(RetrySpec)]
#[spec("stack_nested.outer")]
struct Outer;

#[derive(RetrySpec)]
#[spec("stack_nested.inner")]
struct Inner;

/// The outer spec: 2 retries, on a budget of 2 tokens that no success
/// refills within a test.
fn outer() -> Value {
    table([
        ("delay", s("10ms")),
        ("attempts", int(2)),
        (
            "retry_budget",
            table([
                ("ratio", float(0.1)),
                ("tokens_max", int(10)),
                ("tokens_initial", int(2)),
            ]),
        ),
    ])
}

fn inner(share: bool) -> Value {
    table([
        ("delay", s("10ms")),
        ("attempts", int(2)),
        ("share_outer_budget", boolean(share)),
    ])
}

#[derive(Debug, Clone, Copy)]
enum Door {
    Tower,
    Middleware,
}

#[derive(Debug, thiserror::Error)]
#[error("down")]
struct Down;

/// The last middleware: an upstream that fails every request.
struct Failing(Arc<AtomicUsize>);

#[async_trait::async_trait]
impl reqwest_middleware::Middleware for Failing {
    async fn handle(
        &self,
        _: reqwest::Request,
        _: &mut http::Extensions,
        _: reqwest_middleware::Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Err(reqwest_middleware::Error::middleware(Down))
    }
}

/// Upstream hits of one request through `Outer` then `Inner` in one
/// stack, the outer budget's tokens after it, and the nested-retry WARNs.
fn one_request(door: Door, share: bool) -> (usize, Option<f64>, Vec<String>) {
    let capture = Capture::default();
    let _subscriber = tracing::subscriber::set_default(capture.clone());
    let r = build(
        Registry::builder().spec::<Outer>().spec::<Inner>(),
        vec![(Outer::PATH, outer()), (Inner::PATH, inner(share))],
    );
    let hits = Arc::new(AtomicUsize::new(0));
    paused().block_on(r.scope(async {
        match door {
            Door::Tower => {
                let hits = Arc::clone(&hits);
                let svc =
                    StackLayer::new()
                        .spec::<Outer>()
                        .spec::<Inner>()
                        .layer(tower::service_fn(move |(): ()| {
                            hits.fetch_add(1, Ordering::SeqCst);
                            std::future::ready(Err::<(), BoxError>("down".into()))
                        }));
                svc.oneshot(()).await.expect_err("every attempt fails");
            }
            Door::Middleware => {
                let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
                    .with(
                        StackLayer::<_, reqwest::Request>::new()
                            .spec::<Outer>()
                            .spec::<Inner>(),
                    )
                    .with(Failing(Arc::clone(&hits)))
                    .build();
                let out = client.get("http://api.example/1").send().await;
                out.expect_err("every attempt fails");
            }
        }
    }));
    let tokens = r
        .sync_scope(Outer::get)
        .ok()
        .and_then(|h| h.budget_tokens());
    let warned = capture
        .at("resilient::retry", Level::WARN)
        .into_iter()
        .filter(|l| l.fields.contains_key("outer_path"))
        .map(|l| l.message)
        .collect();
    (hits.load(Ordering::SeqCst), tokens, warned)
}

/// `share_outer_budget = true`: the inner retry takes the outer's 2
/// tokens (3 hits), and the outer retry finds none left; nothing to warn
/// of. Without it, 3 × 3 hits and one WARN that says so.
fn nests_as_the_attributes_do(door: Door) {
    let (hits, left, warned) = one_request(door, true);
    assert_eq!(
        (hits, left, warned.len()),
        (3, Some(0.0), 0),
        "{door:?}, sharing: {warned:?}"
    );
    let (hits, left, warned) = one_request(door, false);
    assert_eq!((hits, left), (9, Some(0.0)), "{door:?}, not sharing");
    assert_eq!(warned.len(), 1, "{door:?}: {warned:?}");
    assert!(
        warned[0].contains("retry `stack_nested.inner` runs inside retry `stack_nested.outer`")
            && warned[0].contains("up to 3 × 3 = 9 calls"),
        "{door:?}: {warned:?}"
    );
}

#[test]
fn two_retries_in_a_tower_stack_nest_as_the_attributes_do() {
    nests_as_the_attributes_do(Door::Tower);
}

#[test]
fn two_retries_in_a_stack_middleware_nest_as_the_attributes_do() {
    nests_as_the_attributes_do(Door::Middleware);
}
