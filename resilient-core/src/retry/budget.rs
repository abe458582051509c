//! The retry budget: a token bucket shared by every call of one spec.
//!
//! Tokens are counted in millionths so that fractional refills (`ratio = 0.1`
//! per success) add up exactly. Every operation is a compare-and-swap loop on
//! one atomic; no lock is taken.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::time::Instant;

use super::settings::BudgetSettings;
use crate::backend::{BudgetVersion, SharedBudget};

pub(crate) const SCALE: u64 = 1_000_000;

/// The bucket's tokens: the state of a budget, which a reload keeps.
#[derive(Debug)]
pub(crate) struct Budget {
    tokens: AtomicU64,
    origin: Instant,
    /// Nanoseconds since `origin` of the last refill.
    refilled_at: AtomicU64,
}

/// A budget's settings, in the units the bucket counts in: what a reload
/// replaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BudgetParams {
    max: u64,
    initial: u64,
    per_success: u64,
    per_second: u64,
}

impl BudgetParams {
    /// The shape of a shared bucket of these settings.
    pub(crate) fn shape(&self) -> crate::backend::BudgetShape {
        crate::backend::BudgetShape {
            max: self.max,
            initial: self.initial,
            per_second: self.per_second,
        }
    }

    /// Millionths of a token a success returns.
    pub(crate) fn per_success(&self) -> u64 {
        self.per_success
    }

    pub(crate) fn of(s: &BudgetSettings) -> Self {
        let max = u64::from(s.tokens_max) * SCALE;
        Self {
            max,
            initial: u64::from(s.tokens_initial) * SCALE,
            per_success: scaled(s.ratio).min(max),
            per_second: scaled(s.min_tokens_per_second),
        }
    }
}

/// One token taken for a retry that has not started yet.
#[derive(Debug)]
#[must_use = "a withdrawal that is dropped at once gives its token back"]
pub(crate) struct Withdrawal<'a> {
    from: Source<'a>,
}

/// The bucket a token was taken from.
#[derive(Debug)]
enum Source<'a> {
    Local {
        budget: &'a Budget,
        max: u64,
        /// The millionths of a token taken.
        amount: u64,
    },
    Shared {
        budget: &'a SharedBudget,
        version: BudgetVersion,
    },
}

/// A withdrawal as plain data (see [`Withdrawal::into_token`]).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Token {
    /// From this process's bucket, of capacity `max`: `amount` millionths
    /// of a token.
    Local {
        /// The bucket's capacity.
        max: u64,
        /// The millionths of a token taken.
        amount: u64,
    },
    /// From the shared bucket of this version of the settings.
    Shared(BudgetVersion),
}

impl<'a> Withdrawal<'a> {
    /// A token the shared `budget` gave, under `version` of the settings.
    pub(crate) fn shared(budget: &'a SharedBudget, version: BudgetVersion) -> Self {
        Self {
            from: Source::Shared { budget, version },
        }
    }

    /// The retry starts: the token is spent.
    pub(crate) fn spend(self) {
        std::mem::forget(self);
    }

    /// The withdrawal as plain data: the token is out until
    /// `RetryCall::give_back` returns it.
    pub(crate) fn into_token(self) -> Token {
        let token = match self.from {
            Source::Local { max, amount, .. } => Token::Local { max, amount },
            Source::Shared { version, .. } => Token::Shared(version),
        };
        std::mem::forget(self);
        token
    }
}

impl Drop for Withdrawal<'_> {
    fn drop(&mut self) {
        match self.from {
            Source::Local {
                budget,
                max,
                amount,
            } => budget.add(amount, max),
            Source::Shared { budget, version } => budget.deposit(version, SCALE),
        }
    }
}

/// What a reload did to a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reloaded {
    /// A bucket appeared, filled with `tokens_initial`.
    Started,
    /// The bucket is gone.
    Gone,
    /// The bucket kept at most the new `tokens_max`.
    Capped,
}

impl Reloaded {
    /// The notes of a bucket that is the whole budget named `name`.
    pub(crate) fn said(name: &str, changes: &[Reloaded]) -> Vec<String> {
        changes
            .iter()
            .map(|c| match c {
                Reloaded::Started => format!("a new {name} starts with `tokens_initial`"),
                Reloaded::Gone => format!("the {name} is gone"),
                Reloaded::Capped => {
                    "the budget's tokens were capped at the new `tokens_max`".to_owned()
                }
            })
            .collect()
    }
}

