//! The retry budget: a token bucket shared by every call of one spec.
//!
//! Tokens are counted in millionths so that fractional refills (`ratio = 0.1`
//! per success) add up exactly. Every operation is a compare-and-swap loop on
//! one atomic; no lock is taken.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::time::Instant;

use super::settings::BudgetSettings;

const SCALE: u64 = 1_000_000;

#[derive(Debug)]
pub(crate) struct Budget {
    tokens: AtomicU64,
    max: u64,
    per_success: u64,
    per_second: u64,
    origin: Instant,
    /// Nanoseconds since `origin` of the last refill.
    refilled_at: AtomicU64,
}

/// One token taken for a retry that has not started yet.
#[derive(Debug)]
#[must_use = "a withdrawal that is dropped at once gives its token back"]
pub(crate) struct Withdrawal<'a> {
    budget: &'a Budget,
}

impl Withdrawal<'_> {
    /// The retry starts: the token is spent.
    pub(crate) fn spend(self) {
        std::mem::forget(self);
    }
}

impl Drop for Withdrawal<'_> {
    fn drop(&mut self) {
        self.budget.add(SCALE);
    }
}

fn scaled(x: f64) -> u64 {
    // Validation keeps x finite and ≥ 0; `as` saturates anyway.
    (x * SCALE as f64).round() as u64
}

impl Budget {
    pub(crate) fn new(s: &BudgetSettings) -> Self {
        let max = u64::from(s.tokens_max) * SCALE;
        Self {
            tokens: AtomicU64::new(u64::from(s.tokens_initial) * SCALE),
            max,
            per_success: scaled(s.ratio).min(max),
            per_second: scaled(s.min_tokens_per_second),
            origin: Instant::now(),
            refilled_at: AtomicU64::new(0),
        }
    }

    /// Takes one token for a retry; `None` when the bucket holds less than
    /// one. The token goes back into the bucket if the [`Withdrawal`] is
    /// dropped before [`Withdrawal::spend`]: a call cancelled during its
    /// back-off wait never made the retry it paid for.
    pub(crate) fn try_withdraw(&self) -> Option<Withdrawal<'_>> {
        self.refill();
        self.tokens
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                t.checked_sub(SCALE)
            })
            .ok()
            .map(|_| Withdrawal { budget: self })
    }

    /// Returns `ratio` tokens after a successful call.
    pub(crate) fn deposit(&self) {
        self.add(self.per_success);
    }

    /// Tokens in the bucket now, refill included.
    pub(crate) fn tokens(&self) -> f64 {
        self.refill();
        self.tokens.load(Ordering::Acquire) as f64 / SCALE as f64
    }

    fn add(&self, amount: u64) {
        if amount == 0 {
            return;
        }
        let max = self.max;
        // A full bucket is only read: successes on a healthy dependency do
        // not all write one shared word.
        let _ = self
            .tokens
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                (t < max).then(|| t.saturating_add(amount).min(max))
            });
    }

    fn refill(&self) {
        if self.per_second == 0 {
            return;
        }
        let now = u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let last = self.refilled_at.load(Ordering::Acquire);
        let elapsed = now.saturating_sub(last);
        let amount = u128::from(self.per_second) * u128::from(elapsed) / 1_000_000_000;
        let amount = u64::try_from(amount).unwrap_or(u64::MAX);
        if amount == 0 {
            return;
        }
        // The mark moves by the time paid for, not to `now`, so that the
        // fraction of a micro-token not yet added is not lost.
        let paid = u128::from(amount) * 1_000_000_000 / u128::from(self.per_second);
        let mark = last
            .saturating_add(u64::try_from(paid).unwrap_or(u64::MAX))
            .min(now);
        // Only the caller that moves the refill mark adds the tokens.
        if self
            .refilled_at
            .compare_exchange(last, mark, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.add(amount);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(initial: u32, max: u32, ratio: f64, per_second: f64) -> Budget {
        Budget::new(&BudgetSettings {
            ratio,
            tokens_max: max,
            tokens_initial: initial,
            min_tokens_per_second: per_second,
        })
    }

    #[tokio::test]
    async fn withdraws_whole_tokens_until_empty() {
        let b = budget(3, 10, 0.1, 0.0);
        let taken = (0..10)
            .filter_map(|_| b.try_withdraw())
            .map(Withdrawal::spend)
            .count();
        assert_eq!(taken, 3);
        assert_eq!(b.tokens(), 0.0);
    }

    #[tokio::test]
    async fn ten_successes_at_ratio_a_tenth_return_one_token() {
        let b = budget(0, 10, 0.1, 0.0);
        for _ in 0..9 {
            b.deposit();
        }
        assert!(
            b.try_withdraw().is_none(),
            "0.9 tokens are not a whole token"
        );
        b.deposit();
        assert!(b.try_withdraw().map(Withdrawal::spend).is_some());
        assert!(b.try_withdraw().is_none());
    }

    #[tokio::test]
    async fn deposits_stop_at_tokens_max() {
        let b = budget(2, 2, 1.0, 0.0);
        for _ in 0..5 {
            b.deposit();
        }
        assert_eq!(b.tokens(), 2.0);
    }

    #[tokio::test(start_paused = true)]
    async fn refills_per_second_on_the_paused_clock() {
        let b = budget(0, 100, 0.0, 2.0);
        assert!(b.try_withdraw().is_none());
        tokio::time::advance(std::time::Duration::from_millis(500)).await;
        assert!(
            b.try_withdraw().map(Withdrawal::spend).is_some(),
            "half a second at 2/s is one token"
        );
        assert!(b.try_withdraw().is_none());
        tokio::time::advance(std::time::Duration::from_secs(10)).await;
        assert_eq!(b.tokens(), 20.0);
    }

    #[tokio::test(start_paused = true)]
    async fn frequent_refills_lose_no_fraction_of_a_token() {
        let b = budget(0, 100, 0.0, 1.0);
        // 1 token/s checked every 1999 ns: each check pays 1 micro-token and
        // leaves 999 ns unpaid, which must carry over to the next check.
        for _ in 0..2000 {
            tokio::time::advance(std::time::Duration::from_nanos(1999)).await;
            b.refill();
        }
        let expected = 2000.0 * 1999.0 / 1e9;
        assert!(
            (b.tokens() - expected).abs() < 2e-6,
            "{} vs {expected}",
            b.tokens()
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_withdrawals_take_exactly_the_tokens_there_are() {
        let b = std::sync::Arc::new(budget(10, 100, 0.0, 0.0));
        let tasks: Vec<_> = (0..100)
            .map(|_| {
                let b = b.clone();
                tokio::spawn(async move { b.try_withdraw().map(Withdrawal::spend).is_some() })
            })
            .collect();
        let mut taken = 0;
        for t in tasks {
            taken += usize::from(t.await.unwrap_or(false));
        }
        assert_eq!(taken, 10);
        assert_eq!(b.tokens(), 0.0);
    }
}
