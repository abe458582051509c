//! A server's concurrency limit sheds the retries its requests announce
//! (`retry_header`, `retry_share`), through the limit's layer and the stack
//! layer applied with `reading_retry_header`: under a full limit a retry is
//! refused at once and never waits, a first call waits as the policy says;
//! counted in calls, hits, places and shed retries, on tokio's paused clock
//! (one test on two workers, counting places only).

#![allow(clippy::expect_used, clippy::unwrap_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::capture::{Capture, Meters};
use support::*;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use resilient_core::concurrency::LimiterSettings;
use resilient_core::layer::{Layered, RespondLayer, StackLayer};
use resilient_core::settings::Value;
use resilient_core::{concurrency_limit, BoxError, ConcurrencyLimitSpec, Error, Registry, Spec};
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

#[derive(ConcurrencyLimitSpec)]
#[spec("shed.limit")]
struct Pets;

const SPEC: (&str, &str, &str) = ("Pets", "shed.limit", "concurrency_limit");
const SHED: &str = "resilient_concurrency_shed_total";
const SHED_LABELS: &[(&str, &str)] = &[("spec", "Pets"), ("path", "shed.limit")];

/// A handler as a server's service: answers 200 after `took`, counting
/// hits and the requests running at once (and the most seen).
#[derive(Clone)]
struct Handler {
    hits: Arc<AtomicUsize>,
    running: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
    took: Duration,
}

impl Handler {
    fn new(took: Duration) -> Self {
        Self {
            hits: Arc::new(AtomicUsize::new(0)),
            running: Arc::new(AtomicUsize::new(0)),
            peak: Arc::new(AtomicUsize::new(0)),
            took,
        }
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }
}

impl<B: Send + 'static> Service<Request<B>> for Handler {
    type Response = Response<String>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<String>, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<B>) -> Self::Future {
        self.hits.fetch_add(1, Ordering::SeqCst);
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        let (running, took) = (Arc::clone(&self.running), self.took);
        Box::pin(async move {
            tokio::time::sleep(took).await;
            running.fetch_sub(1, Ordering::SeqCst);
            Ok(Response::new("pet".to_owned()))
        })
    }
}

/// A request; `attempts`: the value of `x-retry-attempt`, if any.
fn request(attempts: Option<&str>) -> Request<String> {
    let mut builder = Request::get("/pets/7");
    if let Some(a) = attempts {
        builder = builder.header("x-retry-attempt", a);
    }
    builder.body(String::new()).unwrap()
}

/// The limit's section: `limit` places, `policy`, and `more` keys.
fn section<const N: usize>(limit: i128, policy: &str, more: [(&str, Value); N]) -> Value {
    let mut section = metered(table([("limit", int(limit)), ("policy", s(policy))]));
    for (key, value) in more {
        section = with(section, key, value);
    }
    section
}

fn registry_with(section: Value, meters: &Meters) -> Registry {
    metrics::with_local_recorder(meters, || {
        build(
            Registry::builder().spec::<Pets>(),
            vec![(Pets::PATH, section)],
        )
    })
}

/// The two doors that read `retry_header`: the limit's own layer and a
/// one-spec stack layer, each applied with `reading_retry_header`.
#[derive(Debug, Clone, Copy)]
enum Door {
    Layer,
    Stack,
}

type Svc = tower::util::BoxCloneService<Request<String>, Response<String>, BoxError>;

fn service(door: Door, handler: &Handler) -> Svc {
    match door {
        Door::Layer => tower::util::BoxCloneService::new(
            Pets::layer().reading_retry_header().layer(handler.clone()),
        ),
        Door::Stack => tower::util::BoxCloneService::new(
            StackLayer::new()
                .spec_reading_retry_header::<Pets>()
                .layer(handler.clone()),
        ),
    }
}

