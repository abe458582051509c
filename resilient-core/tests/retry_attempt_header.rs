//! The attempt header (`attempt_header` in a retry spec): what the server
//! sees on each attempt of a retried request, through each door that sends
//! HTTP requests (the retry layer, the stack layer, the retry middleware,
//! the stack as middleware), off by default, and its name checked at
//! startup.

#![allow(clippy::expect_used, clippy::unwrap_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::*;

use std::sync::{Arc, Mutex};

use resilient_core::layer::middleware::Middlewares;
use resilient_core::layer::{AttemptHeaderLayer, Layered, StackLayer};
use resilient_core::settings::Value;
use resilient_core::{BoxError, Registry, RetrySpec, Spec};
use tower::{ServiceBuilder, ServiceExt};

#[derive(RetrySpec)]
#[spec("attempt_header.api")]
struct ApiRetry;

/// What the server saw: the header of each request it received.
type Seen = Arc<Mutex<Vec<Option<String>>>>;

fn section(header: Option<&str>) -> Value {
    let base = table([("delay", s("10ms")), ("attempts", int(2))]);
    match header {
        Some(h) => with(base, "attempt_header", s(h)),
        None => base,
    }
}

/// A server that records `x-retry-attempt` of each request and fails all
/// but the third.
fn server(
    seen: Seen,
) -> impl tower::Service<
    http::Request<()>,
    Response = http::Response<()>,
    Error = BoxError,
    Future = impl Send,
> + Clone {
    tower::service_fn(move |req: http::Request<()>| {
        let seen = Arc::clone(&seen);
        async move {
            let header = req
                .headers()
                .get("x-retry-attempt")
                .map(|v| v.to_str().unwrap().to_owned());
            let mut seen = seen.lock().unwrap();
            seen.push(header);
            if seen.len() < 3 {
                Err::<http::Response<()>, BoxError>("down".into())
            } else {
                Ok(http::Response::new(()))
            }
        }
    })
}

fn seen_through_layers(header: Option<&str>, stacked: bool) -> Vec<Option<String>> {
    let r = registry::<ApiRetry>(section(header));
    let seen = Seen::default();
    paused().block_on(r.scope(async {
        let server = server(Arc::clone(&seen));
        let out = if stacked {
            ServiceBuilder::new()
                .layer(StackLayer::new().spec::<ApiRetry>())
                .layer(AttemptHeaderLayer)
                .service(server)
                .oneshot(http::Request::new(()))
                .await
                .map_err(|e| e.to_string())
        } else {
            ServiceBuilder::new()
                .layer(ApiRetry::layer())
                .layer(AttemptHeaderLayer)
                .service(server)
                .oneshot(http::Request::new(()))
                .await
                .map_err(|e| e.to_string())
        };
        assert!(out.is_ok(), "{out:?}");
    }));
    Arc::try_unwrap(seen).unwrap().into_inner().unwrap()
}

/// Three attempts: no header on the first, then the attempts before each
/// retry, `1` and `2`, as gRPC's `grpc-previous-rpc-attempts` counts.
#[test]
fn each_retry_through_a_layer_carries_the_attempts_before_it() {
    let expected = vec![None, Some("1".to_owned()), Some("2".to_owned())];
    assert_eq!(
        seen_through_layers(Some("X-Retry-Attempt"), false),
        expected,
        "retry layer"
    );
    assert_eq!(
        seen_through_layers(Some("x-retry-attempt"), true),
        expected,
        "stack layer"
    );
}

/// Without `attempt_header` no request carries one.
#[test]
fn no_header_is_sent_by_default() {
    assert_eq!(seen_through_layers(None, false), vec![None, None, None]);
    assert_eq!(seen_through_layers(None, true), vec![None, None, None]);
}

/// The middleware's last middleware: the server, recording the header.
struct Answer(Seen);

#[derive(Debug, thiserror::Error)]
#[error("down")]
struct Down;

#[async_trait::async_trait]
impl reqwest_middleware::Middleware for Answer {
    async fn handle(
        &self,
        req: reqwest::Request,
        _: &mut http::Extensions,
        _: reqwest_middleware::Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let header = req
            .headers()
            .get("x-retry-attempt")
            .map(|v| v.to_str().unwrap().to_owned());
        let mut seen = self.0.lock().unwrap();
        seen.push(header);
        if seen.len() < 3 {
            Err(reqwest_middleware::Error::middleware(Down))
        } else {
            Ok(reqwest::Response::from(http::Response::new(
                Vec::<u8>::new(),
            )))
        }
    }
}

