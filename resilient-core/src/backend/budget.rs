//! A retry budget whose tokens live in the backend: one bucket for every
//! replica.
//!
//! A withdrawal is one script run, on the calling thread: a retry decides
//! in the step that judged the failure, which has no future to wait in
//! (see `RetryCall::step`). Deposits (successes, and tokens given back by
//! calls dropped before their retry) are added up in the process and sent
//! with this process's next decision, or by a task of their own once they
//! reach a whole token, [`FLUSH_AFTER`] later, so that healthy calls cost
//! no round trip.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Keys, RedisPart, Unavailable};
use crate::registry::Context;

/// Millionths of a token, as the budget counts.
const SCALE: u64 = 1_000_000;

/// How long deposits of a whole token are gathered before they are sent:
/// at most one round trip per this long for the successes of one spec.
pub(crate) const FLUSH_AFTER: Duration = Duration::from_millis(20);

/// A shared budget's settings, in millionths of a token: what the script
/// is asked, and part of the key (two settings never share a bucket).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BudgetShape {
    pub(crate) max: u64,
    pub(crate) initial: u64,
    pub(crate) per_second: u64,
}

/// One run of the budget's script.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) struct BudgetAsk {
    pub(crate) max: u64,
    pub(crate) initial: u64,
    pub(crate) per_second: u64,
    /// Millionths of a token deposited since the last decision.
    pub(crate) deposit: u64,
    /// Whether a token is withdrawn.
    pub(crate) want: bool,
}

/// What the script answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) struct BudgetAnswer {
    /// A token was withdrawn.
    pub(crate) granted: bool,
    /// Millionths of a token left.
    pub(crate) tokens: u64,
}

/// A retry spec's way to its shared budget.
#[derive(Debug)]
pub(crate) struct SharedBudget {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    #[cfg(feature = "redis")]
    backend: Arc<super::redis::RedisBackend>,
    keys: Keys,
    /// Millionths of a token deposited and not sent yet.
    pending: AtomicU64,
    /// A task is on its way to send them.
    flushing: AtomicBool,
    /// Millionths of a token the backend held after this process's last
    /// decision (what the snapshot shows), `u64::MAX` before the first.
    seen: AtomicU64,
    /// In ns since `origin`: until then the bucket is taken as empty (a
    /// withdrawal was refused), for at most [`REFUSAL_KEPT`].
    empty_until: AtomicU64,
    origin: Instant,
}

/// How long a refused withdrawal is kept without asking Redis again: while
/// a failing dependency has emptied the bucket, a process asks at most
/// this often. A token deposited elsewhere meanwhile is seen that late.
pub(crate) const REFUSAL_KEPT: Duration = Duration::from_millis(100);

impl SharedBudget {
    /// The budget of the spec at `path` in the Redis backend of `context`;
    /// `None` without one.
    pub(crate) fn of(context: &Context, path: &str) -> Option<Self> {
        let part = context.get::<RedisPart>()?;
        #[cfg(feature = "redis")]
        let inner = Inner {
            keys: Keys::new(&part.backend.settings().key_prefix, path, None),
            backend: Arc::clone(&part.backend),
            pending: AtomicU64::new(0),
            flushing: AtomicBool::new(false),
            seen: AtomicU64::new(u64::MAX),
            empty_until: AtomicU64::new(0),
            origin: Instant::now(),
        };
        #[cfg(not(feature = "redis"))]
        let inner = {
            let _ = part;
            Inner {
                keys: Keys::new("", path, None),
                pending: AtomicU64::new(0),
                flushing: AtomicBool::new(false),
                seen: AtomicU64::new(u64::MAX),
                empty_until: AtomicU64::new(0),
                origin: Instant::now(),
            }
        };
        Some(Self {
            inner: Arc::new(inner),
        })
    }

    /// Takes one token, blocking the thread for the round trip; the
    /// deposits not sent yet go with it. `Ok(false)`: the bucket holds
    /// less than one (known without a round trip for a while after
    /// Redis said so, see [`REFUSAL_KEPT`]).
    pub(crate) fn withdraw(&self, shape: BudgetShape) -> Result<bool, Unavailable> {
        let inner = &*self.inner;
        let now = inner.now();
        if now < inner.empty_until.load(Ordering::Acquire) {
            return Ok(false);
        }
        let deposit = inner.pending.swap(0, Ordering::AcqRel);
        let granted = inner.decided(inner.ask_blocking(&shape.ask(deposit, true), shape))?;
        if !granted {
            // Empty until the steady refill brings a token, or for at most
            // `REFUSAL_KEPT`; a deposit of this process ends it at once.
            let tokens = inner.seen.load(Ordering::Acquire).min(SCALE);
            let refill = match shape.per_second {
                0 => u64::MAX,
                rate => {
                    u64::try_from(u128::from(SCALE - tokens) * 1_000_000_000 / u128::from(rate))
                        .unwrap_or(u64::MAX)
                }
            };
            let kept = u64::try_from(REFUSAL_KEPT.as_nanos()).unwrap_or(u64::MAX);
            inner
                .empty_until
                .store(now.saturating_add(refill.min(kept)), Ordering::Release);
        }
        Ok(granted)
    }

