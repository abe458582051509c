//! Blocking fns: the same attributes on a plain `fn -> Result<T, E>`.
//!
//! `#[retryable]`, `#[circuit_breakable]`, `#[concurrency_limit]`,
//! `#[rate_limited]` and `#[fallback]` take a plain fn as they take an
//! `async fn`: free fns, methods, generic fns, trait impls. The spec, its
//! settings and its instance are the same: a blocking and an async caller of
//! one spec share one breaker, one retry budget, one limit.
//!
//! ```
//! use resilient_core::{circuit_breakable, retryable, CircuitBreakerSpec, RetrySpec};
//!
//! #[derive(RetrySpec)]
//! #[spec("resilient.retry.ledger")]
//! pub struct LedgerRetry;
//!
//! #[derive(CircuitBreakerSpec)]
//! #[spec("resilient.circuitbreaker.ledger")]
//! pub struct LedgerBreaker;
//!
//! #[derive(Debug, thiserror::Error)]
//! pub enum LedgerError {
//!     #[error("ledger unavailable")]
//!     Unavailable,
//!     #[error(transparent)]
//!     Resilience(#[from] resilient_core::Error),
//! }
//!
//! // A blocking client (a database driver, a sync SDK): no `async`.
//! #[circuit_breakable(LedgerBreaker)]
//! #[retryable(LedgerRetry)]
//! pub fn balance(account: u64) -> Result<i64, LedgerError> {
//!     Ok(account as i64)
//! }
//! ```
//!
//! # Waits block the calling thread
//!
//! A retry's delay (and a [`Verdict::RetryAfter`](crate::Verdict) hint), a
//! rate limiter's reservation within its `max_wait`, and a `block` limit's
//! wait for a place block the thread that called the fn, with the same
//! contracts as in an async fn: never shorter than the delay, never longer
//! than `max_wait`, a retry's overall `timeout` included (see below for
//! tokio's paused clock). A panic in the body propagates, and every permit,
//! place and budget token it held is given back on the way out.
//!
//! # On a tokio runtime
//!
//! A blocking fn belongs on a thread that may block: a plain thread, or
//! [`tokio::task::spawn_blocking`]. Its waits block whatever thread calls
//! it:
//!
//! | where the wait happens | what it does |
//! |---|---|
//! | a plain thread, `spawn_blocking`, a multi-thread runtime | blocks the thread (on a worker, the worker's queued tasks are stolen by the others meanwhile) |
//! | a current-thread runtime: a retry's delay, a rate limiter's reservation | blocks the thread (on the runtime's own thread, every task of the runtime with it) until the time has passed |
//! | a current-thread runtime: a `block` limit's wait for a place | refused at once with [`Error::ConcurrencyLimitReached`](crate::Error::ConcurrencyLimitReached), and one WARN per process naming `spawn_blocking` |
//!
//! A place held by something only the waiting thread can run is never
//! freed while it waits. On a current-thread runtime that is every task of
//! the runtime, so the wait is refused there (tokio does not tell the
//! runtime's own thread from its `spawn_blocking` threads, so both are
//! refused). Elsewhere it is a task of a `LocalSet` the thread drives, or a
//! future joined with the call in the same task (`join!`, `select!`): the
//! wait then lasts its whole `max_wait`, or for ever without one. Set
//! `max_wait` on a `block` limit that blocking fns share with async code.
//!
//! The sleeps are real (`thread::sleep`), while a retry's overall
//! `timeout` (and the periods of a rate limiter built on a paused clock)
//! are measured on tokio's clock: under a paused clock (`start_paused` in a
//! test) it stands still while
//! the thread sleeps, so the timeout never fires and the periods never
//! refill. Test blocking fns in a plain `#[test]`, with the test's registry
//! as the thread's default (`let _guard = registry.set_default();`) or
//! around the call (`registry.sync_scope(|| ...)`).
//!
//! # What a blocking fn cannot carry
//!
//! `#[timeout]` is a compile error on a plain fn: a thread cannot be
//! stopped, so a timeout could only stop waiting while the work goes on,
//! holding its connection, its place and its breaker permit. Give the
//! blocking client its own timeout (a socket's read timeout, a statement
//! timeout): that one bounds the work. A `#[timeout]` on an `async fn`
//! that runs this one through `spawn_blocking` bounds only how long the
//! caller waits. `#[hedged]` (attempts run side by side) and `#[chaos]`
//! (its latency is a timer) are async only too. A `#[fallback]` of a
//! blocking fn is a plain fn.
//!
//! The body runs in a closure called in place, so `#[track_caller]` on a
//! blocking fn reports the body's location, not the caller's.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use tokio::runtime::{Handle, RuntimeFlavor};

