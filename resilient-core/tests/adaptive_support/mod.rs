//! What the adaptive limit's tests share: a simulated dependency on
//! tokio's clock, a spec through which it is called, callers that keep it
//! busy, and the limit watched window by window.

#![allow(dead_code, unreachable_pub)] // each test file uses a part

use std::error::Error as StdError;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use resilient_core::concurrency::Places;
use resilient_core::settings::Value;
use resilient_core::{
    concurrency_limit, ConcurrencyLimitHandle, ConcurrencyLimitSpec, Error, Registry, Spec,
};
use tokio::time::sleep;

use crate::support::{int, s, table, with};

pub type TestResult = Result<(), Box<dyn StdError>>;

#[derive(Debug, thiserror::Error)]
pub enum TestError {
    #[error("the dependency failed")]
    Failed,
    #[error(transparent)]
    Resilience(#[from] Error),
}

// ---------------------------------------------------------------- the dependency

/// A dependency of `capacity` workers: a call takes `base` while at most
/// `capacity` calls run (its own included), and `base · n / capacity` when
/// `n` do (or, made by [`Dependency::growing`], `base` plus a share of it
/// per call beyond `capacity`). Counts the calls in flight, the most seen,
/// and the calls that found every worker busy (they queue).
#[derive(Debug)]
pub struct Dependency {
    pub capacity: AtomicU32,
    pub base_us: AtomicU64,
    /// What each call beyond `capacity` adds to a call's latency, in
    /// millionths of `base`; 0: latency grows as `n / capacity`.
    pub growth_ppm: AtomicU64,
    /// Calls fail after this long instead of answering, when set (µs).
    pub fail_after_us: AtomicU64,
    pub in_flight: AtomicU32,
    pub peak: AtomicU32,
    pub served: AtomicU64,
    /// Calls that arrived with `capacity` calls or more already running.
    pub queued: AtomicU64,
    /// Calls that arrived.
    pub calls: AtomicU64,
    /// The latencies of the calls that answered, summed (µs).
    pub took_us: AtomicU64,
}

/// Counts a call out of the dependency however it ends (a cancelled one
/// included).
struct Running<'a>(&'a AtomicU32);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Dependency {
    pub fn new(capacity: u32, base: Duration) -> Arc<Self> {
        Arc::new(Self {
            capacity: AtomicU32::new(capacity),
            base_us: AtomicU64::new(micros(base)),
            growth_ppm: AtomicU64::new(0),
            fail_after_us: AtomicU64::new(0),
            in_flight: AtomicU32::new(0),
            peak: AtomicU32::new(0),
            served: AtomicU64::new(0),
            queued: AtomicU64::new(0),
            calls: AtomicU64::new(0),
            took_us: AtomicU64::new(0),
        })
    }

    /// A dependency of `capacity` workers whose calls take `base` while at
    /// most `capacity` run, and `percent` % of `base` longer for each call
    /// beyond: a queue as gentle or as steep as `percent` says.
    pub fn growing(capacity: u32, base: Duration, percent: f64) -> Arc<Self> {
        let dep = Self::new(capacity, base);
        // Whole millionths: 2.5 % is 25 000.
        dep.growth_ppm
            .store((percent * 10_000.0).round() as u64, Ordering::SeqCst);
        dep
    }

    /// Forgets the most calls seen at once and the calls counted, to count
    /// a phase of its own.
    pub fn reset_counts(&self) {
        self.peak
            .store(self.in_flight.load(Ordering::SeqCst), Ordering::SeqCst);
        self.queued.store(0, Ordering::SeqCst);
        self.calls.store(0, Ordering::SeqCst);
        self.served.store(0, Ordering::SeqCst);
        self.took_us.store(0, Ordering::SeqCst);
    }

    /// Calls that arrived and found every worker busy, and calls that
    /// arrived, since the last [`reset_counts`](Self::reset_counts).
    pub fn queued(&self) -> (u64, u64) {
        (
            self.queued.load(Ordering::SeqCst),
            self.calls.load(Ordering::SeqCst),
        )
    }

    /// The mean latency of the calls answered since the last
    /// [`reset_counts`](Self::reset_counts).
    pub fn mean_latency(&self) -> Duration {
        let served = self.served.load(Ordering::SeqCst).max(1);
        Duration::from_micros(self.took_us.load(Ordering::SeqCst) / served)
    }

    pub fn set_capacity(&self, capacity: u32) {
        self.capacity.store(capacity, Ordering::SeqCst);
    }

    pub fn set_base(&self, base: Duration) {
        self.base_us.store(micros(base), Ordering::SeqCst);
    }

    /// From now on every call fails after `after` (`None`: answers again).
    pub fn fail_after(&self, after: Option<Duration>) {
        self.fail_after_us
            .store(after.map_or(0, micros), Ordering::SeqCst);
    }

    pub fn peak(&self) -> u32 {
        self.peak.load(Ordering::SeqCst)
    }