/// `x` tokens in millionths, rounded.
pub(super) fn scaled(x: f64) -> u64 {
    // Validation keeps x finite and ≥ 0; `as` saturates anyway.
    (x * SCALE as f64).round() as u64
}

impl Budget {
    /// Returns the tokens of a withdrawal made into plain data
    /// ([`Withdrawal::into_token`]): `amount` millionths of a token, `max`
    /// its bucket's capacity.
    pub(crate) fn give_back(&self, max: u64, amount: u64) {
        self.add(amount, max);
    }

    /// A bucket holding no token yet (see [`reset`](Self::reset)).
    pub(crate) fn new() -> Self {
        Self {
            tokens: AtomicU64::new(0),
            origin: Instant::now(),
            refilled_at: AtomicU64::new(0),
        }
    }

    /// Fills the bucket with `p`'s initial tokens, refilled from now on.
    pub(crate) fn reset(&self, p: &BudgetParams) {
        let now = u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.refilled_at.store(now, Ordering::Release);
        self.tokens.store(p.initial, Ordering::Release);
    }

    /// A bucket filled as `p` says, or empty when there is no budget.
    pub(crate) fn filled(p: Option<&BudgetParams>) -> Self {
        let budget = Self::new();
        if let Some(p) = p {
            budget.reset(p);
        }
        budget
    }

