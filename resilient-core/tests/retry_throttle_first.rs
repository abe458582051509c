//! Adaptive throttling of first calls (`throttle.first_calls = true`, the
//! Google SRE book's client-side throttling of requests): every test
//! counts the calls that reached the body, those it accepted, the calls
//! refused before their first attempt, and the events and metrics that
//! said so. Randomness is the thread's `fastrand` generator, seeded, on a
//! current-thread runtime with tokio's paused clock: each run draws the
//! same numbers and reads the same times.

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
use resilient_core::{fallback, retryable, Classify, Error, Registry, RetrySpec};
use tokio::time::Instant;
use tracing::Level;

#[derive(Debug, thiserror::Error)]
enum TestError {
    #[error("overloaded {0}")]
    Overloaded(u64),
    #[error(transparent)]
    Resilience(#[from] Error),
}

/// A retry spec's section: `attempts` retries, a `throttle` table with
/// `k`, `window` and `first_calls`, metrics on.
fn section(attempts: i128, k: f64, window: &str, first_calls: Option<Value>) -> Value {
    let throttle = table([("k", float(k)), ("window", s(window))]);
    let throttle = match first_calls {
        Some(v) => with(throttle, "first_calls", v),
        None => throttle,
    };
    with(
        table([
            ("delay", s("1ms")),
            ("attempts", int(attempts)),
            (
                "telemetry",
                table([("metrics", table([("enabled", boolean(true))]))]),
            ),
        ]),
        "throttle",
        throttle,
    )
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

/// The `RetryExhausted` events of refused first calls.
fn refused_events(events: &Mutex<Vec<Event>>) -> u64 {
    events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| {
            matches!(
                e,
                Event::RetryExhausted {
                    reason: StoppedBy::ThrottledFirstCall,
                    calls: 0,
                    ..
                }
            )
        })
        .count() as u64
}

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap()
}

/// What a workload saw: requests made, calls that reached the backend,
/// those it accepted, and calls refused with `Error::Throttled`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Seen {
    requests: u64,
    received: u64,
    accepted: u64,
    refused: u64,
}

impl Seen {
    fn since(self, before: Seen) -> Seen {
        Seen {
            requests: self.requests - before.requests,
            received: self.received - before.received,
            accepted: self.accepted - before.accepted,
            refused: self.refused - before.refused,
        }
    }
}

/// What a [`Backend`] accepts.
#[derive(Debug, Clone, Copy)]
enum Accepts {
    /// At most this many calls per second, rejecting the rest: an
    /// overloaded server.
    PerSecond(u64),
    /// Every other call it receives, the first one if `first`.
    EveryOther { first: bool },
}

/// A dependency: counts the calls it receives and those it accepts.
struct Backend {
    accepts: Accepts,
    origin: Instant,
    second: AtomicU64,
    in_second: AtomicU64,
    received: AtomicU64,
    accepted: AtomicU64,
}

impl Backend {
    fn new(accepts: Accepts) -> Self {
        Self {
            accepts,
            origin: Instant::now(),
            second: AtomicU64::new(0),
            in_second: AtomicU64::new(0),
            received: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
        }
    }

    fn serve(&self) -> Result<u64, TestError> {
        let n = self.received.fetch_add(1, Ordering::Relaxed) + 1;
        let accept = match self.accepts {
            Accepts::EveryOther { first } => n.is_multiple_of(2) != first,
            Accepts::PerSecond(capacity) => {
                let second = self.origin.elapsed().as_secs();
                if self.second.swap(second, Ordering::Relaxed) != second {
                    self.in_second.store(0, Ordering::Relaxed);
                }
                self.in_second.fetch_add(1, Ordering::Relaxed) < capacity
            }
        };
        if accept {
            self.accepted.fetch_add(1, Ordering::Relaxed);
            Ok(n)
        } else {
            Err(TestError::Overloaded(n))
        }
    }
}

