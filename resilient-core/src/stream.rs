//! Streams: the attributes on a fn that returns a stream of results.
//!
//! `#[retryable]`, `#[circuit_breakable]` (keyed too), `#[timeout]`,
//! `#[concurrency_limit]`, `#[rate_limited]` and `#[fallback]` take a fn
//! (not `async`) that returns `impl Stream<Item = Result<T, E>>` (the
//! [`Stream`] trait of `futures-core`, re-exported here), or a boxed one
//! (`Pin<Box<dyn Stream<Item = Result<T, E>> [+ Send]>>`, `BoxStream`,
//! `LocalBoxStream`). The shape is recognised by its syntax: return a named
//! stream type as `impl Stream<..>`. Consume it with
//! `futures_util::StreamExt`, inside a tokio runtime with its time driver
//! on (a retry's wait and a timeout use tokio's timer). A paged listing, a
//! gRPC server stream, an SSE feed: a stream is one call that answers many
//! times, and each mechanism treats it as one call.
//!
//! ```
//! use resilient_core::stream::Stream;
//! use resilient_core::{circuit_breakable, retryable, CircuitBreakerSpec, RetrySpec};
//!
//! #[derive(RetrySpec)]
//! #[spec("resilient.retry.feed")]
//! pub struct FeedRetry;
//!
//! #[derive(CircuitBreakerSpec)]
//! #[spec("resilient.circuitbreaker.feed")]
//! pub struct FeedBreaker;
//!
//! #[derive(Debug, thiserror::Error)]
//! pub enum FeedError {
//!     #[error("feed unavailable")]
//!     Unavailable,
//!     #[error(transparent)]
//!     Resilience(#[from] resilient_core::Error),
//! }
//!
//! #[circuit_breakable(FeedBreaker)]
//! #[retryable(FeedRetry)]
//! pub fn events(from: u64) -> impl Stream<Item = Result<u64, FeedError>> {
//!     futures_util::stream::iter((from..from + 3).map(Ok))
//! }
//! ```
//!
//! # What each mechanism does with a stream
//!
//! The fn's body makes the stream when it is first polled (a stream not
//! polled takes nothing and makes nothing), and again for each retry.
//!
//! | attribute | on a stream | Kora (`Flow`) | Spring 7 (`Flux`) |
//! |---|---|---|---|
//! | `#[retryable]` | a failure before the first item makes the stream again, after the spec's wait, with fresh clones of the arguments, within `attempts`; once an item has passed, a failure ends the stream with it (no item is seen twice) | `retryWhen`: the whole flow is collected again after a failure, so the items before it come again | the publisher is subscribed again after a failure: a `Flux` that emits 1 then fails on its first two subscriptions, retried twice, gives `[1, 1, 1, 2, 3]` |
//! | `#[circuit_breakable]` | one permit per stream, taken at its first poll; its outcome is the stream's first failure, or its end (a half-open probe's: its first item); a rejected stream yields one `Err` and ends, its body makes nothing | a permit taken before `emitAll`, success recorded at completion | (no breaker) |
//! | `#[concurrency_limit]` | one place per stream, from its first poll until it ends or is dropped | (none) | `@ConcurrencyLimit` does not limit subscriptions |
//! | `#[rate_limited]` | one permit per stream, at its first poll | (none) | (no rate limiter) |
//! | `#[fallback]` | a failure before the first item that the fallback's `on`/`when` accepts replaces the stream by the fallback's: a plain fn taking the arguments named in `method` (and the error as its last parameter, if it wants it) that returns a stream of the same items; a failure after an item passes on | `.catch { emitAll(fallback(..)) }`: a failure at any point, after the items already emitted | (no fallback) |
//! | `#[timeout]` | `duration` bounds the wait for the first item, the spec's `idle` (if set) every gap between items; either ends the stream with [`Error::Timeout`] | one deadline for the whole flow, checked only when an item arrives (a stalled flow never times out) | (none) |
//!
//! An idle limit reads no clock per item: it looks at the stream every
//! quarter of `idle` (at most once a millisecond), so a stream ends between
//! `idle` and `idle` plus one such period after its last item, never
//! earlier.
//!
//! A failure is what the spec's classification says of an item, as for the
//! result of an `async fn` (with `classify = http`, a 503 response is one),
//! and a mechanism's rejection inside ends the stream with that error. A
//! stream that ends before its first item is a success. A breaker judges a
//! half-open probe's stream by its first item (a long healthy stream must
//! not keep every other call out), and a slow call by the time to the
//! first item, not the stream's whole life.
//!
//! Dropping the stream at any point gives back what it holds: its place,
//! its breaker permit, a budget token reserved for a retry that has not
//! started. A stream dropped after items ended as it went so far (a
//! consumer that takes what it needs, `take(n)`, ended a healthy stream: a
//! success; one that stops at an error, a failure); one dropped before any
//! item counts as cancelled, and for a breaker as neither.
//!
//! Each layer finds its instance in the registry in use at the stream's
//! first poll, so a stream polled outside the scope it was made in fails
//! with `NotConfigured`. A keyed layer reads its key from the arguments
//! and finds its instance when it is made: at the call if it is the
//! outermost layer, at the first poll (or each attempt, inside a retry) if
//! it is inside another. The body runs at the first poll too, so a stream
//! that borrows what the fn borrows says so in its type (`impl Stream +
//! '_`). A retry's and a timeout's timer are kept in the stream: returned
//! as `impl Stream`, it is not `Unpin` (`Box::pin` it, or use `pin!`, to
//! call `next`); the boxed forms are.
//!
//! A retry's wait, a `block` limit's wait for a place and a rate limiter's
//! reservation happen inside the stream's poll, on tokio's clock (the
//! paused clock of a test applies). The items themselves pass through with
//! no allocation and no clock read.
//!
//! `#[hedged]` and `#[chaos]` do not take a stream: each is a compile error
//! at its attribute. A retry that restarts a stream after items have
//! passed (so that the caller sees them twice, as Kora and Spring do) is
//! not offered.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

