//! Adaptive throttling of retries (`throttle`, the Google SRE book's
//! client-side throttling): every test counts the attempts that reached the
//! body, those it accepted, the retries refused, and the events and metrics
//! that said so. Randomness is the thread's `fastrand` generator, seeded,
//! on a current-thread runtime: each run draws the same numbers.

#![allow(clippy::expect_used, clippy::unwrap_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::capture::{Capture, Meters};
use support::*;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use resilient_core::retry::Exhaustion;
use resilient_core::settings::Value;
use resilient_core::telemetry::{Event, StoppedBy};
use resilient_core::{retryable, Classify, Error, Registry, RetrySpec, Spec};
use tracing::Level;

#[derive(Debug, thiserror::Error)]
enum TestError {
    #[error("overloaded {0}")]
    Overloaded(u64),
    #[error(transparent)]
    Resilience(#[from] Error),
}

/// A backend: counts the attempts it receives and those it accepts.
#[derive(Default)]
struct Backend {
    received: AtomicU64,
    accepted: AtomicU64,
}

impl Backend {
    /// Accepts one attempt in `every` (the `every`-th, 2·`every`-th, ..),
    /// rejects the others with a retryable failure.
    fn serve(&self, every: u64) -> Result<u64, TestError> {
        let n = self.received.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_multiple_of(every) {
            self.accepted.fetch_add(1, Ordering::Relaxed);
            Ok(n)
        } else {
            Err(TestError::Overloaded(n))
        }
    }

    fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }

    fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }
}

fn section(attempts: i128, throttle: Option<Value>) -> Value {
    let base = table([
        ("delay", s("1ms")),
        ("attempts", int(attempts)),
        (
            "telemetry",
            table([("metrics", table([("enabled", boolean(true))]))]),
        ),
    ]);
    match throttle {
        Some(t) => with(base, "throttle", t),
        None => base,
    }
}

fn sre(k: f64) -> Value {
    table([("k", float(k)), ("window", s("2m"))])
}

fn recorder() -> (
    Arc<Mutex<Vec<Event>>>,
    impl Fn(&Event) + Send + Sync + 'static,
) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&events);
    (events, move |e: &Event| {
        sink.lock().unwrap().push(e.clone())
    })
}

fn gave_up(events: &Mutex<Vec<Event>>, by: StoppedBy) -> usize {
    events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| matches!(e, Event::RetryExhausted { reason, .. } if *reason == by))
        .count()
}

fn scheduled(events: &Mutex<Vec<Event>>) -> usize {
    events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| matches!(e, Event::RetryScheduled { .. }))
        .count()
}

// ------------------------------------------------------------ the SRE book

#[derive(RetrySpec)]
#[spec("throttle.sre")]
struct Sre;

#[derive(RetrySpec)]
#[spec("throttle.plain")]
struct Plain;

/// `calls` calls, one every 50 ms, of a backend that accepts one attempt in
/// `every`, under spec `S`: what the backend received and accepted.
async fn offered<S>(r: &Registry, every: u64, calls: u64) -> (u64, u64)
where
    S: RetrySpec,
    S::Classifier: Classify<u64, TestError>,
    TestError: Exhaustion<S::Exhausted>,
{
    let backend = Backend::default();
    for _ in 0..calls {
        let _ = r
            .scope(async { S::get()?.call(|| async { backend.serve(every) }).await })
            .await;
        tokio::time::advance(Duration::from_millis(50)).await;
    }
    (backend.received(), backend.accepted())
}

/// The book: "requests" reaching the backend stay near K times its
/// accepts. At a backend accepting every other attempt the ratio is 2 by
/// construction, so K = 2 leaves almost every retry alone: a retry is
/// refused only while the window holds more than 2 requests per accept,
/// which alternation allows by one at most (refusal ≤ 1/(requests + 1)).
#[test]
fn at_a_backend_accepting_half_k_2_lets_through_twice_the_accepted() {
    fastrand::seed(7);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let r = registry::<Sre>(section(3, Some(sre(2.0))));
        let (events, listener) = recorder();
        r.subscribe(listener);
        // 4000 calls over 200 s: the 2 m window turns over.
        let (received, accepted) = offered::<Sre>(&r, 2, 4000).await;
        let refused = gave_up(&events, StoppedBy::Throttled) as u64;
        let counts = r
            .sync_scope(Sre::get)
            .unwrap()
            .throttle_counts()
            .expect("throttled spec");
        println!(
            "K=2, backend accepts 1/2: received {received}, accepted {accepted}, ratio {:.3}, retries refused {refused}; window now {counts:?}",
            received as f64 / accepted as f64
        );
        // Every call ends accepted or refused: calls = accepted + refused.
        assert_eq!(accepted + refused, 4000);
        assert!(received as f64 <= 2.0 * accepted as f64 + 1.0);
        assert!(received as f64 >= 1.9 * accepted as f64, "{received} / {accepted}");
        // The window: 2 m of calls at one per 50 ms, each 1 or 2 attempts.
        assert!(counts.requests as f64 <= 2.0 * counts.accepts as f64 + 1.0, "{counts:?}");
        assert!(refused <= 40, "few retries refused at a ratio of 2: {refused}");
    });
}