/// `calls` calls of spec `S`, one every 50 ms, at `backend`; `seen` adds
/// up what happened.
async fn offer<S>(r: &Registry, backend: &Backend, calls: u64, seen: &mut Seen)
where
    S: RetrySpec,
    S::Classifier: Classify<u64, TestError>,
    TestError: Exhaustion<S::Exhausted>,
{
    for _ in 0..calls {
        let before = backend.received.load(Ordering::Relaxed);
        let out = r
            .scope(async { S::get()?.call(|| async { backend.serve() }).await })
            .await;
        seen.requests += 1;
        if let Err(TestError::Resilience(Error::Throttled { .. })) = out {
            assert_eq!(
                backend.received.load(Ordering::Relaxed),
                before,
                "a refused first call never reaches the body"
            );
            seen.refused += 1;
        }
        seen.received = backend.received.load(Ordering::Relaxed);
        seen.accepted = backend.accepted.load(Ordering::Relaxed);
        tokio::time::advance(Duration::from_millis(50)).await;
    }
}

// ------------------------------------------------------------ the SRE book

#[derive(RetrySpec)]
#[spec("first.half")]
struct Half;

#[derive(RetrySpec)]
#[spec("first.half_late")]
struct HalfLate;

/// `calls` calls of `S` after one window of warm-up: what they saw, and
/// what they saw after the warm-up.
async fn warmed<S>(r: &Registry, backend: &Backend, calls: u64) -> (Seen, Seen)
where
    S: RetrySpec,
    S::Classifier: Classify<u64, TestError>,
    TestError: Exhaustion<S::Exhausted>,
{
    let mut seen = Seen::default();
    // 2 m of warm-up (one window at a call per 50 ms).
    offer::<S>(r, backend, 2400, &mut seen).await;
    let warm = seen;
    offer::<S>(r, backend, calls, &mut seen).await;
    (seen, seen.since(warm))
}

/// A backend accepting every other call it receives, `k = 2`, no retries:
/// the calls reaching it are twice its accepts by construction, the SRE
/// formula's break-even point, where a refusal needs more than `k`
/// requests per accept in the window. Tested: after a window of warm-up,
/// the calls that reach the backend stay within 5 % of 2 per accept, and
/// every request is received or refused (counted once, as an event).
///
/// At break-even the formula neither grows nor shrinks the share it
/// refuses, since a refused call counts as a request: a backend whose
/// first call succeeds is never refused a call (the window never holds
/// more than 2 requests per accept), while one whose first call fails
/// refuses ½ of the next at once, and keeps refusing about the share it
/// reached in its first moments.
#[test]
fn at_a_backend_accepting_half_k_2_sends_twice_the_accepted() {
    support::capture::no_silent_callsites();
    fastrand::seed(7);
    paused_runtime().block_on(async {
        let r = build(
            Registry::builder().spec::<Half>().spec::<HalfLate>(),
            vec![
                ("first.half", section(0, 2.0, "2m", Some(boolean(true)))),
                (
                    "first.half_late",
                    section(0, 2.0, "2m", Some(boolean(true))),
                ),
            ],
        );
        let (events, listener) = recorder();
        r.subscribe(listener);

        let backend = Backend::new(Accepts::EveryOther { first: true });
        let (seen, measured) = warmed::<Half>(&r, &backend, 9600).await;
        let ratio = measured.received as f64 / measured.accepted as f64;
        println!("k = 2, backend accepts every other call from its first, no retries: {seen:?}; after the warm-up {measured:?}, {ratio:.4} received per accept");
        assert_eq!(seen.received + seen.refused, seen.requests);
        assert!((ratio - 2.0).abs() <= 0.1, "{ratio}");
        assert_eq!(seen.refused, 0);
        assert_eq!(refused_events(&events), 0);

        let late = Backend::new(Accepts::EveryOther { first: false });
        let (seen, measured) = warmed::<HalfLate>(&r, &late, 9600).await;
        let ratio = measured.received as f64 / measured.accepted as f64;
        let (warm_share, measured_share) = (
            (seen.refused - measured.refused) as f64 / 2400.0,
            measured.refused as f64 / measured.requests as f64,
        );
        println!("k = 2, backend accepts every other call from its second, no retries: {seen:?}; after the warm-up {measured:?}, {ratio:.4} received per accept; refused {warm_share:.3} of the warm-up's requests, {measured_share:.3} after it");
        assert_eq!(seen.received + seen.refused, seen.requests);
        assert_eq!(refused_events(&events), seen.refused);
        assert!((ratio - 2.0).abs() <= 0.1, "{ratio}");
        assert!(measured_share < 0.5, "{measured_share}");
    });
}

#[derive(RetrySpec)]
#[spec("first.overloaded")]
struct Overloaded;

#[derive(RetrySpec)]
#[spec("first.off")]
struct Off;