pub use futures_core::Stream;
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

use crate::circuit_breaker::{on_resilience_error, BreakerCall, Permit, PermitParts};
use crate::concurrency::LimitCall;
use crate::error::Error;
use crate::fallback::FallbackOn;
use crate::gate::{Entry, Gate, Waiting};
use crate::outcome::{self, Fail};
use crate::rate_limiter::RateCall;
use crate::retry::{Judge, RetryCall, Step};
use crate::spec::Verdict;
use crate::timeout::{TimeoutCall, TimerParts};

pin_project! {
    /// The body's stream, its errors the body's own inside the chain.
    #[doc(hidden)]
    pub struct Lift<S> {
        #[pin]
        inner: S,
    }
}

/// `inner`, the body's stream, entering the chain.
pub(crate) fn lift<S>(inner: S) -> Lift<S> {
    Lift { inner }
}

impl<S, T, E> Stream for Lift<S>
where
    S: Stream<Item = Result<T, E>>,
{
    type Item = Result<T, Fail<E>>;

    #[inline]
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.project()
            .inner
            .poll_next(cx)
            .map(|item| item.map(|r| r.map_err(Fail::Body)))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

pin_project! {
    /// The chain's stream as the fn returns it: a resilience error becomes
    /// the fn's error type.
    #[doc(hidden)]
    pub struct Lower<S, E> {
        #[pin]
        chain: S,
        wrap: fn(Error) -> E,
    }
}

/// `chain` as the fn's stream.
pub(crate) fn lower<S, E>(wrap: fn(Error) -> E, chain: S) -> Lower<S, E> {
    Lower { chain, wrap }
}

impl<S, T, E> Stream for Lower<S, E>
where
    S: Stream<Item = Result<T, Fail<E>>>,
{
    type Item = Result<T, E>;

    #[inline]
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.project();
        let wrap = *this.wrap;
        this.chain
            .poll_next(cx)
            .map(|item| item.map(|r| r.map_err(|f| f.into_error(wrap))))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.chain.size_hint()
    }
}

/// Where a layer's stream is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Not polled yet.
    Start,
    /// Waiting to start (for a place, a permit, a retry's delay).
    Waiting,
    /// Its inner stream runs.
    Running,
    /// Ended: it yields nothing more.
    Done,
}