    /// One call: its own count of calls at once decides how long it takes.
    pub async fn serve(&self) -> Result<(), TestError> {
        let n = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        let _running = Running(&self.in_flight);
        self.peak.fetch_max(n, Ordering::SeqCst);
        let k = u64::from(self.capacity.load(Ordering::SeqCst));
        self.calls.fetch_add(1, Ordering::SeqCst);
        if u64::from(n) > k {
            self.queued.fetch_add(1, Ordering::SeqCst);
        }
        let fail = self.fail_after_us.load(Ordering::SeqCst);
        if fail > 0 {
            sleep(Duration::from_micros(fail)).await;
            return Err(TestError::Failed);
        }
        let base = self.base_us.load(Ordering::SeqCst);
        let growth = self.growth_ppm.load(Ordering::SeqCst);
        let took = if growth == 0 {
            base * u64::from(n).max(k) / k
        } else {
            base + base * growth * u64::from(n).saturating_sub(k) / 1_000_000
        };
        sleep(Duration::from_micros(took)).await;
        self.took_us.fetch_add(took, Ordering::SeqCst);
        self.served.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

pub fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

// ---------------------------------------------------------------- the spec and its load

#[derive(ConcurrencyLimitSpec)]
#[spec("adaptive.reviews")]
pub struct Reviews;

#[concurrency_limit(Reviews)]
pub async fn review(dep: Arc<Dependency>) -> Result<(), TestError> {
    dep.serve().await
}

/// An adaptive section: `type = "adaptive"` and `pairs`.
pub fn adaptive<const N: usize>(pairs: [(&str, Value); N]) -> Value {
    with(table(pairs), "type", s("adaptive"))
}

/// The sections the convergence tests run with: a window of 100 ms (ten
/// times the dependency's base latency), the default tolerance.
pub fn section(initial: i128, max: i128) -> Value {
    adaptive([
        ("max", int(max)),
        ("initial", int(initial)),
        ("window", s("100ms")),
    ])
}

pub const WINDOW: Duration = Duration::from_millis(100);
pub const BASE: Duration = Duration::from_millis(10);

/// `tasks` callers of `review`, each calling again as soon as its call
/// ends, and 2 ms after a rejection; they stop with [`Load::stop`].
pub struct Load {
    stop: Arc<AtomicBool>,
    admitted: Arc<AtomicU64>,
    rejected: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// What a load did.
#[derive(Debug, Clone, Copy)]
pub struct Counts {
    pub admitted: u64,
    pub rejected: u64,
}

impl Load {
    /// Starts `tasks` callers, under the registry set as the thread's
    /// default.
    pub fn start(dep: &Arc<Dependency>, tasks: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let admitted = Arc::new(AtomicU64::new(0));
        let rejected = Arc::new(AtomicU64::new(0));
        let tasks = (0..tasks)
            .map(|_| {
                let (dep, stop) = (Arc::clone(dep), Arc::clone(&stop));
                let (admitted, rejected) = (Arc::clone(&admitted), Arc::clone(&rejected));
                tokio::spawn(async move {
                    while !stop.load(Ordering::SeqCst) {
                        match review(Arc::clone(&dep)).await {
                            Err(TestError::Resilience(Error::ConcurrencyLimitReached {
                                ..
                            })) => {
                                rejected.fetch_add(1, Ordering::SeqCst);
                                sleep(Duration::from_millis(2)).await;
                            }
                            _ => {
                                admitted.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                    }
                })
            })
            .collect();
        Self {
            stop,
            admitted,
            rejected,
            tasks,
        }
    }

    pub fn counts(&self) -> Counts {
        Counts {
            admitted: self.admitted.load(Ordering::SeqCst),
            rejected: self.rejected.load(Ordering::SeqCst),
        }
    }

    pub async fn stop(self) -> Result<Counts, Box<dyn StdError>> {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.tasks {
            t.await?;
        }
        Ok(Counts {
            admitted: self.admitted.load(Ordering::SeqCst),
            rejected: self.rejected.load(Ordering::SeqCst),
        })
    }
}

/// The limit once per window, `windows` times.
pub async fn watch(h: &ConcurrencyLimitHandle<Reviews>, windows: usize) -> Vec<u32> {
    watch_every(h, WINDOW, windows).await
}

/// The limit once per `window`, `windows` times.
pub async fn watch_every(
    h: &ConcurrencyLimitHandle<Reviews>,
    window: Duration,
    windows: usize,
) -> Vec<u32> {
    let mut limits = Vec::with_capacity(windows);
    for _ in 0..windows {
        sleep(window).await;
        limits.push(h.limit());
    }
    limits
}

/// The lowest, highest and mean of `limits`.
pub fn spread(limits: &[u32]) -> (u32, u32, f64) {
    let lo = limits.iter().copied().min().unwrap_or(0);
    let hi = limits.iter().copied().max().unwrap_or(0);
    let mean = limits.iter().map(|l| f64::from(*l)).sum::<f64>() / limits.len().max(1) as f64;
    (lo, hi, mean)
}

/// Checks that every limit of `settled` is within 20 % of `k`, and prints
/// the figures.
pub fn within_a_fifth(what: &str, k: u32, all: &[u32], settled: &[u32]) -> TestResult {
    let (lo, hi, mean) = spread(settled);
    println!(
        "{what}: K = {k}, settled {lo}..={hi} (mean {mean:.1}, {:+.0} %..{:+.0} %), {} windows: {all:?}",
        100.0 * (f64::from(lo) / f64::from(k) - 1.0),
        100.0 * (f64::from(hi) / f64::from(k) - 1.0),
        all.len()
    );
    let (low, high) = (f64::from(k) * 0.8, f64::from(k) * 1.2);
    if f64::from(lo) < low || f64::from(hi) > high {
        return Err(format!("{what}: settled {lo}..={hi}, not within 20 % of {k}").into());
    }
    Ok(())
}

pub fn handle(r: &Registry) -> Result<ConcurrencyLimitHandle<Reviews>, Error> {
    r.sync_scope(Reviews::get)
}

/// [`Reviews`]'s places in the registry's snapshot.
pub fn status(r: &Registry) -> Result<Places, Box<dyn StdError>> {
    let snapshot = r.snapshot();
    let spec = snapshot
        .specs
        .iter()
        .find(|s| s.path == Reviews::PATH)
        .ok_or("the spec is in the snapshot")?;
    Ok(*spec.status::<Places>().ok_or("a limit's places")?)
}