/// A backend that can accept 5 calls a second, offered 20 a second, with
/// `k = 2` and no retries: with `first_calls = true` the calls that reach
/// it settle at `k` times its accepts (10 a second, within 5 % after the
/// first window), half of the requests refused at the client; with
/// `first_calls = false`, the same workload sends every call (4 per
/// accept). Counting a refused call in the window as a request is what
/// makes the ratio `k`: counted only when sent, the ratio would settle at
/// `k·√2` (2.83 here: sent² = requests²/2 at the fixed point).
#[test]
fn at_an_overloaded_backend_first_calls_settle_at_k_times_the_accepted() {
    support::capture::no_silent_callsites();
    fastrand::seed(11);
    paused_runtime().block_on(async {
        let r = build(
            Registry::builder().spec::<Overloaded>().spec::<Off>(),
            vec![
                (
                    "first.overloaded",
                    section(0, 2.0, "2m", Some(boolean(true))),
                ),
                ("first.off", section(0, 2.0, "2m", None)),
            ],
        );
        let (events, listener) = recorder();
        r.subscribe(listener);

        let backend = Backend::new(Accepts::PerSecond(5));
        let mut seen = Seen::default();
        offer::<Overloaded>(&r, &backend, 2400, &mut seen).await;
        let warm = seen;
        offer::<Overloaded>(&r, &backend, 9600, &mut seen).await;
        let measured = seen.since(warm);
        let ratio = measured.received as f64 / measured.accepted as f64;
        let counts = r
            .sync_scope(Overloaded::get)
            .unwrap()
            .throttle_counts()
            .unwrap();

        let off_backend = Backend::new(Accepts::PerSecond(5));
        let mut off = Seen::default();
        offer::<Off>(&r, &off_backend, 12000, &mut off).await;
        println!(
            "k = 2, backend takes 5/s of 20/s offered, no retries: first_calls = true {seen:?}, after the warm-up {measured:?}, {ratio:.4} received per accept, window now {counts:?}; first_calls = false {off:?}, {:.4} received per accept",
            off.received as f64 / off.accepted as f64
        );
        assert_eq!(seen.received + seen.refused, seen.requests);
        assert_eq!(refused_events(&events), seen.refused);
        assert!((ratio - 2.0).abs() <= 0.1, "{ratio}");
        // About half the requests refused at the client.
        let share = measured.refused as f64 / measured.requests as f64;
        assert!((0.45..=0.55).contains(&share), "{share}");
        // The window (15/16 to 16/16 of 2 m: 2250 to 2400 calls) counts
        // every request, the refused ones included.
        assert!((2250..=2400).contains(&counts.requests), "{counts:?}");
        // `first_calls = false`: every first call is sent.
        assert_eq!(off.received, off.requests);
        assert_eq!(off.refused, 0);
    });
}

// ------------------------------------------------------------ nothing failed

#[derive(RetrySpec)]
#[spec("first.healthy")]
struct Healthy;

/// Nothing failed in the window: not one refusal in 10000 calls, and no
/// draw (the probability is 0).
#[test]
fn nothing_failed_refuses_no_first_call() {
    support::capture::no_silent_callsites();
    fastrand::seed(1);
    paused_runtime().block_on(async {
        let r = registry::<Healthy>(section(2, 2.0, "2m", Some(boolean(true))));
        let (events, listener) = recorder();
        r.subscribe(listener);
        let received = AtomicU64::new(0);
        let before = fastrand::u64(..);
        fastrand::seed(1);
        for i in 0..10_000u64 {
            let out: Result<u64, TestError> = r
                .scope(async {
                    Healthy::get()?
                        .call(|| async {
                            received.fetch_add(1, Ordering::Relaxed);
                            Ok(i)
                        })
                        .await
                })
                .await;
            assert!(out.is_ok(), "{out:?}");
            tokio::time::advance(Duration::from_millis(10)).await;
        }
        assert_eq!(received.load(Ordering::Relaxed), 10_000);
        assert_eq!(refused_events(&events), 0);
        assert_eq!(fastrand::u64(..), before, "no number was drawn");
    });
}

// ------------------------------------------------------------ a refusal

#[derive(RetrySpec)]
#[spec("first.refused")]
struct Refused;

