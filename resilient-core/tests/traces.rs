//! Traces: each retry, hedge and fallback is visible in the caller's span,
//! as an event inside it (the log line, with its fields) and as a field of
//! the span when the span declares it (`http.request.resend_count`,
//! `resilience.retries`, `resilience.hedges`, `resilience.fallback`), which
//! a trace exporter shows as an attribute of the caller's span.

#![allow(clippy::expect_used, clippy::unwrap_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::*;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use resilient_core::{fallback, hedged, retryable, Error, HedgingSpec, Registry, RetrySpec, Spec};
use tracing::field::{Empty, Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};
use tracing_core::span::Current;

#[derive(Debug, thiserror::Error)]
enum StoreError {
    #[error("store unavailable")]
    Unavailable,
    #[error(transparent)]
    Resilience(#[from] Error),
}

#[derive(RetrySpec)]
#[spec("traces.retry")]
struct Retry;

#[derive(HedgingSpec)]
#[spec("traces.hedging")]
struct Hedging;

/// Each span's name and the values recorded into its fields, and each
/// event with the names of the spans it was inside.
#[derive(Clone, Default)]
struct Spans {
    state: Arc<Mutex<State>>,
    next: Arc<AtomicU64>,
}

#[derive(Default)]
struct State {
    spans: BTreeMap<u64, (String, BTreeMap<String, String>)>,
    metadata: BTreeMap<u64, &'static Metadata<'static>>,
    stack: Vec<u64>,
    /// (target, message, the spans it was in).
    events: Vec<(String, String, Vec<String>)>,
}

struct Values<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Values<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl Spans {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The fields recorded into the span named `name`.
    fn fields(&self, name: &str) -> BTreeMap<String, String> {
        self.lock()
            .spans
            .values()
            .find(|(n, _)| n == name)
            .map(|(_, f)| f.clone())
            .unwrap_or_default()
    }

    /// The events of `target`, each with the spans it was in.
    fn events(&self, target: &str) -> Vec<(String, Vec<String>)> {
        self.lock()
            .events
            .iter()
            .filter(|(t, _, _)| t == target)
            .map(|(_, m, s)| (m.clone(), s.clone()))
            .collect()
    }
}

impl Subscriber for Spans {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let mut fields = BTreeMap::new();
        span.record(&mut Values(&mut fields));
        let mut state = self.lock();
        state
            .spans
            .insert(id, (span.metadata().name().to_owned(), fields));
        state.metadata.insert(id, span.metadata());
        Id::from_u64(id)
    }
    fn record(&self, span: &Id, values: &Record<'_>) {
        if let Some((_, fields)) = self.lock().spans.get_mut(&span.into_u64()) {
            values.record(&mut Values(fields));
        }
    }
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Values(&mut fields));
        let mut state = self.lock();
        let spans = state
            .stack
            .iter()
            .filter_map(|id| state.spans.get(id).map(|(n, _)| n.clone()))
            .collect();
        let message = fields.remove("message").unwrap_or_default();
        state
            .events
            .push((event.metadata().target().to_owned(), message, spans));
    }
    fn enter(&self, span: &Id) {
        self.lock().stack.push(span.into_u64());
    }
    fn exit(&self, span: &Id) {
        let mut state = self.lock();
        if let Some(at) = state.stack.iter().rposition(|s| *s == span.into_u64()) {
            state.stack.remove(at);
        }
    }
    /// The span entered last: what `Span::current()` finds, and the
    /// chain records its fields into.
    fn current_span(&self) -> Current {
        let state = self.lock();
        state
            .stack
            .last()
            .and_then(|id| Some(Current::new(Id::from_u64(*id), state.metadata.get(id)?)))
            .unwrap_or_else(Current::none)
    }
}

static RETRIED: AtomicU32 = AtomicU32::new(0);

/// Fails twice, then answers.
#[retryable(Retry)]
async fn flaky() -> Result<u32, StoreError> {
    if RETRIED.fetch_add(1, Ordering::SeqCst) < 2 {
        Err(StoreError::Unavailable)
    } else {
        Ok(7)
    }
}

#[tracing::instrument(fields(http.request.resend_count = Empty, resilience.retries = Empty))]
async fn get_pet() -> Result<u32, StoreError> {
    flaky().await
}

static HEDGED: AtomicU32 = AtomicU32::new(0);

/// The first attempt is slow: a hedge starts after the delay and wins.
#[hedged(Hedging)]
async fn slow_first() -> Result<u32, StoreError> {
    if HEDGED.fetch_add(1, Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(8)
}

#[tracing::instrument(fields(resilience.hedges = Empty))]
async fn get_hedged() -> Result<u32, StoreError> {
    slow_first().await
}

#[fallback(method = "cached()")]
#[retryable(Retry)]
async fn down() -> Result<u32, StoreError> {
    Err(StoreError::Unavailable)
}

async fn cached() -> Result<u32, StoreError> {
    Ok(9)
}

#[tracing::instrument(fields(resilience.fallback = Empty))]
async fn get_cached() -> Result<u32, StoreError> {
    down().await
}

/// A span that declares none of the fields.
#[tracing::instrument]
async fn plain() -> Result<u32, StoreError> {
    down().await
}

fn registry() -> Registry {
    build(
        Registry::builder().spec::<Retry>().spec::<Hedging>(),
        vec![
            (
                Retry::PATH,
                table([("delay", s("10ms")), ("attempts", int(3))]),
            ),
            (
                Hedging::PATH,
                table([("delay", s("100ms")), ("max_hedged_attempts", int(1))]),
            ),
        ],
    )
}

#[tokio::test(start_paused = true)]
async fn retries_hedges_and_fallbacks_show_in_the_callers_span() {
    let spans = Spans::default();
    let _subscriber = tracing::subscriber::set_default(spans.clone());
    let r = registry();

    assert_eq!(r.scope(get_pet()).await.unwrap(), 7);
    let fields = spans.fields("get_pet");
    assert_eq!(
        fields.get("http.request.resend_count").map(String::as_str),
        Some("2")
    );
    assert_eq!(
        fields.get("resilience.retries").map(String::as_str),
        Some("2")
    );
    let retries = spans.events("resilient::retry");
    assert_eq!(retries.len(), 2, "{retries:?}");
    assert!(
        retries.iter().all(|(_, within)| within == &["get_pet"]),
        "each retry is an event of the caller's span: {retries:?}"
    );

    assert_eq!(r.scope(get_hedged()).await.unwrap(), 8);
    assert_eq!(
        spans
            .fields("get_hedged")
            .get("resilience.hedges")
            .map(String::as_str),
        Some("1")
    );
    let hedges = spans.events("resilient::hedging");
    assert_eq!(hedges.len(), 1, "{hedges:?}");
    assert_eq!(hedges[0].1, ["get_hedged"]);

    assert_eq!(r.scope(get_cached()).await.unwrap(), 9);
    assert_eq!(
        spans
            .fields("get_cached")
            .get("resilience.fallback")
            .map(String::as_str),
        Some("down")
    );
    let fallbacks = spans.events("resilient::fallback");
    assert_eq!(fallbacks.len(), 1, "{fallbacks:?}");
    assert_eq!(fallbacks[0].1, ["get_cached"]);

    // A span that declares none of the fields: nothing recorded, the
    // events still inside it.
    assert_eq!(r.scope(plain()).await.unwrap(), 9);
    assert!(spans.fields("plain").is_empty());
    assert_eq!(spans.events("resilient::fallback")[1].1, ["plain"]);
}