/// What a layer has seen pass: whether an item came, and whether a
/// failure did. A stream dropped after an item ended as it went so far: a
/// consumer that takes what it needs and drops the rest (`take(n)`) ends a
/// healthy stream, not a cancelled one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Seen {
    item: bool,
    failed: bool,
}

impl Seen {
    fn saw<T, E>(&mut self, item: &Result<T, E>) {
        self.item = true;
        self.failed |= item.is_err();
    }

    /// The outcome a layer records for the stream so far, if an item came.
    fn outcome(self) -> Option<Result<(), Fail<()>>> {
        self.item.then(|| {
            if self.failed {
                Err(Fail::Body(()))
            } else {
                Ok(())
            }
        })
    }
}

pin_project! {
    /// `#[circuit_breakable]` on a stream: one permit per stream.
    #[doc(hidden)]
    pub struct BreakerStream<G, C, F, S> {
        start: Option<G>,
        call: Option<BreakerCall<'static, C>>,
        make: Option<F>,
        // The permit while the stream's outcome is not known.
        permit: Option<PermitParts>,
        seen: Seen,
        phase: Phase,
        #[pin]
        inner: Option<S>,
    }

    impl<G, C, F, S> PinnedDrop for BreakerStream<G, C, F, S> {
        fn drop(this: Pin<&mut Self>) {
            let mut this = this.project();
            // The body's stream first, as an async fn's body goes before
            // its guards.
            this.inner.set(None);
            let breaker = this.call.as_ref().and_then(BreakerCall::breaker);
            if let (Some(parts), Some(breaker)) = (this.permit.take(), breaker) {
                let permit = Permit::from_parts(breaker, parts);
                if this.seen.item {
                    // Items passed, no failure among them: a success.
                    permit.judged(Verdict::Success, parts);
                } else {
                    // Dropped before any item: counts as neither.
                    drop(permit);
                }
            }
        }
    }
}

/// A breaker's stream around what `make` makes; `start` looks its breaker
/// up at the first poll.
pub(crate) fn breaker<G, C, F, S>(start: G, make: F) -> BreakerStream<G, C, F, S> {
    BreakerStream {
        start: Some(start),
        call: None,
        make: Some(make),
        permit: None,
        seen: Seen::default(),
        phase: Phase::Start,
        inner: None,
    }
}

impl<G, C, F, S, T, E> Stream for BreakerStream<G, C, F, S>
where
    G: FnOnce() -> BreakerCall<'static, C>,
    F: FnOnce() -> S,
    S: Stream<Item = Result<T, Fail<E>>>,
    C: Fn(&Result<T, E>) -> Verdict + Copy,
{
    type Item = Result<T, Fail<E>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        if *this.phase == Phase::Start {
            *this.phase = Phase::Done;
            let (Some(start), Some(make)) = (this.start.take(), this.make.take()) else {
                return Poll::Ready(None);
            };
            let call = this.call.insert(start());
            match call.enter() {
                Ok(entered) => *this.permit = Some(entered.into_parts()),
                Err(e) => return Poll::Ready(Some(Err(Fail::Resilience(e)))),
            }
            this.inner.set(Some(make()));
            *this.phase = Phase::Running;
        }
        let Some(inner) = this.inner.as_mut().as_pin_mut() else {
            return Poll::Ready(None);
        };
        let item = ready!(inner.poll_next(cx));
        let Some(call) = this.call.as_ref() else {
            return Poll::Ready(item);
        };
        match item {
            // The outcome is known (or the breaker is disabled): pass.
            Some(outcome) if this.permit.is_none() => Poll::Ready(Some(outcome)),
            Some(outcome) => {
                let (outcome, verdict) =
                    outcome::classify(outcome, call.classify(), on_resilience_error);
                // The per-item path: one more healthy item.
                if verdict == Verdict::Success && this.seen.item {
                    return Poll::Ready(Some(outcome));
                }
                judge_item(call, this.permit, this.seen, verdict);
                Poll::Ready(Some(outcome))
            }
            None => {
                if let (Some(parts), Some(breaker)) = (this.permit.take(), call.breaker()) {
                    Permit::from_parts(breaker, parts).judged(Verdict::Success, parts);
                }
                *this.phase = Phase::Done;
                this.inner.set(None);
                Poll::Ready(None)
            }
        }
    }
}

