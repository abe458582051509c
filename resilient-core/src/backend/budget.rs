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
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::{BudgetAnswer, BudgetAsk, Keys, RedisPart, Unavailable};
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

/// The shape of the bucket a call draws on, and its id in this process
/// (see [`SharedBudget::switch`]): what a call deposits or gives back goes
/// to the bucket it was taken from, or is lost, never credited to another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BudgetVersion {
    pub(crate) shape: BudgetShape,
    pub(crate) id: u64,
}

/// A retry spec's way to its shared budget.
#[derive(Debug)]
pub(crate) struct SharedBudget {
    inner: Arc<Inner>,
}

/// The deposits not sent yet, and a refusal kept: the id of the bucket
/// they belong to (high [`ID_BITS`] bits) and their millionths of a token,
/// or the µs until which the bucket is taken as empty (low bits).
const ID_BITS: u32 = 12;
const LOW_BITS: u32 = 64 - ID_BITS;
const LOW_MASK: u64 = (1 << LOW_BITS) - 1;

/// The id of no bucket: settings without a shared budget, or a shape past
/// the first [`NO_ID`] ones a spec had (whose deposits are lost).
const NO_ID: u64 = (1 << ID_BITS) - 1;

/// The high bits of the words of bucket `id`.
fn tag(id: u64) -> u64 {
    id.min(NO_ID) << LOW_BITS
}

#[derive(Debug)]
struct Inner {
    #[cfg(feature = "redis")]
    backend: Arc<super::redis::RedisBackend>,
    keys: Keys,
    /// The shapes this spec's settings have had, in order: a shape's id is
    /// its place (at most [`NO_ID`] of them).
    shapes: Mutex<Vec<BudgetShape>>,
    /// The bucket in force, its id and shape (`NO_ID` and `None`: the
    /// settings have no shared budget now): the one the task that sends
    /// deposits sends them to.
    current: Mutex<(u64, Option<BudgetShape>)>,
    /// Deposited and not sent yet, tagged with their bucket's id.
    pending: AtomicU64,
    /// A task is on its way to send them.
    flushing: AtomicBool,
    /// Millionths of a token the backend held after this process's last
    /// decision, tagged with the bucket's id (what the snapshot shows);
    /// `u64::MAX` before the first.
    seen: AtomicU64,
    /// In µs since `origin`, tagged with the bucket's id: until then that
    /// bucket is taken as empty (a withdrawal was refused), for at most
    /// [`REFUSAL_KEPT`].
    empty_until: AtomicU64,
    origin: Instant,
}

/// How long a refused withdrawal is kept without asking Redis again: while
/// a failing dependency has emptied the bucket, a process asks at most
/// this often. A token deposited elsewhere meanwhile is seen that late.
pub(crate) const REFUSAL_KEPT: Duration = Duration::from_millis(100);

impl SharedBudget {
    /// The budget of the spec at `path` in the Redis backend of `context`,
    /// its settings now of `shape` (id 0); `None` without a backend.
    pub(crate) fn of(context: &Context, path: &str, shape: Option<BudgetShape>) -> Option<Self> {
        let part = context.get::<RedisPart>()?;
        #[cfg(feature = "redis")]
        let (keys, backend) = (
            Keys::new(&part.backend.settings().key_prefix, path, None),
            Arc::clone(&part.backend),
        );
        #[cfg(not(feature = "redis"))]
        let keys = {
            let _ = part;
            Keys::new("", path, None)
        };
        let id = if shape.is_some() { 0 } else { NO_ID };
        Some(Self {
            inner: Arc::new(Inner {
                #[cfg(feature = "redis")]
                backend,
                keys,
                shapes: Mutex::new(shape.into_iter().collect()),
                current: Mutex::new((id, shape)),
                pending: AtomicU64::new(tag(id)),
                flushing: AtomicBool::new(false),
                seen: AtomicU64::new(u64::MAX),
                empty_until: AtomicU64::new(0),
                origin: Instant::now(),
            }),
        })
    }

    /// New settings, whose bucket is of `shape`: returns its id, the same
    /// for the same shape (a reload back to earlier settings finds their
    /// bucket, as Redis does), [`NO_ID`] past the first 4095 shapes. The
    /// deposits not sent yet of another bucket are dropped, and a refusal
    /// kept is forgotten.
    pub(crate) fn switch(&self, shape: Option<BudgetShape>) -> u64 {
        let inner = &*self.inner;
        let id = match shape {
            None => NO_ID,
            Some(shape) => {
                let mut shapes = inner.shapes.lock().unwrap_or_else(PoisonError::into_inner);
                match shapes.iter().position(|s| *s == shape) {
                    Some(i) => i as u64,
                    None if (shapes.len() as u64) < NO_ID => {
                        shapes.push(shape);
                        shapes.len() as u64 - 1
                    }
                    None => NO_ID,
                }
            }
        };
        let mut current = inner.current.lock().unwrap_or_else(PoisonError::into_inner);
        if current.0 != id || id == NO_ID {
            inner.pending.store(tag(id), Ordering::SeqCst);
        }
        *current = (id, shape);
        inner.empty_until.store(0, Ordering::SeqCst);
        id
    }