/// The same doors without `reading_retry_header`.
fn unread_service(door: Door, handler: &Handler) -> Svc {
    match door {
        Door::Layer => tower::util::BoxCloneService::new(Pets::layer().layer(handler.clone())),
        Door::Stack => tower::util::BoxCloneService::new(
            StackLayer::new().spec::<Pets>().layer(handler.clone()),
        ),
    }
}

fn is_limit_reached(e: &BoxError) -> bool {
    matches!(
        e.downcast_ref::<Error>(),
        Some(Error::ConcurrencyLimitReached {
            spec: "Pets",
            limit: 2
        })
    )
}

/// Under a full `block` limit of 2: a retry is refused at once, counted as
/// one rejection and one shed retry; a first call that came before it
/// waits, and is served when a place frees.
async fn full_block_limit_sheds_the_retry(door: Door) {
    let meters = Meters::default();
    let r = registry_with(
        section(2, "block", [("retry_header", s("x-retry-attempt"))]),
        &meters,
    );
    let _registry = r.set_default();
    let _recorder = metrics::set_default_local_recorder(&meters);
    let handler = Handler::new(Duration::from_millis(100));
    let svc = service(door, &handler);

    let start = Instant::now();
    let held: Vec<_> = (0..2)
        .map(|_| tokio::spawn(svc.clone().oneshot(request(None))))
        .collect();
    tokio::task::yield_now().await;
    assert_eq!((handler.hits(), Pets::get().unwrap().in_use()), (2, 2));

    let first = tokio::spawn(svc.clone().oneshot(request(None)));
    tokio::task::yield_now().await;
    let retry = svc.clone().oneshot(request(Some("1"))).await;
    let refused_at = start.elapsed();

    let refused = retry.expect_err("a retry under a full limit is refused");
    assert!(is_limit_reached(&refused), "{door:?}: {refused}");
    assert_eq!(refused_at, Duration::ZERO, "{door:?}: refused at once");
    assert_eq!(
        (
            meters.calls(SPEC, "rejected"),
            meters.counter(SHED, SHED_LABELS)
        ),
        (1, Some(1)),
        "{door:?}: one rejection, and it is a shed retry"
    );
    assert_eq!(handler.hits(), 2, "{door:?}: the first call still waits");

    for h in held {
        h.await.unwrap().unwrap();
    }
    first.await.unwrap().expect("the first call is served");
    assert_eq!(start.elapsed(), Duration::from_millis(200), "{door:?}");
    assert_eq!(
        (
            handler.hits(),
            meters.calls(SPEC, "success"),
            meters.calls(SPEC, "rejected"),
            handler.peak()
        ),
        (3, 3, 1, 2),
        "{door:?}: hits, admitted, refused, most at once"
    );
}

#[tokio::test(start_paused = true)]
async fn a_retry_under_a_full_block_limit_is_refused_at_once_through_the_layer() {
    full_block_limit_sheds_the_retry(Door::Layer).await;
}

#[tokio::test(start_paused = true)]
async fn a_retry_under_a_full_block_limit_is_refused_at_once_through_the_stack() {
    full_block_limit_sheds_the_retry(Door::Stack).await;
}

/// Without `retry_header`, a request that announces a retry waits as a
/// first call does: the behaviour before the setting, through a door that
/// reads the header and through one that does not.
#[tokio::test(start_paused = true)]
async fn without_retry_header_a_retry_waits_like_a_first_call() {
    for (door, reads) in [
        (Door::Layer, true),
        (Door::Stack, true),
        (Door::Layer, false),
        (Door::Stack, false),
    ] {
        let meters = Meters::default();
        let r = registry_with(section(2, "block", []), &meters);
        let _registry = r.set_default();
        let _recorder = metrics::set_default_local_recorder(&meters);
        let handler = Handler::new(Duration::from_millis(100));
        let svc = if reads {
            service(door, &handler)
        } else {
            unread_service(door, &handler)
        };

        let start = Instant::now();
        let held: Vec<_> = (0..2)
            .map(|_| tokio::spawn(svc.clone().oneshot(request(None))))
            .collect();
        tokio::task::yield_now().await;
        let retry = svc.clone().oneshot(request(Some("1"))).await;
        retry.expect("the retry waits, and is served");
        // Its place frees at 100 ms, and it takes 100 ms.
        assert_eq!(
            start.elapsed(),
            Duration::from_millis(200),
            "{door:?} {reads}"
        );
        for h in held {
            h.await.unwrap().unwrap();
        }
        assert_eq!(
            (
                handler.hits(),
                meters.calls(SPEC, "success"),
                meters.calls(SPEC, "rejected"),
                meters.counter(SHED, SHED_LABELS)
            ),
            (3, 3, 0, None),
            "{door:?} {reads}: every request served, nothing shed"
        );
    }
}

