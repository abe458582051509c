//! A stack as reqwest middleware runs the tower stack's state machine with
//! the next middleware as its inner call: each attempt is lent the
//! request's extensions, sees its retry (`current_attempt`, the attempt
//! header), and a request whose body cannot be copied is refused unsent
//! by a retry that could retry it, and sent once as it is by one that
//! could not.

#![allow(clippy::expect_used, clippy::unwrap_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::*;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use resilient_core::layer::middleware::NotRetryable;
use resilient_core::layer::StackLayer;
use resilient_core::retry::current_attempt;
use resilient_core::{CircuitBreakerSpec, ConcurrencyLimitSpec, Registry, RetrySpec, TimeoutSpec};

#[derive(RetrySpec)]
#[spec("mw.retry")]
struct Retry;

#[derive(CircuitBreakerSpec)]
#[spec("mw.breaker")]
struct Breaker;

#[derive(ConcurrencyLimitSpec)]
#[spec("mw.limit")]
struct Limit;

#[derive(TimeoutSpec)]
#[spec("mw.timeout")]
struct Timeout;

fn registry(attempts: i128) -> Registry {
    let root = table([(
        "mw",
        table([
            (
                "retry",
                table([("delay", s("10ms")), ("attempts", int(attempts))]),
            ),
            (
                "breaker",
                table([
                    ("failure_rate_threshold", int(50)),
                    ("minimum_required_calls", int(1)),
                    ("wait_duration_in_open_state", s("1h")),
                    ("permitted_calls_in_half_open_state", int(1)),
                    ("count_based", table([("window_size", int(10))])),
                ]),
            ),
            ("limit", table([("limit", int(64))])),
            ("timeout", table([("duration", s("1s"))])),
        ]),
    )]);
    Registry::builder()
        .spec::<Retry>()
        .spec::<Breaker>()
        .spec::<Limit>()
        .spec::<Timeout>()
        .build(&root)
        .expect("valid")
}

#[derive(Debug, thiserror::Error)]
#[error("down")]
struct Down;

/// The attempts an outer middleware's request went through, as the
/// innermost middleware counts them in the request's extensions.
#[derive(Clone, Copy, Default)]
struct Attempts(u64);

/// The last middleware: counts what reaches it, records the attempt it
/// runs in and counts it in the extensions, and fails each request's
/// first `fail_first` attempts.
struct Answer {
    hits: Arc<AtomicUsize>,
    seen: Arc<std::sync::Mutex<Vec<Option<u64>>>>,
    fail_first: u64,
}

#[async_trait::async_trait]
impl reqwest_middleware::Middleware for Answer {
    async fn handle(
        &self,
        _: reqwest::Request,
        extensions: &mut http::Extensions,
        _: reqwest_middleware::Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        self.hits.fetch_add(1, Ordering::SeqCst);
        // Read while polled: the retry's mark must be there.
        let attempt = current_attempt().map(|a| a.previous());
        self.seen.lock().unwrap().push(attempt);
        let made = extensions.get_or_insert_default::<Attempts>();
        made.0 += 1;
        if made.0 <= self.fail_first {
            Err(reqwest_middleware::Error::middleware(Down))
        } else {
            Ok(reqwest::Response::from(http::Response::new(
                Vec::<u8>::new(),
            )))
        }
    }
}

/// The first middleware: gives each request fresh extensions and returns
/// the attempts the answer counted in them.
struct Outer(Arc<std::sync::Mutex<Vec<u64>>>);

#[async_trait::async_trait]
impl reqwest_middleware::Middleware for Outer {
    async fn handle(
        &self,
        req: reqwest::Request,
        extensions: &mut http::Extensions,
        next: reqwest_middleware::Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let out = next.run(req, extensions).await;
        let made = extensions.get::<Attempts>().copied().unwrap_or_default();
        self.0.lock().unwrap().push(made.0);
        out
    }
}

struct Client {
    client: reqwest_middleware::ClientWithMiddleware,
    hits: Arc<AtomicUsize>,
    seen: Arc<std::sync::Mutex<Vec<Option<u64>>>>,
    attempts: Arc<std::sync::Mutex<Vec<u64>>>,
}