    /// Takes one token, blocking the thread for the round trip; the
    /// deposits of `v` not sent yet go with it. `Ok(false)`: the bucket
    /// holds less than one (known without a round trip for a while after
    /// Redis said so, see [`REFUSAL_KEPT`]).
    pub(crate) fn withdraw(&self, v: BudgetVersion) -> Result<bool, Unavailable> {
        let inner = &*self.inner;
        let now = inner.now_us();
        let empty = inner.empty_until.load(Ordering::SeqCst);
        if v.id < NO_ID && empty & !LOW_MASK == tag(v.id) && now < empty & LOW_MASK {
            return Ok(false);
        }
        let deposit = inner.take(v.id);
        let shape = v.shape;
        let granted = inner.decided(v.id, inner.ask_blocking(&shape.ask(deposit, true), shape))?;
        // Kept for this bucket only (a reload meanwhile is not misled), and
        // not for a bucket without an id of its own.
        if !granted && v.id < NO_ID {
            // Empty until the steady refill brings a token, or for at most
            // `REFUSAL_KEPT`; a deposit of this process ends it at once.
            let seen = inner.seen.load(Ordering::SeqCst);
            let tokens = if seen & !LOW_MASK == tag(v.id) {
                (seen & LOW_MASK).min(SCALE)
            } else {
                0
            };
            let refill = match shape.per_second {
                0 => u64::MAX,
                rate => u64::try_from(u128::from(SCALE - tokens) * 1_000_000 / u128::from(rate))
                    .unwrap_or(u64::MAX),
            };
            let kept = u64::try_from(REFUSAL_KEPT.as_micros()).unwrap_or(u64::MAX);
            let until = now.saturating_add(refill.min(kept)).min(LOW_MASK);
            inner.empty_until.store(tag(v.id) | until, Ordering::SeqCst);
        }
        Ok(granted)
    }

    /// Deposits `amount` millionths of a token in the bucket of `v`: sent
    /// with the next decision, or by a task of their own once they make a
    /// whole token. Lost if `v`'s bucket is no longer the one in force; the
    /// deposits not sent yet never exceed the bucket's size.
    pub(crate) fn deposit(&self, v: BudgetVersion, amount: u64) {
        if amount == 0 {
            return;
        }
        if v.id >= NO_ID {
            return;
        }
        let inner = &*self.inner;
        let (tag, most) = (tag(v.id), v.shape.max.min(super::MAX_ARG));
        let Ok(before) = inner
            .pending
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |w| {
                (w & !LOW_MASK == tag)
                    .then(|| tag | (w & LOW_MASK).saturating_add(amount).min(most))
            })
        else {
            return;
        };
        if (before & LOW_MASK).saturating_add(amount) >= SCALE {
            // A whole token of this process: the bucket is not empty.
            inner.empty_until.store(0, Ordering::SeqCst);
            if !inner.flushing.load(Ordering::SeqCst) {
                Inner::flush_later(&self.inner);
            }
        }
    }

    /// Tokens in the bucket in force after this process's last decision;
    /// `None` before its first.
    pub(crate) fn seen(&self) -> Option<f64> {
        let inner = &*self.inner;
        let id = inner
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .0;
        let seen = inner.seen.load(Ordering::SeqCst);
        (id < NO_ID && seen != u64::MAX && seen & !LOW_MASK == tag(id))
            .then(|| (seen & LOW_MASK) as f64 / SCALE as f64)
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
    /// µs since `origin`.
    fn now_us(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// Takes the deposits of bucket `id` not sent yet: none if the pending
    /// ones are of another bucket.
    fn take(&self, id: u64) -> u64 {
        if id >= NO_ID {
            return 0;
        }
        let tag = tag(id);
        self.pending
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |w| {
                (w & !LOW_MASK == tag && w & LOW_MASK > 0).then_some(tag)
            })
            .map_or(0, |w| w & LOW_MASK)
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
            Err(Unavailable)
        }
    }

    /// What Redis answered for bucket `id`: kept for the snapshot.
    fn decided(
        &self,
        id: u64,
        answer: Result<BudgetAnswer, Unavailable>,
    ) -> Result<bool, Unavailable> {
        let answer = answer?;
        if id < NO_ID {
            self.seen
                .store(tag(id) | answer.tokens.min(LOW_MASK), Ordering::SeqCst);
        }
        Ok(answer.granted)
    }

    /// Sends the deposits pending after [`FLUSH_AFTER`], in a task of its
    /// own, if this thread is in a tokio runtime (else they go with the
    /// next decision), for the version in force then. One such task at a
    /// time.
    fn flush_later(this: &Arc<Self>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if this.flushing.swap(true, Ordering::SeqCst) {
            return;
        }
        let mut guard = Flushing {
            inner: Arc::clone(this),
            armed: true,
        };
        runtime.spawn(async move {
            loop {
                // A runtime without a time driver panics here: then the
                // deposits go with the next decision.
                let Ok(sleep) = std::panic::catch_unwind(|| tokio::time::sleep(FLUSH_AFTER)) else {
                    return;
                };
                sleep.await;
                let inner = &guard.inner;
                let (id, shape) = *inner.current.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(shape) = shape {
                    let deposit = inner.take(id);
                    if deposit > 0 {
                        let answer = inner.ask(&shape.ask(deposit, false), shape).await;
                        let _ = inner.decided(id, answer);
                    }
                }
                inner.flushing.store(false, Ordering::SeqCst);
                // A deposit that found the flag set meanwhile (of the
                // bucket in force now, which may be another) left its
                // whole token to this task: go on unless another took it.
                if inner.pending.load(Ordering::SeqCst) & LOW_MASK < SCALE
                    || inner.flushing.swap(true, Ordering::SeqCst)
                {
                    guard.disarm();
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
            Err(Unavailable)
        }
    }
}

/// Lets another flush start when the task that flushes ends early (its
/// runtime shut down, say); disarmed when it ends having cleared the flag
/// itself, which a newer task may have set since.
struct Flushing {
    inner: Arc<Inner>,
    armed: bool,
}

impl Flushing {
    fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for Flushing {
    fn drop(&mut self) {
        if self.armed {
            self.inner.flushing.store(false, Ordering::SeqCst);
        }
    }
}