/// Whether the calling thread drives a current-thread runtime (or may:
/// tokio does not tell its own thread from its `spawn_blocking` threads).
fn on_current_thread_runtime() -> bool {
    Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::CurrentThread)
}

/// Blocks the calling thread for `delay` (a retry's delay, a rate
/// limiter's reservation): at least the whole delay (`thread::sleep` sleeps
/// again when a signal wakes it early).
pub(crate) fn sleep(delay: Duration) {
    if !delay.is_zero() {
        thread::sleep(delay);
    }
}

/// The output of `fut`, a future that needs no runtime (a semaphore's
/// acquisition), polled on the calling thread until it is ready or
/// `max_wait` has passed (`None`: however long it takes). `None` when it
/// did not come in time, or when the rule refuses the wait (a current-thread
/// runtime); `refused` then says so once per process.
pub(crate) fn wait_for<F: Future>(
    fut: F,
    max_wait: Option<Duration>,
    refused: impl FnOnce(),
) -> Option<F::Output> {
    if on_current_thread_runtime() {
        static WARNED: AtomicBool = AtomicBool::new(false);
        if !WARNED.swap(true, Ordering::Relaxed) {
            refused();
        }
        return None;
    }
    let deadline = max_wait.and_then(|w| Instant::now().checked_add(w));
    park_on(fut, deadline)
}

/// Wakes the thread that polls.
struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// `fut` polled on this thread, parked between polls until woken or
/// `deadline` (`None`: no deadline).
fn park_on<F: Future>(fut: F, deadline: Option<Instant>) -> Option<F::Output> {
    let mut fut = pin!(fut);
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return Some(out);
        }
        match deadline {
            None => thread::park(),
            Some(deadline) => {
                let now = Instant::now();
                if now >= deadline {
                    return None;
                }
                thread::park_timeout(deadline - now);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sleep_lasts_its_whole_delay() {
        let start = Instant::now();
        sleep(Duration::from_millis(20));
        assert!(start.elapsed() >= Duration::from_millis(20));
    }

    #[test]
    fn a_wait_ends_when_its_future_is_ready_or_at_its_deadline() {
        let semaphore = tokio::sync::Semaphore::new(0);
        let start = Instant::now();
        let got = wait_for(semaphore.acquire(), Some(Duration::from_millis(30)), || {});
        assert!(got.is_none());
        assert!(start.elapsed() >= Duration::from_millis(30));

        let semaphore = Arc::new(tokio::sync::Semaphore::new(0));
        let releaser = {
            let semaphore = Arc::clone(&semaphore);
            thread::spawn(move || {
                thread::sleep(Duration::from_millis(10));
                semaphore.add_permits(1);
            })
        };
        let got = wait_for(semaphore.acquire(), None, || {});
        assert!(matches!(got, Some(Ok(_))));
        releaser.join().ok();
    }

    #[test]
    fn a_current_thread_runtime_refuses_a_wait_once_loudly() {
        let rt = tokio::runtime::Builder::new_current_thread().build().ok();
        let Some(rt) = rt else {
            panic!("a current-thread runtime");
        };
        let _entered = rt.enter();
        let semaphore = tokio::sync::Semaphore::new(0);
        let mut told = 0;
        for _ in 0..2 {
            let start = Instant::now();
            let got = wait_for(semaphore.acquire(), None, || told += 1);
            assert!(got.is_none(), "refused, not waited for");
            assert!(start.elapsed() < Duration::from_secs(5));
        }
        assert_eq!(told, 1, "told once per process");
    }
}