    /// Forgets a refusal (new settings: it was of the old ones).
    pub(crate) fn forget(&self) {
        self.inner.empty_until.store(0, Ordering::Release);
    }

    /// Deposits `amount` millionths of a token: sent with the next
    /// decision, or by a task of their own once they make a whole token.
    pub(crate) fn deposit(&self, shape: BudgetShape, amount: u64) {
        if amount == 0 {
            return;
        }
        let before = self.inner.pending.fetch_add(amount, Ordering::AcqRel);
        if before.saturating_add(amount) >= SCALE {
            // A whole token of this process: the bucket is not empty.
            self.inner.empty_until.store(0, Ordering::Release);
            if !self.inner.flushing.load(Ordering::Acquire) {
                Inner::flush_later(&self.inner, shape);
            }
        }
    }

    /// Tokens in the bucket after this process's last decision; `None`
    /// before its first.
    pub(crate) fn seen(&self) -> Option<f64> {
        match self.inner.seen.load(Ordering::Acquire) {
            u64::MAX => None,
            t => Some(t as f64 / SCALE as f64),
        }
    }
}

impl BudgetShape {
    fn ask(self, deposit: u64, want: bool) -> BudgetAsk {
        BudgetAsk {
            max: self.max,
            initial: self.initial,
            per_second: self.per_second,
            deposit,
            want,
        }
    }
}

impl Inner {
    /// ns since `origin`.
    fn now(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// The key of a budget of `shape`:
    /// `{prefix:path}:retry_budget:MAX:INITIAL:PER_SECOND`, in millionths of
    /// a token.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    fn key(&self, shape: BudgetShape) -> String {
        let BudgetShape {
            max,
            initial,
            per_second,
        } = shape;
        self.keys
            .named(&format!("retry_budget:{max}:{initial}:{per_second}"))
    }

    fn ask_blocking(
        &self,
        ask: &BudgetAsk,
        shape: BudgetShape,
    ) -> Result<BudgetAnswer, Unavailable> {
        #[cfg(feature = "redis")]
        {
            self.backend.budget_blocking(&self.key(shape), ask)
        }
        #[cfg(not(feature = "redis"))]
        {
            let _ = (ask, shape);
            Err(Unavailable {
                retry_after: Duration::ZERO,
            })
        }
    }

    fn decided(&self, answer: Result<BudgetAnswer, Unavailable>) -> Result<bool, Unavailable> {
        let answer = answer?;
        self.seen.store(answer.tokens, Ordering::Release);
        Ok(answer.granted)
    }

    /// Sends the deposits pending after [`FLUSH_AFTER`], in a task of its
    /// own, if this thread is in a tokio runtime (else they go with the
    /// next decision). One such task at a time.
    fn flush_later(this: &Arc<Self>, shape: BudgetShape) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if this.flushing.swap(true, Ordering::AcqRel) {
            return;
        }
        let guard = Flushing(Arc::clone(this));
        runtime.spawn(async move {
            let inner = &guard.0;
            loop {
                // A runtime without a time driver panics here: then the
                // deposits go with the next decision.
                let Ok(sleep) = std::panic::catch_unwind(|| tokio::time::sleep(FLUSH_AFTER)) else {
                    return;
                };
                sleep.await;
                let deposit = inner.pending.swap(0, Ordering::AcqRel);
                if deposit > 0 {
                    let _ = inner.decided(inner.ask(&shape.ask(deposit, false), shape).await);
                }
                inner.flushing.store(false, Ordering::Release);
                if inner.pending.load(Ordering::Acquire) < SCALE
                    || inner.flushing.swap(true, Ordering::AcqRel)
                {
                    return;
                }
            }
        });
    }

    async fn ask(&self, ask: &BudgetAsk, shape: BudgetShape) -> Result<BudgetAnswer, Unavailable> {
        #[cfg(feature = "redis")]
        {
            self.backend.budget(&self.key(shape), ask).await
        }
        #[cfg(not(feature = "redis"))]
        {
            let _ = (ask, shape);
            Err(Unavailable {
                retry_after: Duration::ZERO,
            })
        }
    }
}

/// Lets another flush start when the task that flushes ends, however it
/// ends (its runtime shut down, say).
struct Flushing(Arc<Inner>);

impl Drop for Flushing {
    fn drop(&mut self) {
        self.0.flushing.store(false, Ordering::Release);
    }
}