/// A stream's first item, or a failure, under its breaker's permit: the
/// first item fixes the stream's time (and ends a half-open probe's
/// permit, good or bad); a failure ends the permit.
#[cold]
fn judge_item<C>(
    call: &BreakerCall<'static, C>,
    permit: &mut Option<PermitParts>,
    seen: &mut Seen,
    verdict: Verdict,
) {
    let (Some(parts), Some(breaker)) = (permit.as_mut(), call.breaker()) else {
        return;
    };
    parts.first_item(breaker);
    let parts = *parts;
    if !parts.probe() {
        match verdict {
            Verdict::Success => {
                seen.item = true;
                return;
            }
            // An item the classification leaves out: the permit waits for
            // a failure or the end.
            Verdict::Ignore => return,
            Verdict::Failure | Verdict::RetryAfter(_) | Verdict::Fatal => {}
        }
    }
    // A failure ends the permit; so does a half-open probe's first good
    // item: a long healthy stream must not keep the breaker half-open (and
    // every other call out) for its whole life.
    *permit = None;
    Permit::from_parts(breaker, parts).judged(verdict, parts);
}

pin_project! {
    /// `#[concurrency_limit]` and `#[rate_limited]` on a stream: one place
    /// or permit, taken at the first poll and held until the stream ends or
    /// is dropped.
    #[doc(hidden)]
    pub struct GateStream<G, C, F, S>
    where
        C: Gate,
    {
        start: Option<G>,
        call: Option<C>,
        make: Option<F>,
        held: Option<C::Parts>,
        seen: Seen,
        phase: Phase,
        waiting: Option<Waiting<C::Parts>>,
        #[pin]
        inner: Option<S>,
    }

    impl<G, C, F, S> PinnedDrop for GateStream<G, C, F, S>
    where
        C: Gate,
    {
        fn drop(this: Pin<&mut Self>) {
            let mut this = this.project();
            // The body's stream first, as an async fn's body goes before
            // its place; then the wait: a place it took is freed with it.
            this.inner.set(None);
            *this.waiting = None;
            if let (Some(parts), Some(call)) = (this.held.take(), this.call.as_ref()) {
                call.finish(parts, this.seen.outcome());
            }
        }
    }
}

/// A concurrency limit's stream around what `make` makes.
pub type LimitStream<G, F, S> = GateStream<G, LimitCall<'static>, F, S>;

/// A rate limiter's stream around what `make` makes.
pub type RateStream<G, F, S> = GateStream<G, RateCall, F, S>;

/// A gate's stream around what `make` makes; `start` makes its call (looks
/// its instance up) at the first poll.
pub(crate) fn gate<G, C: Gate, F, S>(start: G, make: F) -> GateStream<G, C, F, S> {
    GateStream {
        start: Some(start),
        call: None,
        make: Some(make),
        held: None,
        seen: Seen::default(),
        phase: Phase::Start,
        waiting: None,
        inner: None,
    }
}