/// A refused first call ends with `Error::Throttled` (spec, path, the
/// window's counts), the body not run; it is counted as a rejected call,
/// as a give-up with `reason = "throttled_first_call"`, told as
/// `RetryExhausted { calls: 0, reason: ThrottledFirstCall }`, logged at
/// WARN with the error's text, and counted in the window as a request.
#[test]
fn a_refused_first_call_is_an_error_that_says_so_counted_once() {
    support::capture::no_silent_callsites();
    fastrand::seed(3);
    let meters = Meters::default();
    let capture = Capture::default();
    let _subscriber = tracing::subscriber::set_default(capture.clone());
    let r = metrics::with_local_recorder(&meters, || {
        registry::<Refused>(section(0, 2.0, "2m", Some(boolean(true))))
    });
    let (events, listener) = recorder();
    r.subscribe(listener);
    let backend = Backend::new(Accepts::PerSecond(0));
    let mut seen = Seen::default();
    let mut first: Option<Error> = None;
    let rt = paused_runtime();
    metrics::with_local_recorder(&meters, || {
        rt.block_on(async {
            for _ in 0..200 {
                let before = backend.received.load(Ordering::Relaxed);
                let out = r
                    .scope(async { Refused::get()?.call(|| async { backend.serve() }).await })
                    .await;
                seen.requests += 1;
                if let Err(TestError::Resilience(e @ Error::Throttled { .. })) = out {
                    assert_eq!(backend.received.load(Ordering::Relaxed), before);
                    seen.refused += 1;
                    first.get_or_insert(e);
                }
                tokio::time::advance(Duration::from_millis(50)).await;
            }
        });
    });
    seen.received = backend.received.load(Ordering::Relaxed);
    // Read on the runtime's paused clock, which the counts are dated by.
    let counts = rt.block_on(async {
        r.sync_scope(Refused::get)
            .unwrap()
            .throttle_counts()
            .unwrap()
    });
    println!("200 calls, backend accepts nothing, no retries: {seen:?}; window {counts:?}");
    let first = first.expect("a refusal");
    println!("the first refusal: {first}");
    let Error::Throttled {
        spec,
        requests,
        accepts,
        ..
    } = first
    else {
        unreachable!()
    };
    assert_eq!((spec, accepts), ("Refused", 0));
    assert!(requests >= 1);
    let text = first.to_string();
    assert!(
        text.contains(&format!(
            "accepted 0 of the {requests} requests in adaptive throttling's window"
        )) && text.contains("raise `throttle.k`"),
        "{text}"
    );
    // With nothing accepted the refusal is requests / (requests + 1): ½
    // after the first failure, then close to 1.
    assert!(seen.refused >= 190, "{seen:?}");
    assert_eq!(seen.received + seen.refused, 200);
    // The window: every request, refused or sent, and no accept.
    assert_eq!((counts.requests, counts.accepts), (200, 0));
    assert_eq!(refused_events(&events), seen.refused);
    let labels = [("spec", "Refused"), ("path", "first.refused")];
    assert_eq!(
        meters.counter(
            "resilient_retry_exhausted_total",
            &[labels[0], labels[1], ("reason", "throttled_first_call")],
        ),
        Some(seen.refused)
    );
    assert_eq!(
        meters.calls(("Refused", "first.refused", "retry"), "rejected"),
        seen.refused
    );
    assert_eq!(
        meters.calls(("Refused", "first.refused", "retry"), "failure"),
        seen.received
    );
    let warned = capture.at("resilient::retry", Level::WARN);
    assert_eq!(warned.len() as u64, seen.refused);
    assert!(
        warned[0]
            .message
            .contains("refused the call before its first attempt"),
        "{:?}",
        warned[0]
    );
}

// ------------------------------------------------------------ one window per spec

#[derive(RetrySpec)]
#[spec("first.a")]
struct DependencyA;

#[derive(RetrySpec)]
#[spec("first.b")]
struct DependencyB;

static B_CALLS: AtomicU64 = AtomicU64::new(0);

#[retryable(DependencyA)]
async fn call_a(backend: &Backend) -> Result<u64, TestError> {
    backend.serve()
}

#[retryable(DependencyB)]
async fn call_b(i: u64) -> Result<u64, TestError> {
    B_CALLS.fetch_add(1, Ordering::Relaxed);
    Ok(i)
}