/// At a backend accepting one attempt in five, retries alone cannot bring
/// the ratio down to K (every first call goes through): K = 2 refuses most
/// retries, where the spec without throttling sends every one.
#[test]
fn at_a_backend_accepting_a_fifth_k_2_refuses_most_retries() {
    fastrand::seed(11);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let r = build(
            Registry::builder().spec::<Sre>().spec::<Plain>(),
            vec![
                ("throttle.sre", section(3, Some(sre(2.0)))),
                ("throttle.plain", section(3, None)),
            ],
        );
        let (plain_received, plain_accepted) = offered::<Plain>(&r, 5, 2000).await;
        let (received, accepted) = offered::<Sre>(&r, 5, 2000).await;
        let counts = r.sync_scope(Sre::get).unwrap().throttle_counts().unwrap();
        println!(
            "backend accepts 1/5, 2000 calls, attempts = 3: without throttle received {plain_received} accepted {plain_accepted} ({:.2} per accept); with K=2 received {received} accepted {accepted} ({:.2} per accept); window now {counts:?}",
            plain_received as f64 / plain_accepted as f64,
            received as f64 / accepted as f64
        );
        // Without throttling: 4 attempts per call but for the accepted.
        assert_eq!(plain_received, 2000 + 3 * (2000 - plain_accepted));
        // With it: at most 2000 first calls and what the refusals let by.
        let retries = received - 2000;
        let plain_retries = plain_received - 2000;
        assert!(
            retries * 3 < plain_retries,
            "{retries} retries against {plain_retries}"
        );
    });
}

// ------------------------------------------------------------ nothing failed

#[derive(RetrySpec)]
#[spec("throttle.healthy")]
struct Healthy;

#[tokio::test(start_paused = true)]
async fn nothing_failed_refuses_nothing_and_counts_every_attempt_accepted() {
    let r = registry::<Healthy>(section(2, Some(sre(2.0))));
    let (events, listener) = recorder();
    r.subscribe(listener);
    let backend = Backend::default();
    for _ in 0..1000 {
        let out = r
            .scope(async { Healthy::get()?.call(|| async { backend.serve(1) }).await })
            .await;
        assert!(out.is_ok());
    }
    let counts = r
        .sync_scope(Healthy::get)
        .unwrap()
        .throttle_counts()
        .unwrap();
    assert_eq!((backend.received(), backend.accepted()), (1000, 1000));
    assert_eq!((counts.requests, counts.accepts), (1000, 1000));
    assert_eq!(counts.refusal, 0.0);
    assert_eq!(gave_up(&events, StoppedBy::Throttled), 0);
    assert_eq!(scheduled(&events), 0);
}

// ------------------------------------------------------------ a refusal

#[derive(RetrySpec)]
#[spec("throttle.refused")]
struct Refused;

/// A refused retry ends the call with its last failure, unchanged (as an
/// empty retry budget does), counted as a failed call, as a give-up with
/// `reason = "throttled"`, and told as `RetryExhausted { reason:
/// Throttled }`.
#[test]
fn a_refused_retry_ends_with_the_last_failure_and_is_counted_as_throttled() {
    fastrand::seed(3);
    let meters = Meters::default();
    let r =
        metrics::with_local_recorder(&meters, || registry::<Refused>(section(1, Some(sre(2.0)))));
    let (events, listener) = recorder();
    r.subscribe(listener);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let backend = Backend::default();
    let mut unchanged = 0;
    metrics::with_local_recorder(&meters, || {
        rt.block_on(async {
            for _ in 0..200 {
                // Accepts nothing.
                let out = r
                    .scope(async {
                        Refused::get()?
                            .call(|| async { backend.serve(u64::MAX) })
                            .await
                    })
                    .await;
                if matches!(out, Err(TestError::Overloaded(_))) {
                    unchanged += 1;
                }
            }
        });
    });
    let refused = gave_up(&events, StoppedBy::Throttled) as u64;
    let retried = scheduled(&events) as u64;
    println!(
        "200 calls, backend accepts nothing, attempts = 1: received {}, retries {retried}, refused {refused}",
        backend.received()
    );
    // Each call: a first attempt, then its retry or its refusal.
    assert_eq!(refused + retried, 200);
    assert_eq!(backend.received(), 200 + retried);
    assert_eq!(
        unchanged, refused,
        "a refusal returns the last failure as it is"
    );
    // With nothing accepted the refusal is requests / (requests + 1):
    // ½ for the very first retry, then close to 1.
    assert!(refused >= 190, "{refused}");
    let labels = [("spec", "Refused"), ("path", "throttle.refused")];
    assert_eq!(
        meters.counter(
            "resilient_retry_exhausted_total",
            &[labels[0], labels[1], ("reason", "throttled")],
        ),
        Some(refused)
    );
    assert_eq!(
        meters.calls(("Refused", "throttle.refused", "retry"), "failure"),
        200
    );
}

