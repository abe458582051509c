//! The hand-written reference: what a competent engineer writes inline when
//! asked for retry, a circuit breaker, a limit on calls in flight and a
//! timeout around one call, without a framework. No allocation, no lock, no
//! clock read on the success path. [`Hand::call_blocking`] is the same
//! without async and without the timeout, for a blocking fn: the retry's
//! delay sleeps the thread.

use std::hint::black_box;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Why a guarded call failed.
#[derive(Debug)]
pub enum HandError {
    /// The breaker is open.
    Open,
    /// `limit` calls are already in flight.
    Full,
    /// The call took longer than the timeout.
    TimedOut,
}

/// The shared state: a consecutive-failure breaker and an in-flight counter.
pub struct Hand {
    /// Failures in a row; the breaker opens when it reaches `open_after`.
    failures: AtomicU32,
    /// While open: nanoseconds since `epoch` when the breaker may let a
    /// call through again.
    open_until: AtomicU64,
    epoch: Instant,
    in_flight: AtomicUsize,
    open_after: u32,
    open_wait: Duration,
    limit: usize,
    attempts: u32,
    delay: Duration,
    timeout: Duration,
}

/// Frees a place in flight when the call ends or is dropped.
struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Release);
    }
}

impl Hand {
    pub fn new(
        attempts: u32,
        delay: Duration,
        open_after: u32,
        open_wait: Duration,
        limit: usize,
        timeout: Duration,
    ) -> Self {
        Self {
            failures: AtomicU32::new(0),
            open_until: AtomicU64::new(0),
            epoch: Instant::now(),
            in_flight: AtomicUsize::new(0),
            open_after,
            open_wait,
            limit,
            attempts,
            delay,
            timeout,
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Whether the breaker lets a call through: only an open breaker reads
    /// the clock.
    fn permitted(&self) -> bool {
        self.failures.load(Ordering::Relaxed) < self.open_after
            || self.now() >= self.open_until.load(Ordering::Relaxed)
    }

    fn record(&self, ok: bool) {
        if ok {
            // Write only when there is something to clear, so that callers on
            // other cores do not fight over the line while all is well.
            if self.failures.load(Ordering::Relaxed) != 0 {
                self.failures.store(0, Ordering::Relaxed);
            }
        } else if self.failures.fetch_add(1, Ordering::Relaxed) + 1 >= self.open_after {
            let until = self
                .now()
                .saturating_add(u64::try_from(self.open_wait.as_nanos()).unwrap_or(u64::MAX));
            self.open_until.store(until, Ordering::Relaxed);
        }
    }

    /// The breaker's permission, then a place in flight, held until the
    /// guard drops.
    #[inline]
    fn enter(&self) -> Result<InFlight<'_>, HandError> {
        if !self.permitted() {
            return Err(HandError::Open);
        }
        if self.in_flight.fetch_add(1, Ordering::Acquire) >= self.limit {
            self.in_flight.fetch_sub(1, Ordering::Release);
            return Err(HandError::Full);
        }
        Ok(InFlight(&self.in_flight))
    }

    /// One attempt: breaker, then limit, then timeout around the op.
    async fn attempt(&self) -> Result<u32, HandError> {
        let _in_flight = self.enter()?;
        let result =
            match tokio::time::timeout(self.timeout, async { Ok::<u32, HandError>(black_box(1)) })
                .await
            {
                Ok(result) => result,
                Err(_) => Err(HandError::TimedOut),
            };
        self.record(result.is_ok());
        result
    }

    /// The guarded call: retries a full limit or a timeout (not an open breaker)
    /// up to `attempts` times, `delay` apart.
    pub async fn call(&self) -> Result<u32, HandError> {
        let mut attempt = 1;
        loop {
            match self.attempt().await {
                Ok(v) => return Ok(v),
                Err(e @ HandError::Open) => return Err(e),
                Err(e) if attempt >= self.attempts => return Err(e),
                Err(_) => {
                    attempt += 1;
                    tokio::time::sleep(self.delay).await;
                }
            }
        }
    }

    /// One blocking attempt: breaker, then limit, around the op.
    fn attempt_blocking(&self) -> Result<u32, HandError> {
        let _in_flight = self.enter()?;
        let result = Ok::<u32, HandError>(black_box(1));
        self.record(result.is_ok());
        result
    }

    /// [`call`](Self::call) for a blocking fn: the same retry loop, breaker
    /// and limit, no timeout (a thread cannot be stopped), and the delay
    /// blocks the thread.
    pub fn call_blocking(&self) -> Result<u32, HandError> {
        let mut attempt = 1;
        loop {
            match self.attempt_blocking() {
                Ok(v) => return Ok(v),
                Err(e @ HandError::Open) => return Err(e),
                Err(e) if attempt >= self.attempts => return Err(e),
                Err(_) => {
                    attempt += 1;
                    std::thread::sleep(self.delay);
                }
            }
        }
    }
}
