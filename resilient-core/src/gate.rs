//! What a concurrency limit and a rate limiter have in common for a call
//! that is not an `async fn`'s body: a stream (see [`crate::stream`]) or a
//! tower service's response future. Each lets the call in once, at once or
//! after a wait, and is told at the end how it went.

use std::future::Future;
use std::pin::Pin;

#[cfg(feature = "tower")]
use crate::chaos::{ChaosCall, Step};
#[cfg(all(feature = "tower", feature = "http"))]
use crate::concurrency::Attempt;
use crate::concurrency::{Enter, FullParts, Held, HeldParts, LimitCall};
use crate::error::Error;
use crate::outcome::Fail;
use crate::rate_limiter::{Granted, GrantedParts, RateCall, ReservedParts};

/// A wait before a call or stream starts (for a place, for a permit),
/// boxed: only one that must wait pays for it.
pub(crate) type Waiting<P> = Pin<Box<dyn Future<Output = Result<P, Error>> + Send>>;

/// How a gate lets a call in: at once (or turned away), or after a wait.
pub(crate) enum Entry<P> {
    Ready(Result<P, Error>),
    Wait(Waiting<P>),
}

/// A mechanism that lets a call in once and is told at the end how it
/// went: a concurrency limit's place, a rate limiter's permit. What the
/// call holds between polls is `Parts`, plain data beside the instance the
/// gate owns: a stream's layer and a tower layer's response future keep
/// them so, where an `async fn` keeps the guard itself.
pub(crate) trait Gate {
    type Parts: Copy + Send + Sync;

    /// A place or permit, now or after a wait.
    fn enter(&self) -> Entry<Self::Parts>;

    /// Gives back what `parts` hold, counting `outcome` (`None`: the stream
    /// was dropped before any item, cancelled).
    fn finish(&self, parts: Self::Parts, outcome: Option<Result<(), Fail<()>>>);
}

/// A call whose wait was handed out but not started: a wait future not
/// polled yet holds only plain data, so this gives back what the call took
/// (a reserved permit) and counts it as cancelled, if the wait never starts
/// (a tower response future dropped before its first poll).
struct Unstarted<C: Abandon> {
    call: C,
    parts: C::WaitParts,
    armed: bool,
}

/// A call that can give back a wait it never started.
trait Abandon {
    type WaitParts: Copy;

    fn abandon(&self, parts: Self::WaitParts);
}

impl<C: Abandon> Unstarted<C> {
    fn new(call: C, parts: C::WaitParts) -> Self {
        Self {
            call,
            parts,
            armed: true,
        }
    }

    /// The wait starts: from here its own guard answers for it.
    fn start(&mut self) -> C::WaitParts {
        self.armed = false;
        self.parts
    }
}

impl<C: Abandon> Drop for Unstarted<C> {
    fn drop(&mut self) {
        if self.armed {
            self.call.abandon(self.parts);
        }
    }
}

impl Abandon for LimitCall<'static> {
    type WaitParts = FullParts;

    fn abandon(&self, parts: FullParts) {
        self.abandon_wait(parts);
    }
}

impl Abandon for RateCall {
    type WaitParts = ReservedParts;

    fn abandon(&self, parts: ReservedParts) {
        self.abandon_wait(parts);
    }
}

impl Gate for LimitCall<'static> {
    type Parts = HeldParts;

    #[inline(always)]
    fn enter(&self) -> Entry<HeldParts> {
        match self.try_enter() {
            Enter::Ready(entered) => Entry::Ready(entered.map(Held::into_parts)),
            Enter::Wait(full) => limit_wait(self, full.into_parts()),
        }
    }

    #[inline]
    fn finish(&self, parts: HeldParts, outcome: Option<Result<(), Fail<()>>>) {
        if let Some(limiter) = self.limiter() {
            let mut held = Held::from_parts(limiter, parts);
            if let Some(outcome) = outcome {
                let _ = held.exit(outcome);
            }
        }
    }
}

/// The wait of a limit's call for a place (a full limit's `block`
/// policy): out of line, so that the call let in at once stays small.
#[cold]
#[inline(never)]
fn limit_wait(call: &LimitCall<'static>, full: FullParts) -> Entry<HeldParts> {
    let mut unstarted = Unstarted::new(call.duplicate(), full);
    Entry::Wait(Box::pin(async move {
        let parts = unstarted.start();
        unstarted
            .call
            .wait_from_parts(parts)
            .await
            .map(Held::into_parts)
    }))
}