// ------------------------------------------------------------ shared

#[derive(RetrySpec)]
#[spec("throttle.shared")]
struct Shared;

#[derive(RetrySpec)]
#[spec("throttle.other")]
struct Other;

static SHARED_BACKEND: Backend = Backend {
    received: AtomicU64::new(0),
    accepted: AtomicU64::new(0),
};
static OTHER_CALLS: AtomicU64 = AtomicU64::new(0);

#[retryable(Shared)]
async fn failing() -> Result<u64, TestError> {
    SHARED_BACKEND.serve(u64::MAX)
}

/// Fails its first attempt of each call, then succeeds.
#[retryable(Shared)]
async fn flaky_once(first: &AtomicU64) -> Result<u64, TestError> {
    match first.fetch_add(1, Ordering::Relaxed) {
        0 => Err(TestError::Overloaded(0)),
        n => Ok(n),
    }
}

#[retryable(Other)]
async fn flaky_once_elsewhere(first: &AtomicU64) -> Result<u64, TestError> {
    OTHER_CALLS.fetch_add(1, Ordering::Relaxed);
    match first.fetch_add(1, Ordering::Relaxed) {
        0 => Err(TestError::Overloaded(0)),
        n => Ok(n),
    }
}

/// One fn's failures fill the spec's window; another fn of the same spec
/// has its retry refused, a fn of another spec does not.
#[test]
fn every_fn_of_a_spec_shares_its_counts() {
    fastrand::seed(5);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let r = build(
            Registry::builder().spec::<Shared>().spec::<Other>(),
            vec![
                ("throttle.shared", section(1, Some(sre(2.0)))),
                ("throttle.other", section(1, Some(sre(2.0)))),
            ],
        );
        let (events, listener) = recorder();
        r.subscribe(listener);
        // 100 calls of `failing`: its first attempts and the retries let by.
        for _ in 0..100 {
            assert!(r.scope(failing()).await.is_err());
        }
        let before = r
            .sync_scope(Shared::get)
            .unwrap()
            .throttle_counts()
            .unwrap();
        assert_eq!(before.requests, SHARED_BACKEND.received());
        assert_eq!(before.accepts, 0);
        assert!(before.refusal > 0.99, "{before:?}");

        let refused = gave_up(&events, StoppedBy::Throttled);
        let first = AtomicU64::new(0);
        let out = r.scope(flaky_once(&first)).await;
        assert!(matches!(out, Err(TestError::Overloaded(0))), "{out:?}");
        assert_eq!(first.load(Ordering::Relaxed), 1, "its retry was refused");
        assert_eq!(gave_up(&events, StoppedBy::Throttled), refused + 1);
        let after = r
            .sync_scope(Shared::get)
            .unwrap()
            .throttle_counts()
            .unwrap();
        assert_eq!(after.requests, before.requests + 1);

        let first = AtomicU64::new(0);
        let out = r.scope(flaky_once_elsewhere(&first)).await;
        assert_eq!(out.ok(), Some(1), "another spec's window is its own");
        assert_eq!(OTHER_CALLS.load(Ordering::Relaxed), 2);
        let other = r.sync_scope(Other::get).unwrap().throttle_counts().unwrap();
        assert_eq!((other.requests, other.accepts), (2, 1));
    });
}

// ------------------------------------------------------------ threads

#[derive(RetrySpec)]
#[spec("throttle.threads")]
struct Threads;