/// What the header says, read: absent or `0` is a first call (it waits);
/// `1`, `3`, and what is no count (`abc`, empty, ` 2 `'s neighbours that
/// do not parse) are retries (refused at once).
#[tokio::test(start_paused = true)]
async fn a_value_that_is_no_count_is_read_as_a_retry() {
    let cases: [(Option<&str>, bool); 7] = [
        (None, false),
        (Some("0"), false),
        (Some(" 0 "), false),
        (Some("1"), true),
        (Some("3"), true),
        (Some("abc"), true),
        (Some(""), true),
    ];
    for (value, retry) in cases {
        let meters = Meters::default();
        let r = registry_with(
            section(
                1,
                "block",
                [
                    ("retry_header", s("X-Retry-Attempt")),
                    ("max_wait", s("1s")),
                ],
            ),
            &meters,
        );
        let _registry = r.set_default();
        let _recorder = metrics::set_default_local_recorder(&meters);
        let handler = Handler::new(Duration::from_millis(100));
        let svc = service(Door::Layer, &handler);
        let held = tokio::spawn(svc.clone().oneshot(request(None)));
        tokio::task::yield_now().await;
        let start = Instant::now();
        let out = svc.clone().oneshot(request(value)).await;
        let waited = start.elapsed();
        held.await.unwrap().unwrap();
        let shed = meters.counter(SHED, SHED_LABELS).unwrap_or(0);
        if retry {
            assert!(out.is_err(), "{value:?}");
            assert_eq!(
                (waited, shed, handler.hits()),
                (Duration::ZERO, 1, 1),
                "{value:?}"
            );
        } else {
            assert!(out.is_ok(), "{value:?}");
            // Its place frees at 100 ms, and it takes 100 ms.
            assert_eq!(
                (waited, shed, handler.hits()),
                (Duration::from_millis(200), 0, 2),
                "{value:?}"
            );
        }
    }
}

/// Under `reject`, a retry under a full limit is refused as any call is,
/// and counted as shed; a first call is counted as a rejection only.
#[tokio::test(start_paused = true)]
async fn under_reject_a_refused_retry_is_counted_as_shed() {
    let meters = Meters::default();
    let r = registry_with(
        section(2, "reject", [("retry_header", s("x-retry-attempt"))]),
        &meters,
    );
    let _registry = r.set_default();
    let _recorder = metrics::set_default_local_recorder(&meters);
    let handler = Handler::new(Duration::from_millis(100));
    let svc = service(Door::Stack, &handler);
    let held: Vec<_> = (0..2)
        .map(|_| tokio::spawn(svc.clone().oneshot(request(None))))
        .collect();
    tokio::task::yield_now().await;
    assert!(svc.clone().oneshot(request(None)).await.is_err());
    assert!(svc.clone().oneshot(request(Some("2"))).await.is_err());
    for h in held {
        h.await.unwrap().unwrap();
    }
    assert_eq!(
        (
            meters.calls(SPEC, "rejected"),
            meters.counter(SHED, SHED_LABELS),
            handler.hits()
        ),
        (2, Some(1), 2)
    );
}

