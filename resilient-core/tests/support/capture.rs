//! A `tracing` subscriber that records every event with its target, level,
//! fields and the spans it was in, and a `metrics` recorder that keeps every
//! counter, gauge and histogram by name and labels. Both are written here, so
//! that the tests need no subscriber or exporter crate.

#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata as TracingMetadata, Subscriber};

/// One recorded event.
#[derive(Debug, Clone)]
pub struct Line {
    pub level: Level,
    pub target: String,
    pub message: String,
    pub fields: BTreeMap<String, String>,
    /// Names of the spans entered when it was recorded, outermost first.
    pub spans: Vec<String>,
}

#[derive(Default)]
struct State {
    lines: Vec<Line>,
    span_names: BTreeMap<u64, String>,
    entered: Vec<u64>,
}

/// Records events; clone it to read them after the subscriber is set.
/// Making one keeps the binary's log lines from being cached as silent
/// ([`no_silent_callsites`]).
#[derive(Clone)]
pub struct Capture {
    state: Arc<Mutex<State>>,
    next_id: Arc<AtomicUsize>,
}

impl Default for Capture {
    fn default() -> Self {
        no_silent_callsites();
        Self::empty()
    }
}

impl Capture {
    fn empty() -> Self {
        Self {
            state: Arc::default(),
            next_id: Arc::default(),
        }
    }

    /// A capture that is the binary's global default, for lines logged on
    /// threads other than the test's (a multi-thread runtime's workers);
    /// first in the binary to set one.
    pub fn global() -> Self {
        let capture = Self::empty();
        if tracing::subscriber::set_global_default(capture.clone()).is_err() {
            panic!("a global subscriber was set before this capture");
        }
        capture
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every line recorded so far.
    pub fn lines(&self) -> Vec<Line> {
        self.lock().lines.clone()
    }

    /// The lines of `target` at `level`.
    pub fn at(&self, target: &str, level: Level) -> Vec<Line> {
        self.lines()
            .into_iter()
            .filter(|l| l.target == target && l.level == level)
            .collect()
    }
}

struct Fields<'a>(&'a mut BTreeMap<String, String>, &'a mut String);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let text = format!("{value:?}");
        if field.name() == "message" {
            *self.1 = text;
        } else {
            self.0.insert(field.name().to_owned(), text);
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &TracingMetadata<'_>) -> bool {
        true
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) as u64 + 1;
        self.lock()
            .span_names
            .insert(id, span.metadata().name().to_owned());
        Id::from_u64(id)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut fields = BTreeMap::new();
        let mut message = String::new();
        event.record(&mut Fields(&mut fields, &mut message));
        let mut state = self.lock();
        let spans = state
            .entered
            .iter()
            .filter_map(|id| state.span_names.get(id).cloned())
            .collect();
        state.lines.push(Line {
            level: *event.metadata().level(),
            target: event.metadata().target().to_owned(),
            message,
            fields,
            spans,
        });
    }

    fn enter(&self, span: &Id) {
        self.lock().entered.push(span.into_u64());
    }

    fn exit(&self, span: &Id) {
        let mut state = self.lock();
        if let Some(at) = state.entered.iter().rposition(|id| *id == span.into_u64()) {
            state.entered.remove(at);
        }
    }
}

/// Keeps every log line of this test binary from being cached as silent.
///
/// `tracing` caches each line's interest for every thread. A test that
/// captures lines sets its subscriber on its own thread only, and another
/// test that reaches the same line on its thread, with no subscriber,
/// can cache it as "never" while the first is being set: the first then
/// sees none of it (0 of 2 operator WARNs, 1 of 195 refusals). With this
/// global default, which records nothing and answers "sometimes", a line
/// is never cached as "never": each event asks the thread's subscriber.
/// Call it first in every test of a binary that captures lines.
pub fn no_silent_callsites() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = tracing::subscriber::set_global_default(Sometimes);
    });
}

/// Records nothing; asked again at each event.
struct Sometimes;

impl Subscriber for Sometimes {
    fn register_callsite(&self, _: &'static TracingMetadata<'static>) -> Interest {
        Interest::sometimes()
    }