/// Retry specs take no key: a dependency per spec. The failures of A's
/// dependency fill A's window and refuse A's first calls; B's calls, made
/// in between, are never refused.
#[test]
fn failures_of_one_spec_never_throttle_another() {
    support::capture::no_silent_callsites();
    fastrand::seed(5);
    paused_runtime().block_on(async {
        let r = build(
            Registry::builder()
                .spec::<DependencyA>()
                .spec::<DependencyB>(),
            vec![
                ("first.a", section(0, 2.0, "2m", Some(boolean(true)))),
                ("first.b", section(0, 2.0, "2m", Some(boolean(true)))),
            ],
        );
        let backend = Backend::new(Accepts::PerSecond(0));
        let (mut refused_a, mut refused_b) = (0, 0);
        for i in 0..500 {
            if let Err(TestError::Resilience(Error::Throttled { .. })) =
                r.scope(call_a(&backend)).await
            {
                refused_a += 1;
            }
            if let Err(TestError::Resilience(Error::Throttled { .. })) = r.scope(call_b(i)).await {
                refused_b += 1;
            }
            tokio::time::advance(Duration::from_millis(50)).await;
        }
        let b = r
            .sync_scope(DependencyB::get)
            .unwrap()
            .throttle_counts()
            .unwrap();
        println!("500 calls each: A refused {refused_a}, B refused {refused_b}, B's window {b:?}");
        assert!(refused_a >= 490, "{refused_a}");
        assert_eq!(refused_b, 0);
        assert_eq!(B_CALLS.load(Ordering::Relaxed), 500);
        assert_eq!((b.requests, b.accepts), (500, 500));
    });
}

// ------------------------------------------------------------ threads

#[derive(RetrySpec)]
#[spec("first.threads")]
struct Threads;

/// Many tasks on two workers, each call its own task, at a backend that
/// accepts one call in four: every request is either received or refused,
/// and the window counts every one of them (an hour long: the test ends
/// well within it).
#[test]
fn on_two_workers_received_and_refused_add_up_to_the_requests() {
    support::capture::no_silent_callsites();
    let r = registry::<Threads>(section(0, 2.0, "1h", Some(boolean(true))));
    let (events, listener) = recorder();
    r.subscribe(listener);
    let rt = two_workers();
    let received = Arc::new(AtomicU64::new(0));
    let accepted = Arc::new(AtomicU64::new(0));
    const TASKS: u64 = 4000;
    let refused = rt.block_on(async {
        let tasks: Vec<_> = (0..TASKS)
            .map(|i| {
                let (r, received, accepted) =
                    (r.clone(), Arc::clone(&received), Arc::clone(&accepted));
                tokio::spawn(async move {
                    r.scope(async {
                        Threads::get()?
                            .call(|| async {
                                received.fetch_add(1, Ordering::Relaxed);
                                if i % 4 == 0 {
                                    accepted.fetch_add(1, Ordering::Relaxed);
                                    Ok(i)
                                } else {
                                    Err(TestError::Overloaded(i))
                                }
                            })
                            .await
                    })
                    .await
                })
            })
            .collect();
        let mut refused = 0;
        for t in tasks {
            if let Err(TestError::Resilience(Error::Throttled { .. })) = t.await.unwrap() {
                refused += 1;
            }
        }
        refused
    });
    let counts = r
        .sync_scope(Threads::get)
        .unwrap()
        .throttle_counts()
        .unwrap();
    let (received, accepted) = (
        received.load(Ordering::Relaxed),
        accepted.load(Ordering::Relaxed),
    );
    println!(
        "{TASKS} tasks on 2 workers, backend accepts 1 in 4: received {received}, accepted {accepted}, refused {refused}; window {counts:?}"
    );
    assert_eq!(received + refused, TASKS);
    assert_eq!(refused_events(&events), refused);
    assert_eq!(counts.requests, TASKS);
    assert_eq!(counts.accepts, accepted);
    assert!(refused > 0, "an overloaded backend gets some calls refused");
}

// ------------------------------------------------------------ reload, explain

#[derive(RetrySpec)]
#[spec("first.reload")]
struct Reloading;

#[retryable(Reloading)]
async fn reloading() -> Result<u64, TestError> {
    Ok(1)
}

/// Reloads the spec's section: the notes of its change.
fn reload(r: &Registry, section: Value) -> Vec<String> {
    match r.reload(&root(vec![("first.reload", section)])) {
        Ok(done) => done.specs.into_iter().flat_map(|c| c.notes).collect(),
        Err(problems) => panic!("reload refused: {problems:#?}"),
    }
}