/// `retry_share = 0.8` of 10 places: retries are admitted while fewer than
/// 8 places are in use; the last two are kept for first calls.
#[tokio::test(start_paused = true)]
async fn retry_share_keeps_the_last_places_for_first_calls() {
    for (policy, door) in [
        ("reject", Door::Layer),
        ("block", Door::Layer),
        ("reject", Door::Stack),
        ("block", Door::Stack),
    ] {
        let meters = Meters::default();
        let r = registry_with(
            section(
                10,
                policy,
                [
                    ("retry_header", s("x-retry-attempt")),
                    ("retry_share", float(0.8)),
                ],
            ),
            &meters,
        );
        let _registry = r.set_default();
        let _recorder = metrics::set_default_local_recorder(&meters);
        let handler = Handler::new(Duration::from_millis(100));
        let svc = service(door, &handler);
        let mut running = Vec::new();
        // Seven first calls, then a retry: the eighth place, admitted.
        for _ in 0..7 {
            running.push(tokio::spawn(svc.clone().oneshot(request(None))));
        }
        running.push(tokio::spawn(svc.clone().oneshot(request(Some("1")))));
        tokio::task::yield_now().await;
        assert_eq!(
            (Pets::get().unwrap().in_use(), handler.hits()),
            (8, 8),
            "{policy} {door:?}"
        );
        // Eight in use: a retry is shed, first calls take the last two.
        let shed = svc.clone().oneshot(request(Some("1"))).await;
        assert!(shed.is_err(), "{policy} {door:?}");
        for _ in 0..2 {
            running.push(tokio::spawn(svc.clone().oneshot(request(None))));
        }
        tokio::task::yield_now().await;
        assert_eq!(
            (Pets::get().unwrap().in_use(), handler.hits()),
            (10, 10),
            "{policy} {door:?}"
        );
        for h in running {
            h.await.unwrap().unwrap();
        }
        assert_eq!(
            (
                meters.calls(SPEC, "success"),
                meters.calls(SPEC, "rejected"),
                meters.counter(SHED, SHED_LABELS),
                handler.peak()
            ),
            (10, 1, Some(1), 10),
            "{policy} {door:?}"
        );
    }
}

/// Through an axum router, the limit wrapped in `RespondLayer`: a retry
/// under a full limit gets the limit's answer (503), a first call is
/// served; the handler's hits say which reached it.
#[tokio::test(start_paused = true)]
async fn an_axum_route_answers_a_shed_retry_as_a_full_limit() {
    use axum::body::Body;
    use axum::routing::get;

    let meters = Meters::default();
    let r = registry_with(
        section(1, "block", [("retry_header", s("x-retry-attempt"))]),
        &meters,
    );
    let _registry = r.set_default();
    let _recorder = metrics::set_default_local_recorder(&meters);
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&hits);
    let app = axum::Router::new().route(
        "/pets/{id}",
        get(move || {
            let hits = Arc::clone(&counted);
            async move {
                hits.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(100)).await;
                "pet"
            }
        })
        .route_layer(RespondLayer::new(Pets::layer().reading_retry_header())),
    );
    let get = |attempts: Option<&str>| {
        let mut builder = Request::get("/pets/7");
        if let Some(a) = attempts {
            builder = builder.header("x-retry-attempt", a);
        }
        app.clone().oneshot(builder.body(Body::empty()).unwrap())
    };

    let start = Instant::now();
    let held = tokio::spawn(get(None));
    tokio::task::yield_now().await;
    let first = tokio::spawn(get(None));
    tokio::task::yield_now().await;
    let retry: Response<Body> = get(Some("1")).await.unwrap();
    assert_eq!(
        (retry.status(), start.elapsed()),
        (StatusCode::SERVICE_UNAVAILABLE, Duration::ZERO)
    );
    assert_eq!(held.await.unwrap().unwrap().status(), StatusCode::OK);
    assert_eq!(first.await.unwrap().unwrap().status(), StatusCode::OK);
    assert_eq!(start.elapsed(), Duration::from_millis(200));
    assert_eq!(
        (
            hits.load(Ordering::SeqCst),
            meters.calls(SPEC, "success"),
            meters.counter(SHED, SHED_LABELS)
        ),
        (2, 2, Some(1)),
        "two served, the retry shed before the handler"
    );
}