fn client(fail_first: u64) -> Client {
    let hits = Arc::new(AtomicUsize::new(0));
    let seen = Arc::default();
    let attempts = Arc::default();
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(Outer(Arc::clone(&attempts)))
        .with(
            StackLayer::<_, reqwest::Request>::new()
                .spec::<Breaker>()
                .spec::<Retry>()
                .spec::<Limit>()
                .spec::<Timeout>(),
        )
        .with(Answer {
            hits: Arc::clone(&hits),
            seen: Arc::clone(&seen),
            fail_first,
        })
        .build();
    Client {
        client,
        hits,
        seen,
        attempts,
    }
}

#[test]
fn each_attempt_is_lent_the_extensions_and_runs_marked_with_its_retry() {
    let r = registry(2);
    let c = client(2);
    paused().block_on(r.scope(async {
        let out = c.client.get("http://api.example/1").send().await;
        assert_eq!(out.expect("the third attempt answers").status(), 200);
    }));
    assert_eq!(c.hits.load(Ordering::SeqCst), 3);
    // The answer counted three attempts in one request's extensions: each
    // attempt was lent the same extensions, and the caller got them back.
    assert_eq!(*c.attempts.lock().unwrap(), vec![3]);
    assert_eq!(*c.seen.lock().unwrap(), vec![None, Some(1), Some(2)]);
}

#[test]
fn a_request_that_cannot_be_copied_is_refused_unsent_and_uncounted_by_the_breaker() {
    let r = registry(2);
    let c = client(0);
    paused().block_on(r.scope(async {
        let streamed = c
            .client
            .post("http://api.example/1")
            .body(reqwest::Body::wrap(String::from(
                "a body no retry can copy",
            )))
            .send()
            .await;
        let Err(reqwest_middleware::Error::Middleware(e)) = streamed else {
            panic!("a request whose body is a stream is refused: {streamed:?}");
        };
        let refused = e.downcast_ref::<NotRetryable>().expect("NotRetryable");
        assert_eq!(refused.spec, "Retry");
        assert_eq!(c.hits.load(Ordering::SeqCst), 0, "never sent");
        // With one call its minimum, a breaker that counted the refusal as
        // a failure would now be open.
        let out = c.client.get("http://api.example/1").send().await;
        assert_eq!(out.expect("the breaker is closed").status(), 200);
    }));
    assert_eq!(c.hits.load(Ordering::SeqCst), 1);
}

#[test]
fn a_request_that_cannot_be_copied_is_sent_once_by_a_retry_that_cannot_retry() {
    let r = registry(0);
    let c = client(0);
    paused().block_on(r.scope(async {
        let out = c
            .client
            .post("http://api.example/1")
            .body(reqwest::Body::wrap(String::from("sent as it is")))
            .send()
            .await;
        assert_eq!(out.expect("sent once").status(), 200);
    }));
    assert_eq!(c.hits.load(Ordering::SeqCst), 1);
}

