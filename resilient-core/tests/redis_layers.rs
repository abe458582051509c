//! A rate limiter layer whose permits live in Redis: a tower service's
//! requests take their permits there, as an annotated fn's calls do.
//! Needs RESILIENT_REDIS_URL (see `support/redis.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
use support::redis::{self as server, get, two_workers};
use support::*;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use resilient_core::layer::Layered;
use resilient_core::{BoxError, Error, RateLimiterSpec, Registry, Spec};
use tower::{Layer, ServiceExt};

#[derive(RateLimiterSpec)]
#[spec("redis_layers.search")]
struct SearchRate;

/// 12 requests through the layer of a limit of 10 per hour in Redis: 10
/// reach the service, 2 are refused with the limiter's error, and Redis
/// holds the 10.
#[test]
fn a_layer_takes_its_permits_in_redis() {
    let Some(url) = server::url("a_layer_takes_its_permits_in_redis") else {
        return;
    };
    let prefix = server::prefix("layers");
    let section = table([
        ("limit_for_period", int(10)),
        ("limit_refresh_period", s("1h")),
        ("backend", s("redis")),
    ]);
    let r = build(
        Registry::builder().spec::<SearchRate>(),
        vec![
            (SearchRate::PATH, section),
            ("resilient.redis", server::section(&url, &prefix)),
        ],
    );
    let hits = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&hits);
    let upstream = tower::service_fn(move |id: u64| {
        let hits = Arc::clone(&counted);
        async move {
            hits.fetch_add(1, Ordering::Relaxed);
            Ok::<u64, BoxError>(id)
        }
    });
    let search = SearchRate::layer().layer(upstream);
    let refused = two_workers().block_on(r.scope(async {
        let mut refused = 0;
        for id in 0..12 {
            match search.clone().oneshot(id).await {
                Ok(answer) => assert_eq!(answer, id),
                Err(e) => match e.downcast_ref::<Error>() {
                    Some(Error::RateLimitExceeded { .. }) => refused += 1,
                    _ => panic!("{e}"),
                },
            }
        }
        refused
    }));
    assert_eq!((hits.load(Ordering::Relaxed), refused), (10, 2));
    let key = format!("{{{prefix}:redis_layers.search}}:fixed_window:10:3600000000");
    assert_eq!(get(&url, &key).map(|w| w.ends_with(" 10")), Some(true));
}

/// An HTTP service behind the limit, Redis down, `on_backend_failure` at
/// its default `deny`: 50 requests answered 503 without `Retry-After` by
/// `RespondLayer` (not 429 with `Retry-After: 1`: no client reached the
/// limit), and none reaches the service.
#[cfg(feature = "http")]
#[test]
fn a_layer_answers_503_while_redis_is_down() {
    use resilient_core::layer::RespondLayer;
    use std::convert::Infallible;

    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| format!("redis://127.0.0.1:{}", a.port()))
        .unwrap();
    let section = table([
        ("limit_for_period", int(10)),
        ("limit_refresh_period", s("1s")),
        ("backend", s("redis")),
    ]);
    let r = build(
        Registry::builder().spec::<SearchRate>(),
        vec![
            (SearchRate::PATH, section),
            ("resilient.redis", server::section(&dead, "p")),
        ],
    );
    let hits = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&hits);
    let upstream = tower::service_fn(move |_: u64| {
        counted.fetch_add(1, Ordering::Relaxed);
        async { Ok::<_, Infallible>(http::Response::new(String::new())) }
    });
    let api = RespondLayer::new(SearchRate::layer()).layer(upstream);
    let answers = two_workers().block_on(r.scope(async {
        let mut answers = Vec::new();
        for id in 0..50 {
            let response = api.clone().oneshot(id).await.unwrap();
            let retry_after = response.headers().get("retry-after").cloned();
            answers.push((response.status().as_u16(), retry_after));
        }
        answers
    }));
    println!("{:?}", &answers[..2]);
    let unavailable = answers
        .iter()
        .filter(|(status, retry_after)| *status == 503 && retry_after.is_none())
        .count();
    assert_eq!(
        (unavailable, hits.load(Ordering::Relaxed)),
        (50, 0),
        "{answers:?}"
    );
}