/// Many tasks on two workers count into one window at once: not one count
/// is lost (each bucket is one word, changed by compare-and-swap).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_from_two_workers_lose_nothing() {
    // An hour: the test ends well within the window.
    let r = registry::<Threads>(with(
        table([("delay", s("0ms")), ("attempts", int(1))]),
        "throttle",
        table([("k", float(2.0)), ("window", s("1h"))]),
    ));
    let backend = Arc::new(Backend::default());
    const TASKS: u64 = 4000;
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| {
            let (r, backend) = (r.clone(), Arc::clone(&backend));
            tokio::spawn(async move {
                let first = AtomicU64::new(0);
                r.scope(async {
                    Threads::get()?
                        .call(|| async {
                            backend.received.fetch_add(1, Ordering::Relaxed);
                            // Every other call fails its first attempt.
                            if i % 2 == 0 && first.fetch_add(1, Ordering::Relaxed) == 0 {
                                Err(TestError::Overloaded(i))
                            } else {
                                backend.accepted.fetch_add(1, Ordering::Relaxed);
                                Ok(i)
                            }
                        })
                        .await
                })
                .await
            })
        })
        .collect();
    let mut ok = 0;
    for t in tasks {
        if t.await.unwrap().is_ok() {
            ok += 1;
        }
    }
    let counts = r
        .sync_scope(Threads::get)
        .unwrap()
        .throttle_counts()
        .unwrap();
    println!(
        "{TASKS} tasks on 2 workers: received {}, accepted {}, window {counts:?}",
        backend.received(),
        backend.accepted()
    );
    assert_eq!(counts.requests, backend.received());
    assert_eq!(counts.accepts, backend.accepted());
    assert_eq!(ok, backend.accepted());
}

// ------------------------------------------------------------ reload

#[derive(RetrySpec)]
#[spec("throttle.reload")]
struct Reloading;

/// Reloads the spec's section: the notes of its change.
fn reload(r: &Registry, section: Value) -> Vec<String> {
    match r.reload(&root(vec![("throttle.reload", section)])) {
        Ok(done) => done.specs.into_iter().flat_map(|c| c.notes).collect(),
        Err(problems) => panic!("reload refused: {problems:#?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_reload_keeps_the_counts_unless_the_window_changes() {
    let r = registry::<Reloading>(section(1, Some(sre(2.0))));
    let backend = Backend::default();
    for _ in 0..10 {
        let _ = r
            .scope(async { Reloading::get()?.call(|| async { backend.serve(2) }).await })
            .await;
    }
    let counts = || r.sync_scope(Reloading::get).unwrap().throttle_counts();
    let before = counts().unwrap();
    assert_eq!(before.requests, backend.received());

    // Another `k` and `attempts`, the same window: the counts stay.
    let notes = reload(&r, section(2, Some(sre(3.0))));
    assert!(notes.is_empty(), "{notes:?}");
    let kept = counts().unwrap();
    assert_eq!(
        (kept.requests, kept.accepts),
        (before.requests, before.accepts)
    );

    // Another window: counted afresh, and the reload says so.
    let notes = reload(
        &r,
        section(2, Some(table([("k", float(3.0)), ("window", s("1m"))]))),
    );
    assert!(notes.iter().any(|n| n.contains("afresh")), "{notes:?}");
    let fresh = counts().unwrap();
    assert_eq!((fresh.requests, fresh.accepts), (0, 0));

    // Gone: no counts.
    let notes = reload(&r, section(2, None));
    assert!(notes.iter().any(|n| n.contains("gone")), "{notes:?}");
    assert_eq!(counts(), None);
}

// ------------------------------------------------------------ no effect

#[derive(RetrySpec)]
#[spec("throttle.no_retry")]
struct NoRetry;

/// The WARN lines of building a registry of spec `S` alone from `section`.
fn warnings<S: Spec>(section: Value) -> Vec<String> {
    let capture = Capture::default();
    let _subscriber = tracing::subscriber::set_default(capture.clone());
    drop(registry::<S>(section));
    capture
        .at("resilient::registry", Level::WARN)
        .into_iter()
        .map(|l| l.message)
        .collect()
}

/// `throttle` refuses retries only unless `first_calls = true`: on a spec
/// with `attempts = 0` and without `first_calls` it does nothing, which a
/// WARN says (valid, so no problem); with retries, with `first_calls =
/// true`, or without the table, nothing is said.
#[test]
fn throttle_without_retries_is_warned_about() {
    let warned = warnings::<NoRetry>(section(0, Some(sre(2.0))));
    assert_eq!(
        warned,
        vec!["`throttle.no_retry.throttle` has no effect: adaptive throttling refuses retries only unless `first_calls = true`, and `attempts = 0` makes no retry: remove `throttle`, allow retries with `attempts`, or set `throttle.first_calls = true` to refuse first calls".to_owned()],
    );
    assert_eq!(
        warnings::<NoRetry>(section(
            0,
            Some(with(sre(2.0), "first_calls", boolean(true)))
        )),
        Vec::<String>::new()
    );
    assert_eq!(
        warnings::<NoRetry>(section(1, Some(sre(2.0)))),
        Vec::<String>::new()
    );
    assert_eq!(warnings::<NoRetry>(section(0, None)), Vec::<String>::new());
}