/// `first_calls` switched by a reload with the same window: the counts
/// stay, and the reload's notes say what is refused now. `explain` names
/// `Error::Throttled` among what a caller may get, only with it.
#[test]
fn a_reload_switches_first_calls_on_the_kept_counts_and_explain_names_the_error() {
    support::capture::no_silent_callsites();
    fastrand::seed(13);
    paused_runtime().block_on(async {
        let r = registry::<Reloading>(section(0, 2.0, "2m", None));
        let says = |r: &Registry| r.explain().function("reloading").unwrap().outcomes.clone();
        assert!(!says(&r).iter().any(|o| o.contains("Error::Throttled")), "{:?}", says(&r));
        let backend = Backend::new(Accepts::PerSecond(0));
        for _ in 0..50 {
            let out = r
                .scope(async { Reloading::get()?.call(|| async { backend.serve() }).await })
                .await;
            assert!(matches!(out, Err(TestError::Overloaded(_))), "{out:?}");
        }
        let notes = reload(&r, section(0, 2.0, "2m", Some(boolean(true))));
        assert_eq!(
            notes,
            ["adaptive throttling now refuses first calls too (`first_calls = true`), on the counts it kept"]
        );
        let outcomes = says(&r);
        println!("explain, first_calls = true: {outcomes:?}");
        assert!(
            outcomes.iter().any(|o| o.starts_with("`Error::Throttled` at once from `Reloading`")),
            "{outcomes:?}"
        );
        // The 50 failures kept: the next calls are refused at once.
        let mut refused = 0;
        for _ in 0..10 {
            let out = r
                .scope(async { Reloading::get()?.call(|| async { backend.serve() }).await })
                .await;
            if let Err(TestError::Resilience(Error::Throttled { .. })) = out {
                refused += 1;
            }
        }
        assert!(refused >= 9, "{refused}");
        let notes = reload(&r, section(0, 2.0, "2m", Some(boolean(false))));
        assert_eq!(
            notes,
            ["adaptive throttling now refuses retries only (`first_calls = false`)"]
        );
        let out = r.scope(reloading()).await;
        assert_eq!(out.ok(), Some(1), "no first call refused any more");
    });
}

#[derive(RetrySpec)]
#[spec("first.guarded")]
struct Guarded;

/// The fallback's answers.
static STALE: AtomicU64 = AtomicU64::new(0);

#[fallback(method = "stale()", on = rejection)]
#[retryable(Guarded)]
async fn guarded(backend: &Backend) -> Result<u64, TestError> {
    backend.serve()
}

async fn stale() -> Result<u64, TestError> {
    STALE.fetch_add(1, Ordering::Relaxed);
    Ok(0)
}

/// `#[fallback(on = rejection)]` above a retry alone answers each first
/// call that adaptive throttling refuses, and nothing else: a call that
/// reached the backend and failed passes through as the body's error.
#[test]
fn a_fallback_on_rejection_answers_each_refused_first_call_and_nothing_else() {
    support::capture::no_silent_callsites();
    fastrand::seed(17);
    let capture = Capture::default();
    let _subscriber = tracing::subscriber::set_default(capture.clone());
    let r = registry::<Guarded>(section(0, 2.0, "2m", Some(boolean(true))));
    let backend = Backend::new(Accepts::PerSecond(0));
    let (mut answered, mut failed) = (0u64, 0u64);
    paused_runtime().block_on(async {
        for _ in 0..200 {
            match r.scope(guarded(&backend)).await {
                Ok(0) => answered += 1,
                Err(TestError::Overloaded(_)) => failed += 1,
                other => panic!("{other:?}"),
            }
            tokio::time::advance(Duration::from_millis(50)).await;
        }
    });
    let received = backend.received.load(Ordering::Relaxed);
    println!("200 calls, backend accepts nothing: {received} reached it, {answered} answered by the fallback");
    assert_eq!(
        STALE.load(Ordering::Relaxed),
        answered,
        "one fallback call per answer"
    );
    assert_eq!(
        received, failed,
        "each call that reached the backend failed, and passed through"
    );
    assert_eq!(answered + failed, 200);
    assert!(answered >= 190, "{answered}");
    // Each refusal logged once, as without the fallback.
    let warned = capture.at("resilient::retry", Level::WARN);
    assert_eq!(warned.len() as u64, answered, "{warned:#?}");
}