    fn enabled(&self, _: &TracingMetadata<'_>) -> bool {
        false
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, _: &Event<'_>) {}

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

/// A metric series: its name and its labels, sorted.
pub type Series = (String, Vec<(String, String)>);

fn series(key: &Key) -> Series {
    let mut labels: Vec<(String, String)> = key
        .labels()
        .map(|l| (l.key().to_owned(), l.value().to_owned()))
        .collect();
    labels.sort();
    (key.name().to_owned(), labels)
}

struct AtomicCounter(AtomicU64);

impl CounterFn for AtomicCounter {
    fn increment(&self, value: u64) {
        self.0.fetch_add(value, Ordering::Relaxed);
    }
    fn absolute(&self, value: u64) {
        self.0.fetch_max(value, Ordering::Relaxed);
    }
}

struct AtomicGauge(Mutex<f64>);

impl GaugeFn for AtomicGauge {
    fn increment(&self, value: f64) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) += value;
    }
    fn decrement(&self, value: f64) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) -= value;
    }
    fn set(&self, value: f64) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = value;
    }
}

struct Samples(Mutex<Vec<f64>>);

impl HistogramFn for Samples {
    fn record(&self, value: f64) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(value);
    }
}

#[derive(Default)]
struct Registered {
    counters: BTreeMap<Series, Arc<AtomicCounter>>,
    gauges: BTreeMap<Series, Arc<AtomicGauge>>,
    histograms: BTreeMap<Series, Arc<Samples>>,
}

/// Keeps every metric registered with it; read them by name and labels.
#[derive(Clone, Default)]
pub struct Meters {
    registered: Arc<Mutex<Registered>>,
}

fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    out.sort();
    out
}

impl Meters {
    fn lock(&self) -> std::sync::MutexGuard<'_, Registered> {
        self.registered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The counter `name` with exactly `pairs` as labels, if registered.
    /// Calls of `spec` (its name, path and kind) counted with `outcome`
    /// (`resilient_calls_total`), 0 when none was.
    pub fn calls(&self, spec: (&str, &str, &str), outcome: &str) -> u64 {
        let (name, path, kind) = spec;
        self.counter(
            "resilient_calls_total",
            &[
                ("spec", name),
                ("path", path),
                ("kind", kind),
                ("outcome", outcome),
            ],
        )
        .unwrap_or(0)
    }

    pub fn counter(&self, name: &str, pairs: &[(&str, &str)]) -> Option<u64> {
        self.lock()
            .counters
            .get(&(name.to_owned(), labels(pairs)))
            .map(|c| c.0.load(Ordering::Relaxed))
    }

    /// The gauge `name` with exactly `pairs` as labels, if registered.
    pub fn gauge(&self, name: &str, pairs: &[(&str, &str)]) -> Option<f64> {
        self.lock()
            .gauges
            .get(&(name.to_owned(), labels(pairs)))
            .map(|g| *g.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The samples of histogram `name` with exactly `pairs` as labels.
    pub fn histogram(&self, name: &str, pairs: &[(&str, &str)]) -> Option<Vec<f64>> {
        self.lock()
            .histograms
            .get(&(name.to_owned(), labels(pairs)))
            .map(|h| h.0.lock().unwrap_or_else(PoisonError::into_inner).clone())
    }

    /// Every series registered, as `name{label=value,..}`.
    pub fn series(&self) -> Vec<String> {
        let r = self.lock();
        let keys = r
            .counters
            .keys()
            .chain(r.gauges.keys())
            .chain(r.histograms.keys());
        keys.map(|(name, labels)| format!("{name}{labels:?}"))
            .collect()
    }

    /// How many series were registered in all.
    pub fn registered(&self) -> usize {
        let r = self.lock();
        r.counters.len() + r.gauges.len() + r.histograms.len()
    }
}

impl Recorder for Meters {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let c = Arc::clone(
            self.lock()
                .counters
                .entry(series(key))
                .or_insert_with(|| Arc::new(AtomicCounter(AtomicU64::new(0)))),
        );
        Counter::from_arc(c)
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        let g = Arc::clone(
            self.lock()
                .gauges
                .entry(series(key))
                .or_insert_with(|| Arc::new(AtomicGauge(Mutex::new(0.0)))),
        );
        Gauge::from_arc(g)
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let h = Arc::clone(
            self.lock()
                .histograms
                .entry(series(key))
                .or_insert_with(|| Arc::new(Samples(Mutex::new(Vec::new())))),
        );
        Histogram::from_arc(h)
    }
}