#[test]
fn requests_on_two_workers_each_get_their_own_extensions_and_retries() {
    const TASKS: u64 = 400;
    let r = registry(2);
    // Each request's first attempt fails: two attempts per request.
    let c = Arc::new(client(1));
    let rt = r
        .set_default_on(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all(),
        )
        .build()
        .unwrap();
    rt.block_on(async {
        // Each call in its own task, as a server makes them.
        let tasks: Vec<_> = (0..TASKS)
            .map(|i| {
                let c = Arc::clone(&c);
                tokio::spawn(async move {
                    let url = format!("http://api.example/{i}");
                    let out = c.client.get(url).send().await;
                    assert_eq!(out.expect("the retry answers").status(), 200);
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
    assert_eq!(c.hits.load(Ordering::SeqCst) as u64, 2 * TASKS);
    let attempts = c.attempts.lock().unwrap();
    assert_eq!(attempts.len() as u64, TASKS);
    assert!(attempts.iter().all(|&n| n == 2), "{attempts:?}");
}

#[derive(RetrySpec)]
#[spec("mw_wait.retry")]
struct WaitRetry;

#[derive(resilient_core::RateLimiterSpec)]
#[spec("mw_wait.rate")]
struct WaitRate;

#[derive(RetrySpec)]
#[spec("mw_wait.once")]
struct OnceRetry;

/// What the last middleware saw of each request: the attempt it ran in
/// and its attempt header.
type Sights = Arc<std::sync::Mutex<Vec<(Option<u64>, Option<String>)>>>;

/// The last middleware: records what it sees, fails the first request.
struct Record(Sights);

#[async_trait::async_trait]
impl reqwest_middleware::Middleware for Record {
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
        let mut sights = self.0.lock().unwrap();
        sights.push((current_attempt().map(|a| a.previous()), header));
        if sights.len() == 1 {
            Err(reqwest_middleware::Error::middleware(Down))
        } else {
            Ok(reqwest::Response::from(http::Response::new(
                Vec::<u8>::new(),
            )))
        }
    }
}

fn wait_registry() -> Registry {
    let header = |attempts| {
        table([
            ("delay", s("10ms")),
            ("attempts", int(attempts)),
            ("attempt_header", s("x-retry-attempt")),
        ])
    };
    let root = table([(
        "mw_wait",
        table([
            ("retry", header(2)),
            ("once", header(0)),
            (
                "rate",
                table([
                    ("limit_for_period", int(1)),
                    ("limit_refresh_period", s("100ms")),
                    ("max_wait", s("1s")),
                ]),
            ),
        ]),
    )]);
    Registry::builder()
        .spec::<WaitRetry>()
        .spec::<WaitRate>()
        .spec::<OnceRetry>()
        .build(&root)
        .expect("valid")
}

#[test]
fn a_retry_that_waits_for_a_permit_still_runs_marked_with_its_attempt() {
    let r = wait_registry();
    let sights = Sights::default();
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(
            StackLayer::<_, reqwest::Request>::new()
                .spec::<WaitRetry>()
                .spec::<WaitRate>(),
        )
        .with(Record(Arc::clone(&sights)))
        .build();
    paused().block_on(r.scope(async {
        let started = tokio::time::Instant::now();
        let out = client.get("http://api.example/1").send().await;
        assert_eq!(out.expect("the retry answers").status(), 200);
        // The retry, due at 10 ms, waited for the next period's permit.
        assert!(started.elapsed() >= std::time::Duration::from_millis(100));
    }));
    assert_eq!(
        *sights.lock().unwrap(),
        vec![(None, None), (Some(1), Some("1".to_owned()))]
    );
}

#[test]
fn a_first_attempt_inside_an_outer_retry_is_its_own_retry_s_not_the_outer_s() {
    let r = wait_registry();
    let sights = Sights::default();
    // One attempt per request through the stack: its retry has none.
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(StackLayer::<_, reqwest::Request>::new().spec::<OnceRetry>())
        .with(Record(Arc::clone(&sights)))
        .build();
    paused().block_on(r.scope(async {
        let outer = WaitRetry::get().expect("the outer retry's handle");
        let out = outer
            .call(|| async {
                client
                    .get("http://api.example/1")
                    .send()
                    .await
                    .map(|r| r.status())
            })
            .await;
        assert_eq!(out.expect("the outer retry's second call answers"), 200);
    }));
    // The outer retry's second call goes through the stack's first
    // attempt: the middleware inside sees that attempt (no retry, no
    // header), not the outer retry's.
    assert_eq!(*sights.lock().unwrap(), vec![(None, None), (None, None)]);
}

#[derive(resilient_core::ChaosSpec)]
#[spec("mw_chaos.chaos")]
struct Injected;

/// A chaos spec is middleware too (`Middlewares::middleware`): with
/// `error_rate = 1` every request ends with its injected error, and none
/// reaches the next middleware.
#[test]
fn a_chaos_spec_as_middleware_injects_its_error_before_sending() {
    use resilient_core::layer::middleware::Middlewares;

    let root = table([(
        "mw_chaos",
        table([(
            "chaos",
            table([("enabled", boolean(true)), ("error_rate", float(1.0))]),
        )]),
    )]);
    let r = Registry::builder()
        .spec::<Injected>()
        .build(&root)
        .expect("valid");
    let hits = Arc::new(AtomicUsize::new(0));
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(Injected::middleware())
        .with(Answer {
            hits: Arc::clone(&hits),
            seen: Arc::default(),
            fail_first: 0,
        })
        .build();
    paused().block_on(r.scope(async {
        for _ in 0..3 {
            let out = client.get("http://api.example/1").send().await;
            let e = out.expect_err("every request is failed by chaos");
            assert!(
                matches!(
                    resilient_core::Error::from_middleware(&e),
                    Some(resilient_core::Error::Injected {
                        spec: "Injected",
                        ..
                    })
                ),
                "{e}"
            );
        }
    }));
    assert_eq!(hits.load(Ordering::SeqCst), 0, "nothing was sent");
}