impl<G, C, F, S, T, E> Stream for GateStream<G, C, F, S>
where
    G: FnOnce() -> C,
    C: Gate,
    F: FnOnce() -> S,
    S: Stream<Item = Result<T, Fail<E>>>,
{
    type Item = Result<T, Fail<E>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        loop {
            let entered = match *this.phase {
                Phase::Start => {
                    *this.phase = Phase::Done;
                    let Some(start) = this.start.take() else {
                        continue;
                    };
                    match this.call.insert(start()).enter() {
                        Entry::Ready(entered) => entered,
                        Entry::Wait(waiting) => {
                            *this.waiting = Some(waiting);
                            *this.phase = Phase::Waiting;
                            continue;
                        }
                    }
                }
                Phase::Waiting => {
                    let Some(waiting) = this.waiting.as_mut() else {
                        *this.phase = Phase::Done;
                        continue;
                    };
                    let entered = ready!(waiting.as_mut().poll(cx));
                    *this.waiting = None;
                    *this.phase = Phase::Done;
                    entered
                }
                Phase::Running => break,
                Phase::Done => return Poll::Ready(None),
            };
            match entered {
                Ok(parts) => *this.held = Some(parts),
                Err(e) => return Poll::Ready(Some(Err(Fail::Resilience(e)))),
            }
            let Some(make) = this.make.take() else {
                return Poll::Ready(None);
            };
            this.inner.set(Some(make()));
            *this.phase = Phase::Running;
        }
        let Some(inner) = this.inner.as_mut().as_pin_mut() else {
            return Poll::Ready(None);
        };
        let item = ready!(inner.poll_next(cx));
        match &item {
            Some(outcome) => this.seen.saw(outcome),
            None => {
                *this.phase = Phase::Done;
                this.inner.set(None);
                if let (Some(parts), Some(call)) = (this.held.take(), this.call.as_ref()) {
                    call.finish(parts, Some(this.seen.outcome().unwrap_or(Ok(()))));
                }
            }
        }
        Poll::Ready(item)
    }
}

pin_project! {
    /// `#[retryable]` on a stream: made again after a failure before its
    /// first item.
    #[doc(hidden)]
    pub struct RetryStream<G, F, S, T, E, Tr, J> {
        start: Option<G>,
        call: Option<RetryCall<'static, T, E, Tr, J>>,
        make: F,
        phase: Phase,
        // Whether an item has passed: a failure then ends the stream.
        passed: bool,
        // The budget token of the retry being waited for, given back if
        // the stream is dropped first.
        token: Option<crate::retry::budget::Token>,
        #[pin]
        sleep: Option<Sleep>,
        #[pin]
        inner: Option<S>,
    }

    impl<G, F, S, T, E, Tr, J> PinnedDrop for RetryStream<G, F, S, T, E, Tr, J> {
        fn drop(this: Pin<&mut Self>) {
            let mut this = this.project();
            this.inner.set(None);
            if let (Some(token), Some(call)) = (this.token.take(), this.call.as_ref()) {
                call.give_back(token);
            }
        }
    }
}

/// A retry's stream around what `make` makes, once per attempt; `start`
/// starts the retry's call at the first poll.
pub(crate) fn retry<G, F, S, T, E, Tr, J>(start: G, make: F) -> RetryStream<G, F, S, T, E, Tr, J> {
    RetryStream {
        start: Some(start),
        call: None,
        make,
        phase: Phase::Start,
        passed: false,
        token: None,
        sleep: None,
        inner: None,
    }
}

impl<G, F, S, T, E, Tr, J> Stream for RetryStream<G, F, S, T, E, Tr, J>
where
    G: FnOnce() -> RetryCall<'static, T, E, Tr, J>,
    F: FnMut() -> S,
    S: Stream<Item = Result<T, Fail<E>>>,
    Tr: Default,
    J: Judge<T, E>,
{
    type Item = Result<T, Fail<E>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        loop {
            match *this.phase {
                Phase::Start => {
                    *this.phase = Phase::Done;
                    let Some(start) = this.start.take() else {
                        continue;
                    };
                    let call = this.call.insert(start());
                    if let Some(fail) = call.refused() {
                        return Poll::Ready(Some(Err(fail)));
                    }
                    this.inner.set(Some((this.make)()));
                    *this.phase = Phase::Running;
                }
                Phase::Waiting => {
                    if let Some(sleep) = this.sleep.as_mut().as_pin_mut() {
                        ready!(sleep.poll(cx));
                    }
                    this.sleep.set(None);
                    // The retry starts: its token is spent.
                    *this.token = None;
                    this.inner.set(Some((this.make)()));
                    *this.phase = Phase::Running;
                }
                Phase::Running => {
                    let Some(inner) = this.inner.as_mut().as_pin_mut() else {
                        *this.phase = Phase::Done;
                        continue;
                    };
                    let item = ready!(inner.poll_next(cx));
                    // The per-item path: after the first item, pass; a
                    // failure then ends the stream (it is not retried).
                    if *this.passed {
                        if !matches!(item, Some(Ok(_))) {
                            *this.phase = Phase::Done;
                            this.inner.set(None);
                        }
                        return Poll::Ready(item);
                    }
                    let Some(call) = this.call.as_mut() else {
                        *this.phase = Phase::Done;
                        return Poll::Ready(item);
                    };
                    let Some(attempt) = item else {
                        // Ended before its first item: a success.
                        call.succeeded_empty();
                        *this.phase = Phase::Done;
                        this.inner.set(None);
                        return Poll::Ready(None);
                    };
                    let delay = match call.step(attempt) {
                        Step::Done(out) => {
                            *this.passed = true;
                            if out.is_err() {
                                // The failure retry gave up on: it ends the stream.
                                *this.phase = Phase::Done;
                                this.inner.set(None);
                            }
                            return Poll::Ready(Some(out));
                        }
                        Step::Wait(wait) => {
                            let (delay, token) = wait.into_parts();
                            *this.token = token;
                            delay
                        }
                    };
                    this.inner.set(None);
                    this.sleep.set(Some(tokio::time::sleep(delay)));
                    *this.phase = Phase::Waiting;
                }
                Phase::Done => return Poll::Ready(None),
            }
        }
    }
}