fn seen_through_middleware(header: Option<&str>, stacked: bool) -> Vec<Option<String>> {
    let r = registry::<ApiRetry>(section(header));
    let seen = Seen::default();
    paused().block_on(r.scope(async {
        let builder = reqwest_middleware::ClientBuilder::new(reqwest::Client::new());
        let builder = if stacked {
            builder.with(StackLayer::<_, reqwest::Request>::new().spec::<ApiRetry>())
        } else {
            builder.with(ApiRetry::middleware())
        };
        let client = builder.with(Answer(Arc::clone(&seen))).build();
        let out = client.get("http://api.example/1").send().await;
        assert!(out.is_ok(), "{out:?}");
    }));
    Arc::try_unwrap(seen).unwrap().into_inner().unwrap()
}

#[test]
fn each_retry_through_middleware_carries_the_attempts_before_it() {
    let expected = vec![None, Some("1".to_owned()), Some("2".to_owned())];
    assert_eq!(
        seen_through_middleware(Some("x-retry-attempt"), false),
        expected,
        "retry middleware"
    );
    assert_eq!(
        seen_through_middleware(Some("x-retry-attempt"), true),
        expected,
        "stack middleware"
    );
    assert_eq!(seen_through_middleware(None, false), vec![None, None, None]);
    assert_eq!(seen_through_middleware(None, true), vec![None, None, None]);
}

/// A name no HTTP request can carry is a startup problem, not a header
/// that never arrives; so is one that is not text.
#[test]
fn a_header_name_a_request_cannot_carry_is_a_problem() {
    for (value, said) in [
        (s("x retry attempt"), "' '"),
        (s("x-retry:attempt"), "':'"),
        (s("x-retry-é"), "'é'"),
    ] {
        let problems = Registry::builder()
            .spec::<ApiRetry>()
            .build(&root(vec![(
                ApiRetry::PATH,
                with(section(None), "attempt_header", value),
            )]))
            .unwrap_err();
        let text = format!("{problems:?}");
        println!("{text}");
        assert!(text.contains("key: \"attempt_header\""), "{text}");
        assert!(text.contains("must be an HTTP header name"), "{text}");
        assert!(text.contains(said), "{text}");
    }
    for value in [s(""), int(1)] {
        let problems = Registry::builder()
            .spec::<ApiRetry>()
            .build(&root(vec![(
                ApiRetry::PATH,
                with(section(None), "attempt_header", value),
            )]))
            .unwrap_err();
        let text = format!("{problems:?}");
        println!("{text}");
        assert!(text.contains("key: \"attempt_header\""), "{text}");
    }
    // Read as written, kept lower-case.
    let r = registry::<ApiRetry>(section(Some("X-Retry-Attempt")));
    let settings = r.sync_scope(|| ApiRetry::get().unwrap().settings().clone());
    assert_eq!(settings.attempt_header.as_deref(), Some("x-retry-attempt"));
}

