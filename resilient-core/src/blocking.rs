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
//! #[spec("resilient.circuit_breaker.ledger")]
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
//! than `max_wait`, a retry's overall `timeout` included. They run on the
//! real clock: tokio's paused clock (`start_paused`) does not apply to a
//! blocking fn's waits. A panic in the body propagates, and every permit,
//! place and budget token it held is given back on the way out.
//!
//! # On a tokio runtime
//!
//! A blocking fn belongs on a thread that may block: a plain thread, or
//! [`tokio::task::spawn_blocking`]. When one is called on a runtime anyway,
//! its waits follow this rule, so that they never deadlock the runtime:
//!
//! | where the wait happens | what it does |
//! |---|---|
//! | no runtime on the thread | blocks the thread |
//! | a multi-thread runtime (a worker, `block_on`, `spawn_blocking`) | blocks inside [`tokio::task::block_in_place`]: a worker first hands its other tasks to another thread |
//! | a current-thread runtime: a retry's delay, a rate limiter's reservation | blocks the thread (and, on the runtime's own thread, every task of the runtime with it) until the time has passed |
//! | a current-thread runtime: a `block` limit's wait for a place | refused at once, with the limit's error, and one WARN per process naming `spawn_blocking` |
//!
//! The last row is the deadlock the rule prevents: on a current-thread
//! runtime the place may be held by a task of the same runtime, which cannot
//! run while its only thread waits for it. tokio does not tell whether the
//! thread is that runtime's own or one of its `spawn_blocking` threads, so
//! both are refused; on a multi-thread runtime both wait.
//!
//! # What a blocking fn cannot carry
//!
//! `#[timeout]` is a compile error on a plain fn (a thread cannot be
//! cancelled: a timeout could only stop waiting, while the work goes on
//! holding what it holds); give the blocking client its own timeout (most
//! have one: a socket's read timeout, a statement timeout), or call the fn
//! from an `async fn` through `spawn_blocking` and put `#[timeout]` there.
//! `#[hedged]` (attempts run side by side) and `#[chaos]` (its latency is a
//! timer) are async only too. A `#[fallback]` of a blocking fn is a plain fn.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use tokio::runtime::{Handle, RuntimeFlavor};

/// Where a blocking wait happens, by [the rule](self#on-a-tokio-runtime).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Here {
    /// No runtime: block the thread.
    Plain,
    /// A multi-thread runtime: block inside `block_in_place`.
    MultiThread,
    /// A current-thread runtime.
    CurrentThread,
}

fn here() -> Here {
    match Handle::try_current() {
        Err(_) => Here::Plain,
        Ok(handle) => match handle.runtime_flavor() {
            RuntimeFlavor::CurrentThread => Here::CurrentThread,
            // The multi-thread flavor, and any flavor tokio adds later whose
            // threads `block_in_place` accepts.
            _ => Here::MultiThread,
        },
    }
}

/// Runs `wait`, a wait that blocks the thread, by the rule.
fn blocking<R>(wait: impl FnOnce() -> R) -> R {
    match here() {
        Here::MultiThread => tokio::task::block_in_place(wait),
        Here::Plain | Here::CurrentThread => wait(),
    }
}

/// Blocks the calling thread for `delay` (a retry's delay, a rate
/// limiter's reservation): at least the whole delay (`thread::sleep` sleeps
/// again when a signal wakes it early).
pub(crate) fn sleep(delay: Duration) {
    if !delay.is_zero() {
        blocking(|| thread::sleep(delay));
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
    if here() == Here::CurrentThread {
        static WARNED: AtomicBool = AtomicBool::new(false);
        if !WARNED.swap(true, Ordering::Relaxed) {
            refused();
        }
        return None;
    }
    let deadline = max_wait.and_then(|w| Instant::now().checked_add(w));
    blocking(|| park_on(fut, deadline))
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