pin_project! {
    /// `#[timeout]` on a stream: a limit to its first item (`duration`) and,
    /// if set, between items (`idle`).
    #[doc(hidden)]
    pub struct TimeoutStream<G, F, S> {
        start: Option<G>,
        call: Option<TimeoutCall<'static>>,
        make: Option<F>,
        // The timer while the stream's outcome is not counted.
        timer: Option<TimerParts>,
        phase: Phase,
        seen: Seen,
        // Items seen, and as many when the idle timer last looked.
        items: u64,
        looked: u64,
        // When the stream was last seen active: the time of a look that
        // found new items, never earlier than the items it found.
        active: Option<Instant>,
        #[pin]
        sleep: Option<Sleep>,
        #[pin]
        inner: Option<S>,
    }

    impl<G, F, S> PinnedDrop for TimeoutStream<G, F, S> {
        fn drop(this: Pin<&mut Self>) {
            let mut this = this.project();
            this.inner.set(None);
            if let (Some(timer), Some(call)) = (this.timer.take(), this.call.as_ref()) {
                let failed = this.seen.item.then_some(this.seen.failed);
                call.ended_parts(timer, failed);
            }
        }
    }
}

/// A timeout's stream around what `make` makes; `start` looks its spec up
/// at the first poll.
pub(crate) fn timeout<G, F, S>(start: G, make: F) -> TimeoutStream<G, F, S> {
    TimeoutStream {
        start: Some(start),
        call: None,
        make: Some(make),
        timer: None,
        phase: Phase::Start,
        seen: Seen::default(),
        items: 0,
        looked: 0,
        active: None,
        sleep: None,
        inner: None,
    }
}

/// How often an idle limit looks at a stream: four times per `idle`, and
/// at most once a millisecond. A stream idle for `idle` ends at the first
/// look after that: between `idle` and `idle` + one period after its last
/// item, never earlier.
fn idle_period(idle: Duration) -> Duration {
    (idle / 4).max(Duration::from_millis(1)).min(idle)
}