/// Two workers, each request its own task: the places in use never pass
/// the limit, and every request sent is either served or refused (a
/// refused one is a retry: first calls wait under `block`).
#[test]
fn on_two_workers_places_stay_within_the_limit_and_each_request_is_answered() {
    const SENT: usize = 400;
    // Kept for the process: the tasks on the workers hold it.
    let meters: &'static Meters = Box::leak(Box::default());
    let r = registry_with(
        section(
            4,
            "block",
            [
                ("retry_header", s("x-retry-attempt")),
                ("retry_share", float(0.5)),
            ],
        ),
        meters,
    );
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.worker_threads(2).enable_time();
    let runtime = r.set_default_on(&mut builder).build().unwrap();
    let handler = Handler::new(Duration::from_micros(200));
    let (served, refused, refused_first) = runtime.block_on(r.scope(async {
        let svc = service(Door::Stack, &handler);
        let tasks: Vec<_> = (0..SENT)
            .map(|i| {
                let retry = i % 2 == 1;
                let svc = svc.clone();
                tokio::spawn(async move {
                    // Polled under the test's recorder, on whichever
                    // worker: the shed counter is registered at the first
                    // shed, with the recorder current then.
                    let mut call = Box::pin(svc.oneshot(request(retry.then_some("1"))));
                    let out = std::future::poll_fn(move |cx| {
                        metrics::with_local_recorder(meters, || call.as_mut().poll(cx))
                    })
                    .await;
                    (retry, out)
                })
            })
            .collect();
        let (mut served, mut refused, mut refused_first) = (0, 0, 0);
        for t in tasks {
            match t.await.unwrap() {
                (_, Ok(_)) => served += 1,
                (retry, Err(e)) => {
                    assert!(is_limit_reached_of(&e, 4), "{e}");
                    refused += 1;
                    if !retry {
                        refused_first += 1;
                    }
                }
            }
        }
        (served, refused, refused_first)
    }));
    assert_eq!(served + refused, SENT);
    assert_eq!(refused_first, 0, "first calls wait under `block`");
    assert_eq!(handler.hits(), served);
    assert!(handler.peak() <= 4, "peak {}", handler.peak());
    assert_eq!(
        (
            meters.calls(SPEC, "success") as usize,
            meters.calls(SPEC, "rejected") as usize
        ),
        (served, refused)
    );
    assert_eq!(
        meters.counter(SHED, SHED_LABELS).unwrap_or(0) as usize,
        refused
    );
}

fn is_limit_reached_of(e: &BoxError, limit: u32) -> bool {
    matches!(
        e.downcast_ref::<Error>(),
        Some(Error::ConcurrencyLimitReached { limit: l, .. }) if *l == limit
    )
}

// --- what the attribute cannot read --------------------------------------

#[derive(ConcurrencyLimitSpec)]
#[spec("shed.attribute")]
struct Reviews;

#[concurrency_limit(Reviews)]
async fn review(took: Duration) -> Result<(), Error> {
    tokio::time::sleep(took).await;
    Ok(())
}