    /// A reload of the settings that hold this budget: `had` says whether
    /// the running settings have one, `new` is the new settings' budget,
    /// and `publish` publishes them and returns the budget then in force.
    /// A budget that appears is filled before it is published, so no call
    /// sees it empty; a budget kept holds at most the new `tokens_max`.
    /// Returns what changed (see [`Reloaded::said`]).
    pub(crate) fn reload<'a>(
        &self,
        had: bool,
        new: Option<BudgetParams>,
        publish: impl FnOnce() -> Option<&'a BudgetParams>,
    ) -> Vec<Reloaded> {
        let mut changes = Vec::new();
        match (had, &new) {
            (false, Some(p)) => {
                self.reset(p);
                changes.push(Reloaded::Started);
            }
            (true, None) => changes.push(Reloaded::Gone),
            _ => {}
        }
        if let (true, Some(p)) = (had, publish()) {
            if self.cap(p) {
                changes.push(Reloaded::Capped);
            }
        }
        changes
    }

    /// Keeps at most `p`'s maximum: `true` if tokens were dropped.
    pub(crate) fn cap(&self, p: &BudgetParams) -> bool {
        self.tokens.fetch_min(p.max, Ordering::AcqRel) > p.max
    }

    /// Takes one token for a retry; `None` when the bucket holds less than
    /// one. The token goes back into the bucket if the [`Withdrawal`] is
    /// dropped before [`Withdrawal::spend`]: a call cancelled during its
    /// back-off wait never made the retry it paid for.
    pub(crate) fn try_withdraw(&self, p: &BudgetParams) -> Option<Withdrawal<'_>> {
        self.try_withdraw_cost(p, SCALE)
    }

    /// Takes `amount` millionths of a token for a retry (a cause's `cost`),
    /// as [`try_withdraw`](Self::try_withdraw) takes one token: `None` when
    /// the bucket holds less.
    pub(crate) fn try_withdraw_cost(
        &self,
        p: &BudgetParams,
        amount: u64,
    ) -> Option<Withdrawal<'_>> {
        self.refill(p);
        self.tokens
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                t.checked_sub(amount)
            })
            .ok()
            .map(|_| Withdrawal {
                from: Source::Local {
                    budget: self,
                    max: p.max,
                    amount,
                },
            })
    }

    /// Returns `ratio` tokens after a successful call.
    pub(crate) fn deposit(&self, p: &BudgetParams) {
        self.add(p.per_success, p.max);
    }

    /// Tokens in the bucket now, refill included.
    pub(crate) fn tokens(&self, p: &BudgetParams) -> f64 {
        self.refill(p);
        self.tokens.load(Ordering::Acquire) as f64 / SCALE as f64
    }

    fn add(&self, amount: u64, max: u64) {
        if amount == 0 {
            return;
        }
        // A full bucket is only read: successes on a healthy dependency do
        // not all write one shared word.
        let _ = self
            .tokens
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                (t < max).then(|| t.saturating_add(amount).min(max))
            });
    }

    fn refill(&self, p: &BudgetParams) {
        if p.per_second == 0 {
            return;
        }
        let now = u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let last = self.refilled_at.load(Ordering::Acquire);
        let elapsed = now.saturating_sub(last);
        let amount = u128::from(p.per_second) * u128::from(elapsed) / 1_000_000_000;
        let amount = u64::try_from(amount).unwrap_or(u64::MAX);
        if amount == 0 {
            return;
        }
        // The mark moves by the time paid for, not to `now`, so that the
        // fraction of a micro-token not yet added is not lost.
        let paid = u128::from(amount) * 1_000_000_000 / u128::from(p.per_second);
        let mark = last
            .saturating_add(u64::try_from(paid).unwrap_or(u64::MAX))
            .min(now);
        // Only the caller that moves the refill mark adds the tokens.
        if self
            .refilled_at
            .compare_exchange(last, mark, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.add(amount, p.max);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bucket, filled, with the parameters of these settings.
    fn budget(initial: u32, max: u32, ratio: f64, per_second: f64) -> (Budget, BudgetParams) {
        let p = BudgetParams::of(&BudgetSettings {
            ratio,
            tokens_max: max,
            tokens_initial: initial,
            min_tokens_per_second: per_second,
            backend: crate::backend::Backend::Local,
            on_backend_failure: super::super::OnBudgetBackendFailure::Deny,
        });
        let b = Budget::new();
        b.reset(&p);
        (b, p)
    }

    #[tokio::test]
    async fn withdraws_whole_tokens_until_empty() {
        let (b, p) = budget(3, 10, 0.1, 0.0);
        let taken = (0..10)
            .filter_map(|_| b.try_withdraw(&p))
            .map(Withdrawal::spend)
            .count();
        assert_eq!(taken, 3);
        assert_eq!(b.tokens(&p), 0.0);
    }

    #[tokio::test]
    async fn ten_successes_at_ratio_a_tenth_return_one_token() {
        let (b, p) = budget(0, 10, 0.1, 0.0);
        for _ in 0..9 {
            b.deposit(&p);
        }
        assert!(
            b.try_withdraw(&p).is_none(),
            "0.9 tokens are not a whole token"
        );
        b.deposit(&p);
        assert!(b.try_withdraw(&p).map(Withdrawal::spend).is_some());
        assert!(b.try_withdraw(&p).is_none());
    }

    #[tokio::test]
    async fn deposits_stop_at_tokens_max() {
        let (b, p) = budget(2, 2, 1.0, 0.0);
        for _ in 0..5 {
            b.deposit(&p);
        }
        assert_eq!(b.tokens(&p), 2.0);
    }

    #[tokio::test(start_paused = true)]
    async fn refills_per_second_on_the_paused_clock() {
        let (b, p) = budget(0, 100, 0.0, 2.0);
        assert!(b.try_withdraw(&p).is_none());
        tokio::time::advance(std::time::Duration::from_millis(500)).await;
        assert!(
            b.try_withdraw(&p).map(Withdrawal::spend).is_some(),
            "half a second at 2/s is one token"
        );
        assert!(b.try_withdraw(&p).is_none());
        tokio::time::advance(std::time::Duration::from_secs(10)).await;
        assert_eq!(b.tokens(&p), 20.0);
    }

    #[tokio::test(start_paused = true)]
    async fn frequent_refills_lose_no_fraction_of_a_token() {
        let (b, p) = budget(0, 100, 0.0, 1.0);
        // 1 token/s checked every 1999 ns: each check pays 1 micro-token and
        // leaves 999 ns unpaid, which must carry over to the next check.
        for _ in 0..2000 {
            tokio::time::advance(std::time::Duration::from_nanos(1999)).await;
            b.refill(&p);
        }
        let expected = 2000.0 * 1999.0 / 1e9;
        assert!(
            (b.tokens(&p) - expected).abs() < 2e-6,
            "{} vs {expected}",
            b.tokens(&p)
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_withdrawals_take_exactly_the_tokens_there_are() {
        let (b, p) = budget(10, 100, 0.0, 0.0);
        let (b, p) = (std::sync::Arc::new(b), std::sync::Arc::new(p));
        let tasks: Vec<_> = (0..100)
            .map(|_| {
                let (b, p) = (b.clone(), p.clone());
                tokio::spawn(async move { b.try_withdraw(&p).map(Withdrawal::spend).is_some() })
            })
            .collect();
        let mut taken = 0;
        for t in tasks {
            taken += usize::from(t.await.unwrap_or(false));
        }
        assert_eq!(taken, 10);
        assert_eq!(b.tokens(&p), 0.0);
    }
}