impl<G, F, S, T, E> Stream for TimeoutStream<G, F, S>
where
    G: FnOnce() -> TimeoutCall<'static>,
    F: FnOnce() -> S,
    S: Stream<Item = Result<T, Fail<E>>>,
{
    type Item = Result<T, Fail<E>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        if *this.phase == Phase::Start {
            *this.phase = Phase::Done;
            let (Some(start), Some(make)) = (this.start.take(), this.make.take()) else {
                return Poll::Ready(None);
            };
            let call = this.call.insert(start());
            match call.start_parts() {
                Ok(timer) => *this.timer = timer,
                Err(e) => return Poll::Ready(Some(Err(Fail::Resilience(e)))),
            }
            this.inner.set(Some(make()));
            *this.phase = Phase::Running;
        }
        let Some(inner) = this.inner.as_mut().as_pin_mut() else {
            return Poll::Ready(None);
        };
        let Some(timer) = this.timer.as_ref() else {
            // Disabled, or counted: the items pass as they come.
            let item = ready!(inner.poll_next(cx));
            if item.is_none() {
                *this.phase = Phase::Done;
                this.inner.set(None);
            }
            return Poll::Ready(item);
        };
        if let Poll::Ready(item) = inner.poll_next(cx) {
            match &item {
                Some(outcome) if *this.items > 0 => {
                    // The per-item path: count it.
                    this.seen.failed |= outcome.is_err();
                    *this.items += 1;
                }
                Some(outcome) => {
                    // The first item: its limit is met; the idle limit (if
                    // any) starts, from the one clock read it needs.
                    this.seen.saw(outcome);
                    match timer.idle {
                        Some(idle) => {
                            let now = Instant::now();
                            *this.active = Some(now);
                            let at = now + idle_period(idle);
                            this.sleep.set(Some(tokio::time::sleep_until(at)));
                        }
                        None => {
                            // Nothing more to time; counted at the end.
                            this.sleep.set(None);
                        }
                    }
                    *this.items += 1;
                }
                None => {
                    let timer = *timer;
                    let Some(call) = this.call.as_ref() else {
                        return Poll::Ready(None);
                    };
                    *this.phase = Phase::Done;
                    this.inner.set(None);
                    this.sleep.set(None);
                    *this.timer = None;
                    call.ended_parts(timer, Some(this.seen.failed));
                }
            }
            return Poll::Ready(item);
        }
        let timer = *timer;
        let Some(call) = this.call.as_ref() else {
            return Poll::Pending;
        };
        if this.sleep.is_none() && *this.items == 0 {
            // Armed at the first wait for the first item, as a call's timer.
            this.sleep.set(Some(tokio::time::sleep(timer.duration)));
        }
        loop {
            let Some(sleep) = this.sleep.as_mut().as_pin_mut() else {
                return Poll::Pending;
            };
            ready!(sleep.poll(cx));
            let after = match timer.idle {
                Some(idle) if *this.items > 0 => {
                    // One clock read per look, never per item: the items
                    // seen since the last look came at or before `now` (a
                    // consumer slower than the stream may take them long
                    // after the timer's deadline).
                    let now = Instant::now();
                    if *this.items != *this.looked {
                        *this.looked = *this.items;
                        *this.active = Some(now);
                    }
                    let active = this.active.unwrap_or(now);
                    if now.saturating_duration_since(active) < idle {
                        let next = now + idle_period(idle);
                        if let Some(sleep) = this.sleep.as_mut().as_pin_mut() {
                            sleep.reset(next);
                        }
                        continue;
                    }
                    idle
                }
                _ => timer.duration,
            };
            *this.phase = Phase::Done;
            this.inner.set(None);
            this.sleep.set(None);
            *this.timer = None;
            let e = call.timed_out_parts(timer, after);
            return Poll::Ready(Some(Err(Fail::Resilience(e))));
        }
    }
}

pin_project! {
    /// `#[fallback]` on a stream: a failure before the first item (that the
    /// fallback's `on` takes) replaces the stream by the fallback's.
    #[doc(hidden)]
    pub struct FallbackStream<F, S, G, R, E> {
        fn_name: &'static str,
        on: FallbackOn<E>,
        wrap: fn(Error) -> E,
        make: Option<F>,
        fallback: Option<G>,
        phase: Phase,
        passed: bool,
        #[pin]
        inner: Option<S>,
        #[pin]
        replacement: Option<R>,
    }
}

/// A fallback's stream around what `make` makes; `fallback` makes the
/// replacement from the error it answers.
pub(crate) fn fallback<F, S, G, R, E>(
    fn_name: &'static str,
    on: FallbackOn<E>,
    wrap: fn(Error) -> E,
    make: F,
    fallback: G,
) -> FallbackStream<F, S, G, R, E> {
    FallbackStream {
        fn_name,
        on,
        wrap,
        make: Some(make),
        fallback: Some(fallback),
        phase: Phase::Start,
        passed: false,
        inner: None,
        replacement: None,
    }
}