/// The attribute has no request to read: a spec with `retry_header` used
/// through it treats every call as a first call, and says so at WARN once,
/// the first time a call finds the limit full (when the setting would
/// have acted).
#[tokio::test(start_paused = true)]
async fn retry_header_through_the_attribute_warns_once_when_full() {
    let capture = Capture::default();
    let _subscriber = tracing::subscriber::set_default(capture.clone());
    let r = build(
        Registry::builder().spec::<Reviews>(),
        vec![(
            Reviews::PATH,
            table([("limit", int(1)), ("retry_header", s("x-retry-attempt"))]),
        )],
    );
    let _registry = r.set_default();
    let warned = || capture.at("resilient::concurrency", tracing::Level::WARN);

    review(Duration::ZERO).await.unwrap();
    assert!(warned().is_empty(), "a limit not full says nothing");
    let (held, ()) = tokio::join!(review(Duration::from_millis(100)), async {
        tokio::task::yield_now().await;
        for _ in 0..3 {
            assert!(matches!(
                review(Duration::ZERO).await,
                Err(Error::ConcurrencyLimitReached { .. })
            ));
        }
    });
    held.unwrap();
    let lines: Vec<_> = warned()
        .into_iter()
        .filter(|l| l.message.contains("retry_header"))
        .collect();
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(
        lines[0]
            .message
            .contains("`retry_header` of `shed.attribute` has no effect"),
        "{}",
        lines[0].message
    );
}

// --- settings --------------------------------------------------------------

/// The problems `section` (of the limit) has, as `key: rule`.
fn problems(section: Value) -> Vec<String> {
    match Registry::builder()
        .spec::<Pets>()
        .build(&root(vec![(Pets::PATH, section)]))
    {
        Ok(_) => Vec::new(),
        Err(found) => found.iter().map(ToString::to_string).collect(),
    }
}

fn limit_with<const N: usize>(more: [(&str, Value); N]) -> Value {
    let mut section = table([("limit", int(10)), ("policy", s("block"))]);
    for (key, value) in more {
        section = with(section, key, value);
    }
    section
}

#[test]
fn each_silent_mistake_of_the_settings_is_a_problem() {
    let header = || ("retry_header", s("x-retry-attempt"));
    let cases: Vec<(Value, &str)> = vec![
        // Misspelt: the nearest key is suggested.
        (
            limit_with([("retry_headers", s("x-retry-attempt"))]),
            "retry_header",
        ),
        (
            limit_with([header(), ("retry_shares", float(0.5))]),
            "retry_share",
        ),
        // Not a header name.
        (
            limit_with([("retry_header", s("x retry attempt"))]),
            "HTTP header name",
        ),
        (limit_with([("retry_header", s(""))]), "HTTP header name"),
        (
            limit_with([("retry_header", s("x-retry-attempt:"))]),
            "HTTP header name",
        ),
        // Quoted twice: quotes inside the TOML string.
        (
            limit_with([("retry_header", s("'x-retry-attempt'"))]),
            "no quotes inside",
        ),
        (
            limit_with([("retry_header", s("\"x-retry-attempt\""))]),
            "no quotes inside",
        ),
        // Not text.
        (limit_with([("retry_header", int(1))]), "must be text"),
        // A header that counts the first try too.
        (
            limit_with([("retry_header", s("x-envoy-attempt-count"))]),
            "counts the attempt itself",
        ),
        // Out of range, or a percent.
        (
            limit_with([header(), ("retry_share", float(0.0))]),
            "> 0 and < 1",
        ),
        (
            limit_with([header(), ("retry_share", float(1.5))]),
            "> 0 and < 1",
        ),
        (
            limit_with([header(), ("retry_share", int(80))]),
            "write `0.8`",
        ),
        (limit_with([header(), ("retry_share", int(1))]), "remove it"),
        (
            limit_with([header(), ("retry_share", s("80%"))]),
            "> 0 and < 1",
        ),
        // No effect without the header.
        (
            limit_with([("retry_share", float(0.5))]),
            "without `retry_header`",
        ),
        // No place left for retries.
        (
            table([("limit", int(1)), header(), ("retry_share", float(0.8))]),
            "leaves retries no place",
        ),
        // Nor at an adaptive limit's largest.
        (
            table([
                ("type", s("adaptive")),
                ("min", int(1)),
                ("initial", int(2)),
                ("max", int(3)),
                header(),
                ("retry_share", float(0.3)),
            ]),
            "leaves retries no place: even at its most, `max` = 3 places × 0.3 is less than one",
        ),
    ];
    for (section, said) in cases {
        let found = problems(section.clone());
        assert!(
            found.iter().any(|p| p.contains(said)),
            "{section:?}: expected a problem saying {said:?}, found {found:#?}"
        );
    }
}