/// The wait of a rate limiter's call for a reserved permit: out of line,
/// as [`limit_wait`].
#[cold]
#[inline(never)]
fn rate_wait(call: &RateCall, reserved: ReservedParts) -> Entry<GrantedParts> {
    let mut unstarted = Unstarted::new(call.duplicate(), reserved);
    Entry::Wait(Box::pin(async move {
        let parts = unstarted.start();
        unstarted
            .call
            .wait_from_parts(parts)
            .await
            .map(Granted::into_parts)
    }))
}

/// A concurrency limit's call as a [`Gate`] whose type has no lifetime: a
/// tower layer's response future names it, and a future spawned with it
/// must be `Send` for every lifetime the compiler erases in its type.
#[cfg(feature = "tower")]
#[doc(hidden)]
pub struct LimitGate(pub(crate) LimitCall<'static>);

#[cfg(feature = "tower")]
impl Gate for LimitGate {
    type Parts = HeldParts;

    #[inline(always)]
    fn enter(&self) -> Entry<HeldParts> {
        self.0.enter()
    }

    #[inline]
    fn finish(&self, parts: HeldParts, outcome: Option<Result<(), Fail<()>>>) {
        self.0.finish(parts, outcome);
    }
}

/// A concurrency limit's call for a request that said what attempt it is
/// (its `retry_header`, read by the layers on `http::Request`s applied with
/// `reading_retry_header`): as [`LimitGate`], but a retry is admitted as
/// the spec's `retry_header` and `retry_share` say.
#[cfg(all(feature = "tower", feature = "http"))]
#[doc(hidden)]
pub struct AnnouncedGate(pub(crate) LimitCall<'static>, pub(crate) Attempt);

#[cfg(all(feature = "tower", feature = "http"))]
impl AnnouncedGate {
    /// The gate of `call` for a request with `headers`: reads the header
    /// only if the spec sets one. A request sent again by a retry above
    /// (a stack's retry part, a retry layer) is a retry too, whatever its
    /// header says: the copy a retry sends carries the header the first
    /// attempt had, if any.
    #[inline(always)]
    pub(crate) fn new(call: LimitCall<'static>, headers: &http::HeaderMap) -> Self {
        let attempt = match call.retry_header() {
            None => Attempt::Unread,
            Some(_) if crate::retry::current_attempt().is_some() => Attempt::Retry,
            Some(name) => Attempt::of(headers.get(name)),
        };
        Self(call, attempt)
    }
}

#[cfg(all(feature = "tower", feature = "http"))]
impl Gate for AnnouncedGate {
    type Parts = HeldParts;

    #[inline(always)]
    fn enter(&self) -> Entry<HeldParts> {
        match self.0.try_enter_as(self.1) {
            Enter::Ready(entered) => Entry::Ready(entered.map(Held::into_parts)),
            Enter::Wait(full) => limit_wait(&self.0, full.into_parts()),
        }
    }

    #[inline]
    fn finish(&self, parts: HeldParts, outcome: Option<Result<(), Fail<()>>>) {
        self.0.finish(parts, outcome);
    }
}

impl Gate for RateCall {
    type Parts = GrantedParts;

    #[inline(always)]
    fn enter(&self) -> Entry<GrantedParts> {
        match self.try_enter() {
            Enter::Ready(entered) => Entry::Ready(entered.map(Granted::into_parts)),
            Enter::Wait(reserved) => rate_wait(self, reserved.into_parts()),
        }
    }

    #[inline]
    fn finish(&self, parts: GrantedParts, outcome: Option<Result<(), Fail<()>>>) {
        if let Some(limiter) = self.limiter() {
            let mut granted = Granted::from_parts(limiter, parts);
            if let Some(outcome) = outcome {
                let _ = granted.exit(outcome);
            }
        }
    }
}

/// A chaos spec's call as a [`Gate`], for its tower layer: the request
/// draws in `call`; one it lets through runs the inner service at once or
/// after the injected latency, one it fails answers with
/// [`Error::Injected`]. It holds nothing while the request runs. Counted
/// as the draw goes: a latency and an error without one when drawn (in
/// `call`, so also for a response future dropped unpolled), an error drawn
/// with a latency when it is delivered after it.
#[cfg(feature = "tower")]
#[doc(hidden)]
pub struct ChaosGate(pub(crate) ChaosCall<'static>);

#[cfg(feature = "tower")]
impl Gate for ChaosGate {
    type Parts = ();

    #[inline]
    fn enter(&self) -> Entry<()> {
        // A layer has no `outcome = ..` to return instead of the call.
        match self.0.try_enter(false) {
            Step::Ready(drawn) => Entry::Ready(drawn.map(drop)),
            Step::Wait(delay) => {
                let call = self.0.duplicate();
                Entry::Wait(Box::pin(async move { call.wait(delay).await.map(drop) }))
            }
        }
    }

    #[inline]
    fn finish(&self, (): (), _outcome: Option<Result<(), Fail<()>>>) {}
}