impl<F, S, G, R, T, E> Stream for FallbackStream<F, S, G, R, E>
where
    F: FnOnce() -> S,
    S: Stream<Item = Result<T, Fail<E>>>,
    G: FnOnce(E) -> R,
    R: Stream<Item = Result<T, Fail<E>>>,
{
    type Item = Result<T, Fail<E>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        if *this.phase == Phase::Start {
            let Some(make) = this.make.take() else {
                *this.phase = Phase::Done;
                return Poll::Ready(None);
            };
            this.inner.set(Some(make()));
            *this.phase = Phase::Running;
        }
        if let Some(replacement) = this.replacement.as_mut().as_pin_mut() {
            let item = ready!(replacement.poll_next(cx));
            if item.is_none() {
                *this.phase = Phase::Done;
                this.replacement.set(None);
            }
            return Poll::Ready(item);
        }
        let Some(inner) = this.inner.as_mut().as_pin_mut() else {
            return Poll::Ready(None);
        };
        let item = ready!(inner.poll_next(cx));
        let Some(outcome) = item else {
            *this.phase = Phase::Done;
            this.inner.set(None);
            return Poll::Ready(None);
        };
        if *this.passed {
            return Poll::Ready(Some(outcome));
        }
        *this.passed = true;
        match crate::fallback::decide(this.fn_name, this.on, *this.wrap, outcome) {
            Ok(outcome) => Poll::Ready(Some(outcome)),
            Err(error) => {
                this.inner.set(None);
                let Some(fallback) = this.fallback.take() else {
                    *this.phase = Phase::Done;
                    return Poll::Ready(None);
                };
                this.replacement.set(Some(fallback(error)));
                let Some(replacement) = this.replacement.as_mut().as_pin_mut() else {
                    return Poll::Ready(None);
                };
                let item = ready!(replacement.poll_next(cx));
                if item.is_none() {
                    *this.phase = Phase::Done;
                    this.replacement.set(None);
                }
                Poll::Ready(item)
            }
        }
    }
}

/// What the fallback of a stream fn may return: a stream of the annotated
/// fn's items.
#[diagnostic::on_unimplemented(
    message = "the fallback of a stream fn returns `{Self}`, not a stream of the annotated fn's items",
    label = "the fallback of a stream fn must return a stream of `Result<{T}, {E}>`",
    note = "a stream fn's fallback is a plain fn that returns a stream with the annotated fn's `Item` type"
)]
pub trait StreamFallbackOutput<T, E, M> {
    /// The replacement stream.
    type Stream: Stream<Item = Result<T, E>>;
    /// The output as the replacement stream.
    fn into_stream(self) -> Self::Stream;
}

/// The marker of [`StreamFallbackOutput`]'s one impl that applies.
#[doc(hidden)]
#[derive(Debug)]
pub enum AStream {}

/// The marker of its impl that never applies.
#[doc(hidden)]
#[derive(Debug)]
pub enum NoStream {}

/// Implemented by no type: see [`StreamFallbackOutput`]'s second impl.
#[doc(hidden)]
pub trait Never {}

// Two impls for any type, told apart by their bounds only: with a wrong
// output, rustc finds neither and reports it once, with the message above,
// instead of taking the one whose header fits and reporting its bound again
// wherever the stream is used.
impl<S, T, E> StreamFallbackOutput<T, E, AStream> for S
where
    S: Stream<Item = Result<T, E>>,
{
    type Stream = S;

    fn into_stream(self) -> S {
        self
    }
}

impl<X, T, E> StreamFallbackOutput<T, E, NoStream> for X
where
    X: Never,
{
    type Stream = NoItems<Result<T, E>>;

    fn into_stream(self) -> Self::Stream {
        // Unreachable: no type implements `Never`.
        NoItems(std::marker::PhantomData)
    }
}

/// A stream of nothing (for the impl that never applies).
#[doc(hidden)]
#[derive(Debug)]
pub struct NoItems<T>(std::marker::PhantomData<fn() -> T>);

impl<T> Stream for NoItems<T> {
    type Item = T;

    fn poll_next(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<T>> {
        Poll::Ready(None)
    }
}