#[test]
fn a_header_name_is_read_in_any_case_and_a_share_as_env_writes_it() {
    let r = build(
        Registry::builder().spec::<Pets>(),
        vec![(
            Pets::PATH,
            limit_with([
                ("retry_header", s("Grpc-Previous-Rpc-Attempts")),
                // An environment variable's value is always text.
                ("retry_share", s("0.8")),
            ]),
        )],
    );
    let snapshot = r.snapshot();
    let settings = snapshot.specs[0].settings::<LimiterSettings>().unwrap();
    let retries = settings.retries.unwrap();
    assert_eq!(
        (retries.header, retries.share),
        ("grpc-previous-rpc-attempts", Some(0.8))
    );
}

#[derive(resilient_core::RetrySpec)]
#[spec("shed.retry")]
struct PetsRetry;

/// A limit that reads `retry_header`, inside a retry of the same client
/// (a stack's retry part, or a retry layer above the limit's): the copy
/// a retry sends carries the header its first attempt had (none here),
/// yet each retry is a retry, refused at once by the full limit where the
/// first attempt waited `max_wait`; counted as shed retries.
async fn a_retry_from_above_is_shed(stacked: bool) {
    let meters = Meters::default();
    let r = metrics::with_local_recorder(&meters, || {
        build(
            Registry::builder().spec::<Pets>().spec::<PetsRetry>(),
            vec![
                (
                    Pets::PATH,
                    section(
                        1,
                        "block",
                        [
                            ("max_wait", s("50ms")),
                            ("retry_header", s("x-retry-attempt")),
                        ],
                    ),
                ),
                (
                    PetsRetry::PATH,
                    table([("delay", s("10ms")), ("attempts", int(2))]),
                ),
            ],
        )
    });
    let _registry = r.set_default();
    let _recorder = metrics::set_default_local_recorder(&meters);
    let handler = Handler::new(Duration::from_secs(1));
    let svc: Svc = if stacked {
        tower::util::BoxCloneService::new(
            StackLayer::new()
                .spec::<PetsRetry>()
                .spec_reading_retry_header::<Pets>()
                .layer(handler.clone()),
        )
    } else {
        tower::util::BoxCloneService::new(
            tower::ServiceBuilder::new()
                .layer(PetsRetry::layer())
                .layer(Pets::layer().reading_retry_header())
                .service(handler.clone()),
        )
    };
    let holder = tokio::spawn(svc.clone().oneshot(request(None)));
    tokio::task::yield_now().await;
    assert_eq!(handler.hits(), 1);

    let start = Instant::now();
    let out = svc.oneshot(request(None)).await;
    let took = start.elapsed();
    assert!(out.is_err(), "stacked {stacked}: the limit stays full");
    assert_eq!(
        (
            handler.hits(),
            meters.calls(SPEC, "rejected"),
            meters.counter(SHED, SHED_LABELS)
        ),
        (1, 3, Some(2)),
        "stacked {stacked}: three attempts refused, the two retries shed"
    );
    // The first attempt waited 50 ms; each retry, due after its delay,
    // was refused at once, not after another 50 ms.
    assert!(
        took >= Duration::from_millis(50) && took < Duration::from_millis(100),
        "stacked {stacked}: {took:?}"
    );
    holder.await.unwrap().expect("the holder is served");
}

#[tokio::test(start_paused = true)]
async fn a_retry_of_the_stack_is_shed_by_its_limit_part() {
    a_retry_from_above_is_shed(true).await;
}

#[tokio::test(start_paused = true)]
async fn a_retry_of_a_retry_layer_is_shed_by_the_limit_layer_below() {
    a_retry_from_above_is_shed(false).await;
}