#[derive(Debug, thiserror::Error)]
enum ApiError {
    #[error(transparent)]
    Http(#[from] reqwest::Error),
    #[error(transparent)]
    Resilience(#[from] resilient_core::Error),
}

/// A retried fn that sends its request with reqwest, through
/// `with_attempt_header`; the server answers 503 twice, then 200.
#[resilient_core::retryable(ApiRetry)]
async fn fetch(client: &reqwest::Client, url: &str) -> Result<String, ApiError> {
    let request = client.get(url);
    let response = resilient_core::retry::with_attempt_header(request)
        .send()
        .await?;
    Ok(response.error_for_status()?.text().await?)
}

/// A loopback axum server that records `x-retry-attempt` of each request
/// and answers 503 to all but the third.
async fn loopback(seen: Seen) -> String {
    let app = axum::Router::new().route(
        "/pets",
        axum::routing::get(move |headers: http::HeaderMap| {
            let seen = Arc::clone(&seen);
            async move {
                let header = headers
                    .get("x-retry-attempt")
                    .map(|v| v.to_str().unwrap().to_owned());
                let mut seen = seen.lock().unwrap();
                seen.push(header);
                if seen.len() < 3 {
                    http::StatusCode::SERVICE_UNAVAILABLE
                } else {
                    http::StatusCode::OK
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/pets")
}

fn seen_through_reqwest(header: Option<&str>) -> Vec<Option<String>> {
    let r = registry::<ApiRetry>(with(section(header), "delay", s("0s")));
    let seen = Seen::default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(r.scope(async {
        let url = loopback(Arc::clone(&seen)).await;
        let client = reqwest::Client::new();
        let out = fetch(&client, &url).await;
        assert!(out.is_ok(), "{out:?}");
    }));
    let seen = seen.lock().unwrap().clone();
    seen
}

/// The attribute's door: a retried fn's request, sent with
/// `with_attempt_header`, carries the header on each retry, and none
/// without `attempt_header`; the server saw 3 requests either way.
#[test]
fn a_retried_fn_sends_the_attempt_header_with_reqwest() {
    assert_eq!(
        seen_through_reqwest(Some("x-retry-attempt")),
        vec![None, Some("1".to_owned()), Some("2".to_owned())]
    );
    assert_eq!(seen_through_reqwest(None), vec![None, None, None]);
}

#[derive(resilient_core::RateLimiterSpec)]
#[spec("attempt_header.rate")]
struct ApiRate;

/// What the server saw through a retry, then a rate limiter of one permit
/// per 100 ms that waits up to 1 s, then `AttemptHeaderLayer`: each
/// request's attempt (`current_attempt`) and header, in the order served.
fn seen_past_a_wait(stacked: bool) -> Vec<(Option<u64>, Option<String>)> {
    let r = build(
        Registry::builder().spec::<ApiRetry>().spec::<ApiRate>(),
        vec![
            (ApiRetry::PATH, section(Some("x-retry-attempt"))),
            (
                ApiRate::PATH,
                table([
                    ("limit_for_period", int(1)),
                    ("limit_refresh_period", s("100ms")),
                    ("max_wait", s("1s")),
                ]),
            ),
        ],
    );
    let seen = Arc::new(Mutex::new(Vec::new()));
    let server = {
        let seen = Arc::clone(&seen);
        tower::service_fn(move |req: http::Request<()>| {
            let header = req
                .headers()
                .get("x-retry-attempt")
                .map(|v| v.to_str().unwrap().to_owned());
            let mut seen = seen.lock().unwrap();
            seen.push((
                resilient_core::retry::current_attempt().map(|a| a.previous()),
                header,
            ));
            let out = if seen.len() < 3 {
                Err::<http::Response<()>, BoxError>("down".into())
            } else {
                Ok(http::Response::new(()))
            };
            std::future::ready(out)
        })
    };
    paused().block_on(r.scope(async {
        let started = tokio::time::Instant::now();
        let out = if stacked {
            ServiceBuilder::new()
                .layer(StackLayer::new().spec::<ApiRetry>().spec::<ApiRate>())
                .layer(AttemptHeaderLayer)
                .service(server)
                .oneshot(http::Request::new(()))
                .await
        } else {
            ServiceBuilder::new()
                .layer(ApiRetry::layer())
                .layer(ApiRate::layer())
                .layer(AttemptHeaderLayer)
                .service(server)
                .oneshot(http::Request::new(()))
                .await
        };
        assert!(out.is_ok(), "{:?}", out.map_err(|e| e.to_string()));
        // Each retry, due some 10 ms after a failure, waited for a later
        // period's permit.
        assert!(started.elapsed() >= std::time::Duration::from_millis(200));
    }));
    let seen = seen.lock().unwrap().clone();
    seen
}

/// A retry that waits at a gate below it (a rate permit reserved, a limit
/// that blocks) is still sent as that retry: the wait keeps the attempt
/// it was let in with, for a single-spec layer as for the stack.
#[test]
fn a_retry_that_waits_for_a_permit_still_carries_its_attempt() {
    let expected = vec![
        (None, None),
        (Some(1), Some("1".to_owned())),
        (Some(2), Some("2".to_owned())),
    ];
    assert_eq!(seen_past_a_wait(false), expected, "single-spec layers");
    assert_eq!(seen_past_a_wait(true), expected, "stack layer");
}
