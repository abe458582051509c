//! A whole stack of specs as one layer: [`StackLayer`].
//!
//! # Design
//!
//! tower composes one layer per mechanism (`ServiceBuilder::layer`, each
//! layer a service around the next, each service with its own response
//! future inside the one outside it). That is the right shape for
//! unrelated middleware, and it is what the single-spec layers of this
//! crate give ([`Layered::layer`](super::Layered::layer)); but a stack of
//! four resilience specs then builds four futures, each moved into the
//! one outside it, each dropped on its own, each with its own state for
//! "refused", "running" and "done", and each layer turns a rejection into
//! the service's error and back (to tell it from the service's own).
//! seatbelt writes its stack as a tuple of layers ending in the operation,
//! but each layer is still a service with a future of its own around the
//! next, and pays a smaller share of the same cost.
//!
//! An attribute chain (`#[retryable] #[circuit_breakable] ...`) is one
//! state machine instead: the macros nest the mechanisms' calls in one
//! `async fn`, and a rejection stays a [`crate::Error`] beside the body's
//! error ([`Fail`]) until the chain ends. [`StackLayer`] is that for
//! tower: an ordered list of specs, outermost first, as the attributes are
//! written, built like the registry (`.spec::<PetRetry>()`, one call per
//! spec), run as **one** response future whose state is one struct with a
//! part per spec. A request passes each spec's admission in order, the
//! inner service is called once all let it in, and its outcome passes
//! each spec back, innermost first, as in the attribute chain: the same
//! nesting, and the same counting (a breaker ignores a limit's rejection,
//! a retry retries a timeout inside it).
//!
//! The list is a builder rather than a tuple type or a derive: a keyed
//! spec takes its key from the request (`.keyed::<HostBreaker>(|req|
//! ..)`), which a closure says where a type could not, and the builder
//! reads in the order of `ServiceBuilder` (outermost first) and of
//! `Registry::builder().spec::<S>()`. The same value is a reqwest
//! middleware (feature `reqwest-middleware`).
//!
//! Like the single-spec layers, a stack's type names the request type of
//! the services it layers (`StackLayer<L, Req>`): a key is read from a
//! `&Req`, so the stack must know `Req` anyway, and everything the layered
//! service needs is then checked where the layer is applied.
//!
//! A request is admitted at the response future's first poll, not in
//! `call`: `call` moves the ready inner service into the future (leaving a
//! clone in its place, tower's convention for a service that is called
//! later), so the service must be `Clone`. A future dropped before its
//! first poll has taken nothing.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use pin_project_lite::pin_project;
use tokio::task::Unconstrained;
use tokio::time::Sleep;
use tower_service::Service;

use super::gate::{waiter, Waiter};
use super::retry::LayerJudge;
use super::LayerError;
#[cfg(feature = "http")]
use super::RequestHeaders;
use crate::chaos::{ChaosCall, ChaosSpec};
use crate::circuit_breaker::{
    on_resilience_error, BreakerCall, CircuitBreakerSpec, Permit, PermitParts,
};
use crate::concurrency::{ConcurrencyLimitSpec, LimitCall};
use crate::error::Error;
#[cfg(feature = "http")]
use crate::gate::AnnouncedGate;
use crate::gate::{ChaosGate, Entry, Gate, LimitGate};
use crate::keyed::KeyRef;
use crate::outcome::Fail;
use crate::rate_limiter::{RateCall, RateLimiterSpec};
use crate::registry::{Key, Mechanism, Shared, Spec};
use crate::retry::{Exhaustion, RetryCall, RetrySpec, Step};
use crate::spec::Classify;
use crate::telemetry::Outcome;
use crate::timeout::{TimeoutCall, TimeoutSpec, TimerParts};

/// A stack's outcome between its specs: the inner service's error, or a
/// spec's [`Error`], kept apart until the stack ends (as in an attribute
/// chain).
pub type StackOut<T, E> = Result<T, Fail<E>>;

/// The outcome of service `Svc` inside a stack.
type Out<Svc, Req> = StackOut<<Svc as Service<Req>>::Response, <Svc as Service<Req>>::Error>;

/// Specs run as one tower layer, outermost first, and as one response
/// future; also a reqwest middleware (feature `reqwest-middleware`). See
/// the guide's [one layer for a whole
/// stack](crate::guide::tower#one-layer-for-a-whole-stack).
///
/// ```
/// use resilient_core::layer::StackLayer;
/// use resilient_core::{BoxError, CircuitBreakerSpec, RetrySpec, TimeoutSpec};
/// use tower::{service_fn, ServiceBuilder};
///
/// #[derive(RetrySpec)]
/// #[spec("resilient.retry.pet")]
/// pub struct PetRetry;
///
/// #[derive(CircuitBreakerSpec)]
/// #[spec("resilient.circuitbreaker.pet")]
/// pub struct PetBreaker;
///
/// #[derive(TimeoutSpec)]
/// #[spec("resilient.timeout.pet")]
/// pub struct PetTimeout;
///
/// // As `#[retryable(PetRetry)] #[circuit_breakable(PetBreaker)] #[timeout(PetTimeout)]`.
/// let pets = ServiceBuilder::new()
///     .layer(StackLayer::new().spec::<PetRetry>().spec::<PetBreaker>().spec::<PetTimeout>())
///     .service(service_fn(|id: u64| async move { Ok::<_, BoxError>(format!("pet {id}")) }));
/// # let _ = pets;
/// ```
pub struct StackLayer<L, Req> {
    levels: L,
    _request: PhantomData<fn(Req)>,
}

impl<Req> StackLayer<End, Req> {
    /// A stack with no spec yet: add them with [`spec`](Self::spec) and
    /// [`keyed`](Self::keyed), outermost first.
    pub const fn new() -> Self {
        Self {
            levels: End,
            _request: PhantomData,
        }
    }
}

impl<L, Req> StackLayer<L, Req> {
    /// The parts.
    #[cfg(feature = "reqwest-middleware")]
    pub(crate) fn levels(&self) -> &L {
        &self.levels
    }
}

impl<L: Default, Req> Default for StackLayer<L, Req> {
    fn default() -> Self {
        StackLayer {
            levels: L::default(),
            _request: PhantomData,
        }
    }
}

impl<L, Req> StackLayer<L, Req> {
    /// The stack with spec `S` inside the specs added before it: a retry,
    /// circuit breaker, concurrency limit, rate limiter, timeout or chaos
    /// spec.
    ///
    /// A stack holds each spec once, as a fn holds one attribute of a kind:
    /// the same limit twice would take two of its places for one request,
    /// the same retry twice would multiply its attempts. A spec added a
    /// second time (by [`spec`](Self::spec), [`keyed`](Self::keyed) or
    /// `spec_reading_retry_header`) fails the build with "a stack holds
    /// each spec once", naming the spec where the stack is instantiated
    /// (`cargo build` and `cargo test` report it, `cargo check` does not).
    pub fn spec<S: StackSpec>(self) -> StackLayer<L::Out, Req>
    where
        L: Append<S::Level>,
    {
        StackLayer {
            levels: self.levels.append(S::Level::default()),
            _request: PhantomData,
        }
    }

    /// The stack with the keyed spec `S` inside the specs added before it:
    /// each request goes through the instance of the key `key` reads from
    /// it (a circuit breaker per host, a limit per tenant), among at most
    /// the `keys.max` instances of the spec, as `key = ..` of an attribute.
    ///
    /// ```
    /// use resilient_core::keyed::KeyRef;
    /// use resilient_core::layer::StackLayer;
    /// use resilient_core::CircuitBreakerSpec;
    ///
    /// #[derive(CircuitBreakerSpec)]
    /// #[spec("resilient.circuitbreaker.host")]
    /// pub struct HostBreaker;
    ///
    /// // One breaker per host the requests go to (a client's request names
    /// // it in its URI; on a server, read the `Host` header: a request with
    /// // no host would share the key "" with every other such request).
    /// let stack = StackLayer::new().keyed::<HostBreaker, _>(|req: &http::Request<String>| {
    ///     KeyRef::Text(req.uri().host().unwrap_or(""))
    /// });
    /// # let _ = stack;
    /// ```
    pub fn keyed<S, F>(self, key: F) -> StackLayer<L::Out, Req>
    where
        S: KeyedStackSpec,
        F: for<'r> Fn(&'r Req) -> KeyRef<'r> + Clone,
        L: Append<S::Keyed<ByKey<F>>>,
    {
        StackLayer {
            levels: self.levels.append(S::keyed(ByKey(key))),
            _request: PhantomData,
        }
    }
}

impl<L, Req> StackLayer<L, Req> {
    /// The stack with the concurrency limit spec `S` inside the specs added
    /// before it, reading the spec's `retry_header` from each request (an
    /// `http::Request`): a request that announces a retry is refused at
    /// once when the limit is full, and never waits; with `retry_share`,
    /// also once that share of the places is in use. A retry part added
    /// before it makes each attempt it sends again a retry here, whatever
    /// the request's header says. A spec without `retry_header` reads no
    /// header, and lets requests in as [`spec`](Self::spec) does.
    ///
    /// ```
    /// use resilient_core::layer::StackLayer;
    /// use resilient_core::{ConcurrencyLimitSpec, RetrySpec};
    ///
    /// #[derive(RetrySpec)]
    /// #[spec("resilient.retry.pets")]
    /// pub struct PetsRetry;
    ///
    /// #[derive(ConcurrencyLimitSpec)]
    /// #[spec("resilient.concurrency.pets")]
    /// pub struct PetsLimit;
    ///
    /// let stack = StackLayer::<_, http::Request<String>>::new()
    ///     .spec::<PetsRetry>()
    ///     .spec_reading_retry_header::<PetsLimit>();
    /// # let _ = stack;
    /// ```
    #[cfg(feature = "http")]
    pub fn spec_reading_retry_header<S>(self) -> StackLayer<L::Out, Req>
    where
        S: ConcurrencyLimitSpec,
        L: Append<RetryHeaderLimitLevel<S>>,
    {
        StackLayer {
            levels: self.levels.append(RetryHeaderLimitLevel::default()),
            _request: PhantomData,
        }
    }
}

impl<L: Clone, Req> Clone for StackLayer<L, Req> {
    fn clone(&self) -> Self {
        Self {
            levels: self.levels.clone(),
            _request: PhantomData,
        }
    }
}

impl<L: std::fmt::Debug, Req> std::fmt::Debug for StackLayer<L, Req> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("StackLayer").field(&self.levels).finish()
    }
}

impl<L, Req, Svc> tower_layer::Layer<Svc> for StackLayer<L, Req>
where
    L: Chain<Inner<Svc>, Req>,
    Svc: Service<Req> + Clone,
    Svc::Error: LayerError,
{
    type Service = StackService<L, Svc, Req>;

    fn layer(&self, inner: Svc) -> Self::Service {
        StackService {
            levels: self.levels.clone(),
            inner,
            _request: PhantomData,
        }
    }
}

/// The service a [`StackLayer`] makes around `Svc`.
pub struct StackService<L, Svc, Req> {
    levels: L,
    inner: Svc,
    _request: PhantomData<fn(Req)>,
}

impl<L, Svc, Req> StackService<L, Svc, Req> {
    /// The inner service.
    pub fn get_ref(&self) -> &Svc {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut Svc {
        &mut self.inner
    }

    /// The inner service, taken out.
    pub fn into_inner(self) -> Svc {
        self.inner
    }
}

impl<L: Clone, Svc: Clone, Req> Clone for StackService<L, Svc, Req> {
    fn clone(&self) -> Self {
        Self {
            levels: self.levels.clone(),
            inner: self.inner.clone(),
            _request: PhantomData,
        }
    }
}

impl<L: std::fmt::Debug, Svc: std::fmt::Debug, Req> std::fmt::Debug for StackService<L, Svc, Req> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StackService")
            .field("levels", &self.levels)
            .field("inner", &self.inner)
            .finish()
    }
}

impl<L, Svc, Req> Service<Req> for StackService<L, Svc, Req>
where
    L: Chain<Inner<Svc>, Req>,
    Svc: Service<Req> + Clone,
    Svc::Error: LayerError,
{
    type Response = Svc::Response;
    type Error = Svc::Error;
    type Future = StackFuture<L, Svc, Req>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    #[inline]
    fn call(&mut self, req: Req) -> Self::Future {
        // The ready service goes with the request; a clone stays.
        let clone = self.inner.clone();
        StackFuture {
            run: Running::new(
                self.levels.clone(),
                Inner(std::mem::replace(&mut self.inner, clone)),
                req,
            ),
        }
    }
}

pin_project! {
    /// The response future of a [`StackService`]: one state for the whole
    /// stack, a part per spec.
    pub struct StackFuture<L, Svc, Req>
    where
        L: Chain<Inner<Svc>, Req>,
        Svc: Service<Req>,
    {
        #[pin]
        run: Running<L, Inner<Svc>, Req, Apart<Req, L::State>>,
    }
}

impl<L, Svc, Req> Future for StackFuture<L, Svc, Req>
where
    L: Chain<Inner<Svc>, Req>,
    Svc: Service<Req>,
    Svc::Error: From<Error>,
{
    type Output = Result<Svc::Response, Svc::Error>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().run.poll(cx)
    }
}

/// Where a request waits for its first poll, beside or in the place of
/// its parts' state. Not a public API.
#[doc(hidden)]
pub trait Slot<Req, S> {
    /// The request, before its first poll.
    fn new(req: Req, idle: impl FnOnce() -> S) -> Self;

    /// At the first poll: the request, and the parts' state to start it
    /// in (idle). `None` once taken.
    fn start(self: Pin<&mut Self>, idle: impl FnOnce() -> S) -> Option<(Pin<&mut S>, Req)>;

    /// The parts' state, once there is one.
    fn state(self: Pin<&mut Self>) -> Option<Pin<&mut S>>;
}

pin_project! {
    /// The request beside the parts' state: nothing to set at the first
    /// poll (a tower stack, whose requests are small or `()`).
    #[doc(hidden)]
    pub struct Apart<Req, S> {
        req: Option<Req>,
        #[pin]
        state: S,
    }
}

impl<Req, S> Slot<Req, S> for Apart<Req, S> {
    #[inline(always)]
    fn new(req: Req, idle: impl FnOnce() -> S) -> Self {
        Apart {
            req: Some(req),
            state: idle(),
        }
    }

    #[inline(always)]
    fn start(self: Pin<&mut Self>, _: impl FnOnce() -> S) -> Option<(Pin<&mut S>, Req)> {
        let this = self.project();
        let req = this.req.take()?;
        Some((this.state, req))
    }

    #[inline(always)]
    fn state(self: Pin<&mut Self>) -> Option<Pin<&mut S>> {
        Some(self.project().state)
    }
}

pin_project! {
    /// The request in the place of the parts' state, which the first poll
    /// sets there: the future is the smaller by the request (the
    /// middleware's, whose reqwest request is 264 bytes and whose future
    /// reqwest-middleware boxes).
    #[doc(hidden)]
    #[project = InPlaceProj]
    pub enum InPlace<Req, S> {
        // The request, until the first poll starts it.
        Idle { req: Option<Req> },
        // Started: a part per spec.
        Started {
            #[pin]
            state: S,
        },
    }
}

impl<Req, S> Slot<Req, S> for InPlace<Req, S> {
    #[inline(always)]
    fn new(req: Req, _: impl FnOnce() -> S) -> Self {
        InPlace::Idle { req: Some(req) }
    }

    #[inline(always)]
    fn start(mut self: Pin<&mut Self>, idle: impl FnOnce() -> S) -> Option<(Pin<&mut S>, Req)> {
        let InPlaceProj::Idle { req } = self.as_mut().project() else {
            return None;
        };
        let req = req.take()?;
        self.set(InPlace::Started { state: idle() });
        match self.project() {
            InPlaceProj::Started { state } => Some((state, req)),
            InPlaceProj::Idle { .. } => None,
        }
    }

    #[inline(always)]
    fn state(self: Pin<&mut Self>) -> Option<Pin<&mut S>> {
        match self.project() {
            InPlaceProj::Started { state } => Some(state),
            InPlaceProj::Idle { .. } => None,
        }
    }
}

pin_project! {
    /// A request running through a stack's parts `L` to the inner call
    /// `D`, kept in `P` until its first poll: the tower service's call, or
    /// the next middleware's. Not a public API.
    #[doc(hidden)]
    pub struct Running<L, D, Req, P>
    where
        L: Chain<D, Req>,
        D: Service<Req>,
        P: Slot<Req, L::State>,
    {
        levels: L,
        svc: D,
        // The outcome was given: each part has given back what it held.
        done: bool,
        #[pin]
        slot: P,
        _request: PhantomData<fn(Req)>,
    }

    impl<L, D, Req, P> PinnedDrop for Running<L, D, Req, P>
    where
        L: Chain<D, Req>,
        D: Service<Req>,
        P: Slot<Req, L::State>,
    {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if *this.done {
                return;
            }
            if let Some(state) = this.slot.state() {
                this.levels.stop(state);
            }
        }
    }
}

impl<L, D, Req, P> Running<L, D, Req, P>
where
    L: Chain<D, Req>,
    D: Service<Req>,
    P: Slot<Req, L::State>,
{
    /// `req`, to run through `levels` to `svc` from the first poll on.
    #[inline(always)]
    pub(crate) fn new(levels: L, svc: D, req: Req) -> Self {
        Running {
            levels,
            svc,
            done: false,
            slot: P::new(req, L::idle),
            _request: PhantomData,
        }
    }
}

impl<L, D, Req, P> Future for Running<L, D, Req, P>
where
    L: Chain<D, Req>,
    D: Service<Req>,
    D::Error: From<Error>,
    P: Slot<Req, L::State>,
{
    type Output = Result<D::Response, D::Error>;

    #[inline(always)]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if *this.done {
            return Poll::Pending;
        }
        if let Some((state, req)) = this.slot.as_mut().start(L::idle) {
            if let Some(out) = this.levels.start(state, this.svc, req) {
                *this.done = true;
                return Poll::Ready(out.map_err(|f| f.into_error(From::from)));
            }
        }
        let Some(state) = this.slot.state() else {
            return Poll::Pending;
        };
        let out = ready!(this.levels.poll(state, cx, this.svc));
        *this.done = true;
        Poll::Ready(out.map_err(|f| f.into_error(From::from)))
    }
}

/// A tower service as a stack calls it. Not a public API.
#[doc(hidden)]
#[derive(Debug, Clone)]
pub struct Inner<Svc>(pub(crate) Svc);

impl<Svc: Service<Req>, Req> Service<Req> for Inner<Svc> {
    type Response = Svc::Response;
    type Error = Svc::Error;
    type Future = Svc::Future;

    #[inline(always)]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Svc::Error>> {
        self.0.poll_ready(cx)
    }

    #[inline(always)]
    fn call(&mut self, req: Req) -> Svc::Future {
        self.0.call(req)
    }
}

/// The call at the end of a stack: a tower service, or the next
/// middleware. Not a public API.
#[doc(hidden)]
pub trait InnerCall<Req>: Service<Req> {
    /// Whether a retry marks its first attempt's call with its attempt
    /// (it always marks a retry's), for a call that reads the mark (the
    /// next middleware). A tower service's call is not marked: a layer
    /// inside reads only a retry's mark (the attempt header).
    const MARKS_FIRST: bool = false;

    /// Whether `out` is a retry's refusal of a request it could not copy
    /// ([`Resend`]): the request was never sent, and a breaker outside
    /// does not count it.
    #[inline(always)]
    fn refused_unsent(out: &StackOut<Self::Response, Self::Error>) -> bool {
        let _ = out;
        false
    }
}

impl<Svc: Service<Req>, Req> InnerCall<Req> for Inner<Svc> {}

/// How a stack's retry sends a request again: a copy per attempt. Not a
/// public API.
#[doc(hidden)]
pub trait Resend<Req>: InnerCall<Req> {
    /// A copy of `req` for another attempt, or the refusal of retry spec
    /// `spec` when `req` cannot be copied.
    fn resend(req: &Req, spec: &'static str) -> Result<Req, Fail<Self::Error>>;
}

/// A tower request is copied by `Clone`.
impl<Svc: Service<Req>, Req: Clone> Resend<Req> for Inner<Svc> {
    #[inline(always)]
    fn resend(req: &Req, _: &'static str) -> Result<Req, Fail<Svc::Error>> {
        Ok(req.clone())
    }
}

mod sealed {
    /// A stack's list of parts, which only this crate makes.
    pub trait Sealed {}

    impl Sealed for super::End {}

    impl<Level, Inner> Sealed for super::Then<Level, Inner> {}
}

/// The end of a stack's list of specs: the inner service.
#[derive(Debug, Clone, Copy, Default)]
pub struct End;

/// A stack's spec `Level` outside the specs `Inner`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Then<Level, Inner>(pub(crate) Level, pub(crate) Inner);

/// A list of specs that another spec can be added to, innermost. Not a
/// public API.
#[doc(hidden)]
pub trait Append<X> {
    /// The list with `X` added.
    type Out;
    /// Adds `x`, innermost.
    fn append(self, x: X) -> Self::Out;
}

impl<X: Part> Append<X> for End {
    type Out = Then<X, End>;

    fn append(self, x: X) -> Self::Out {
        Then(x, End)
    }
}

impl<H: Part, T: Append<X>, X: Part> Append<X> for Then<H, T> {
    type Out = Then<H, T::Out>;

    fn append(self, x: X) -> Self::Out {
        // A build error (not one `cargo check` reports: it is raised where
        // the stack's code is made).
        const { assert!(!same_path(H::PATH, X::PATH), "a stack holds each spec once") };
        Then(self.0, self.1.append(x))
    }
}

/// A spec's part of a stack, by the spec's path. Not a public API.
#[doc(hidden)]
pub trait Part {
    /// The path of the part's spec: a stack holds each one once.
    const PATH: &'static str;
}

/// Whether `a` and `b` are one path.
const fn same_path(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// A spec a stack can hold: every retry, circuit breaker, concurrency
/// limit, rate limiter, timeout and chaos spec.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be part of a stack",
    label = "a stack holds retry, circuit breaker, concurrency limit, rate limiter, timeout and chaos specs",
    note = "a hedging spec's attempts run side by side, each with its own copy of the request and of the service: put `#[hedged({Self})]` on the fn that sends the request, or use tower's own `hedge` middleware"
)]
pub trait StackSpec: Spec {
    /// The spec's part of a stack.
    type Level: Default + Clone;
}

impl<S: Spec> StackSpec for S
where
    S::Mechanism: HasLevel,
{
    type Level = <S::Mechanism as HasLevel>::Level<S>;
}

/// A mechanism with a part in a stack. Not a public API.
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "a stack holds retry, circuit breaker, concurrency limit, rate limiter, timeout and chaos specs, and this spec is of another kind (`{Self}`)",
    label = "`.spec::<S>()` needs a spec of a kind a stack holds",
    note = "a hedging spec's attempts run side by side, each with its own copy of the request and of the service: put `#[hedged(..)]` on the fn that sends the request, or use tower's own `hedge` middleware"
)]
pub trait HasLevel {
    /// The part of a spec `S` of this mechanism.
    type Level<S: 'static>: Default + Clone;
}

/// A spec a stack can key by the request: every circuit breaker,
/// concurrency limit and rate limiter spec.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be keyed",
    label = "circuit breaker, concurrency limit and rate limiter specs are keyed; retry, timeout and chaos specs have one instance",
    note = "add it with `.spec::<{Self}>()` instead"
)]
pub trait KeyedStackSpec: Spec {
    /// The spec's part of a stack, keyed by `K`.
    type Keyed<K>;
    /// That part.
    fn keyed<K>(key: K) -> Self::Keyed<K>;
}

impl<S: Spec> KeyedStackSpec for S
where
    S::Mechanism: HasKeyedLevel,
{
    type Keyed<K> = <S::Mechanism as HasKeyedLevel>::Keyed<S, K>;

    fn keyed<K>(key: K) -> Self::Keyed<K> {
        <S::Mechanism as HasKeyedLevel>::keyed::<S, K>(key)
    }
}

/// A mechanism with keyed instances in a stack. Not a public API.
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "a stack keys circuit breaker, concurrency limit and rate limiter specs, and this spec is of another kind (`{Self}`)",
    label = "`.keyed::<S, _>(..)` needs a circuit breaker, concurrency limit or rate limiter spec",
    note = "a retry, timeout or chaos spec has one instance: add it with `.spec::<S>()`"
)]
pub trait HasKeyedLevel {
    /// The part of a spec `S` of this mechanism, keyed by `K`.
    type Keyed<S: 'static, K>;
    /// That part.
    fn keyed<S: 'static, K>(key: K) -> Self::Keyed<S, K>;
}

/// How a stack's spec finds its instance for a request: the spec's one
/// instance ([`Unkeyed`]), or the instance of a key read from the request
/// ([`ByKey`]). Not a public API.
#[doc(hidden)]
pub trait KeyOf<Req>: Clone {
    /// The instance of spec `key` for `req`.
    #[allow(private_interfaces)]
    fn instance<M: Mechanism>(&self, key: &'static Key<M>, req: &Req) -> Option<Shared<M>>;
}

/// A spec's one instance.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unkeyed;

/// The instance of the key a fn reads from the request.
#[derive(Clone, Copy)]
pub struct ByKey<F>(F);

impl<F> std::fmt::Debug for ByKey<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ByKey")
    }
}

impl<Req> KeyOf<Req> for Unkeyed {
    #[inline(always)]
    #[allow(private_interfaces)]
    fn instance<M: Mechanism>(&self, key: &'static Key<M>, _: &Req) -> Option<Shared<M>> {
        crate::registry::lookup(key)
    }
}

impl<Req, F> KeyOf<Req> for ByKey<F>
where
    F: for<'r> Fn(&'r Req) -> KeyRef<'r> + Clone,
{
    #[inline(always)]
    #[allow(private_interfaces)]
    fn instance<M: Mechanism>(&self, key: &'static Key<M>, req: &Req) -> Option<Shared<M>> {
        crate::registry::lookup_keyed(key, (self.0)(req))
    }
}

macro_rules! level {
    ($(#[$doc:meta])* $name:ident<S $(, $k:ident)?> for $mechanism:ty) => {
        $(#[$doc])*
        pub struct $name<S, $($k = Unkeyed)?> {
            $(pub(crate) key: $k,)?
            _spec: PhantomData<fn() -> S>,
        }

        impl<S $(, $k: Default)?> Default for $name<S $(, $k)?> {
            fn default() -> Self {
                Self {
                    $(key: <$k>::default(),)?
                    _spec: PhantomData,
                }
            }
        }

        // Written out: a keyed part clones its key fn, which need not be `Copy`.
        #[allow(clippy::non_canonical_clone_impl)]
        impl<S $(, $k: Clone)?> Clone for $name<S $(, $k)?> {
            fn clone(&self) -> Self {
                Self {
                    $(key: <$k as Clone>::clone(&self.key),)?
                    _spec: PhantomData,
                }
            }
        }

        impl<S $(, $k: Copy)?> Copy for $name<S $(, $k)?> {}

        impl<S $(, $k)?> std::fmt::Debug for $name<S $(, $k)?> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_tuple(stringify!($name))
                    .field(&std::any::type_name::<S>())
                    .finish()
            }
        }

        impl<S: Spec $(, $k)?> Part for $name<S $(, $k)?> {
            const PATH: &'static str = S::PATH;
        }

        impl HasLevel for $mechanism {
            type Level<S: 'static> = $name<S>;
        }

        $(
            impl HasKeyedLevel for $mechanism {
                type Keyed<S: 'static, $k> = $name<S, $k>;

                fn keyed<S: 'static, $k>(key: $k) -> Self::Keyed<S, $k> {
                    $name { key, _spec: PhantomData }
                }
            }
        )?
    };
}

level! {
    /// A retry spec's part of a stack.
    RetryLevel<S> for crate::retry::Retry
}

level! {
    /// A circuit breaker spec's part of a stack.
    BreakerLevel<S, K> for crate::circuit_breaker::Breaker
}

level! {
    /// A concurrency limit spec's part of a stack.
    LimitLevel<S, K> for crate::concurrency::Limiter
}

level! {
    /// A rate limiter spec's part of a stack.
    RateLevel<S, K> for crate::rate_limiter::RateLimiter
}

level! {
    /// A timeout spec's part of a stack.
    TimeoutLevel<S> for crate::timeout::Timeout
}

level! {
    /// A chaos spec's part of a stack.
    ChaosLevel<S> for crate::chaos::Chaos
}

/// A stack's specs from one on, as its response future runs them: the
/// protocol each mechanism's part follows. Not a public API.
///
/// A part admits the request ([`start`](Self::start)) and starts the parts
/// inside it, the innermost calling the service; it is told the outcome
/// from inside ([`poll`](Self::poll)) and passes it on, counted; and a
/// part dropped early gives back what it holds, the parts inside it first
/// ([`stop`](Self::stop)).
///
/// Sealed: only the crate's own parts follow it, so that what calls the
/// inner call, and when, is this file's (the middleware's inner call
/// relies on one attempt's future being dropped before the next call).
#[doc(hidden)]
pub trait Chain<Svc: Service<Req>, Req>: Clone + sealed::Sealed {
    /// The state of a request in these parts.
    type State;

    /// The state before a request starts.
    fn idle() -> Self::State;

    /// Admits `req` in each part, outermost first, and calls `svc` with it
    /// once all let it in: the outcome now if a part refused it, else
    /// `None` (it runs, or waits).
    fn start(&self, state: Pin<&mut Self::State>, svc: &mut Svc, req: Req)
        -> Option<Out<Svc, Req>>;

    /// The outcome of a started request, once it came and each part
    /// counted it.
    fn poll(
        &self,
        state: Pin<&mut Self::State>,
        cx: &mut Context<'_>,
        svc: &mut Svc,
    ) -> Poll<Out<Svc, Req>>;

    /// Drops what runs, innermost first, each part counting it cancelled.
    fn stop(&self, state: Pin<&mut Self::State>);

    /// Whether these parts hold a retry: a retry outside them then polls
    /// them marked with its attempt, so that the retry inside sees it
    /// (`share_outer_budget`, the nested-retry warning), as in an attribute
    /// chain. Known when the stack is compiled: a stack of one retry marks
    /// nothing more.
    const RETRIES: bool;
}

pin_project! {
    /// The innermost state: the service's response future.
    #[doc(hidden)]
    pub struct EndState<F> {
        #[pin]
        future: Option<F>,
    }
}

impl<Svc: Service<Req>, Req> Chain<Svc, Req> for End {
    type State = EndState<Svc::Future>;

    const RETRIES: bool = false;

    #[inline(always)]
    fn idle() -> Self::State {
        EndState { future: None }
    }

    #[inline(always)]
    fn start(
        &self,
        state: Pin<&mut Self::State>,
        svc: &mut Svc,
        req: Req,
    ) -> Option<Out<Svc, Req>> {
        let mut future = state.project().future;
        // The previous attempt's future goes before the next call: no two
        // calls' futures are ever alive together (the middleware's calls
        // each borrow the request's extensions).
        future.set(None);
        future.set(Some(svc.call(req)));
        None
    }

    #[inline(always)]
    fn poll(
        &self,
        state: Pin<&mut Self::State>,
        cx: &mut Context<'_>,
        _: &mut Svc,
    ) -> Poll<Out<Svc, Req>> {
        // A finished future stays until the next attempt replaces it or the
        // stack's future is dropped: nothing polls it again (the stack's
        // future answers `Pending` once it has given its outcome).
        let Some(running) = state.project().future.as_pin_mut() else {
            return Poll::Pending;
        };
        running.poll(cx).map_err(Fail::Body)
    }

    #[inline(always)]
    fn stop(&self, state: Pin<&mut Self::State>) {
        state.project().future.set(None);
    }
}

pin_project! {
    /// A circuit breaker's state: its permit while the request runs.
    #[doc(hidden)]
    pub struct BreakerState<N> {
        call: Option<BreakerCall<'static, ()>>,
        permit: Option<PermitParts>,
        #[pin]
        next: N,
    }
}

/// Counts `out` on the permit `parts` of `call`'s breaker and passes it
/// on: a spec's error as the attribute chain counts it, the service's own
/// as the spec classifies it (a resilience error it carries, from a layer
/// below the stack, as a spec's), and a request a retry inside refused
/// unsent ([`InnerCall::refused_unsent`]) not at all.
#[inline(always)]
fn breaker_exit<S, Svc, Req>(
    call: Option<&BreakerCall<'static, ()>>,
    parts: Option<PermitParts>,
    out: Out<Svc, Req>,
) -> Out<Svc, Req>
where
    S: CircuitBreakerSpec,
    Svc: InnerCall<Req>,
    Svc::Error: LayerError,
    S::Classifier: Classify<Svc::Response, Svc::Error>,
{
    let (Some(parts), Some(breaker)) = (parts, call.and_then(BreakerCall::breaker)) else {
        return out;
    };
    let (out, verdict) = if Svc::refused_unsent(&out) {
        (out, crate::spec::Verdict::Ignore)
    } else {
        crate::outcome::classify(
            out,
            super::breaker::verdict::<S, Svc::Response, Svc::Error>,
            on_resilience_error,
        )
    };
    Permit::from_parts(breaker, parts).judged(verdict, parts);
    out
}

/// A breaker call of spec `S` through `key`'s instance for `req`.
#[inline(always)]
fn breaker_call<S: CircuitBreakerSpec, Req>(
    key: &impl KeyOf<Req>,
    req: &Req,
) -> BreakerCall<'static, ()> {
    let spec = const { &Key::of::<S>() };
    crate::circuit_breaker::unclassified_in::<S>(key.instance(spec, req))
}

impl<S, K, N, Svc, Req> Chain<Svc, Req> for Then<BreakerLevel<S, K>, N>
where
    S: CircuitBreakerSpec,
    K: KeyOf<Req>,
    N: Chain<Svc, Req>,
    Svc: InnerCall<Req>,
    Svc::Error: LayerError,
    S::Classifier: Classify<Svc::Response, Svc::Error>,
{
    type State = BreakerState<N::State>;

    const RETRIES: bool = N::RETRIES;

    #[inline(always)]
    fn idle() -> Self::State {
        BreakerState {
            call: None,
            permit: None,
            next: N::idle(),
        }
    }

    #[inline(always)]
    fn start(
        &self,
        state: Pin<&mut Self::State>,
        svc: &mut Svc,
        req: Req,
    ) -> Option<Out<Svc, Req>> {
        let st = state.project();
        let call = breaker_call::<S, Req>(&self.0.key, &req);
        match call.enter() {
            Ok(entered) => *st.permit = Some(entered.into_parts()),
            Err(e) => return Some(Err(Fail::Resilience(e))),
        }
        let call = st.call.insert(call);
        let out = self.1.start(st.next, svc, req)?;
        Some(breaker_exit::<S, Svc, Req>(
            Some(call),
            st.permit.take(),
            out,
        ))
    }

    #[inline(always)]
    fn poll(
        &self,
        state: Pin<&mut Self::State>,
        cx: &mut Context<'_>,
        svc: &mut Svc,
    ) -> Poll<Out<Svc, Req>> {
        let st = state.project();
        let out = ready!(self.1.poll(st.next, cx, svc));
        Poll::Ready(breaker_exit::<S, Svc, Req>(
            st.call.as_ref(),
            st.permit.take(),
            out,
        ))
    }

    #[inline(always)]
    fn stop(&self, state: Pin<&mut Self::State>) {
        let st = state.project();
        self.1.stop(st.next);
        if let (Some(parts), Some(breaker)) = (
            st.permit.take(),
            st.call.as_ref().and_then(BreakerCall::breaker),
        ) {
            drop(Permit::from_parts(breaker, parts));
        }
    }
}

pin_project! {
    /// A timeout's state: its timer while the request runs, armed at its
    /// first wait.
    #[doc(hidden)]
    pub struct TimeoutState<N> {
        call: Option<TimeoutCall<'static>>,
        timer: Option<TimerParts>,
        // Polled outside tokio's cooperative budget, so that a response
        // that spends the budget still times out.
        #[pin]
        sleep: Option<Unconstrained<Sleep>>,
        #[pin]
        next: N,
    }
}

/// Counts an outcome that came in time.
#[inline(always)]
fn timeout_exit<T, E>(
    call: Option<&TimeoutCall<'static>>,
    timer: Option<TimerParts>,
    out: StackOut<T, E>,
) -> StackOut<T, E> {
    if let (Some(call), Some(timer)) = (call, timer) {
        call.ended_parts_inline(timer, Some(out.is_err()));
    }
    out
}

impl<S, N, Svc, Req> Chain<Svc, Req> for Then<TimeoutLevel<S>, N>
where
    S: TimeoutSpec,
    N: Chain<Svc, Req>,
    Svc: Service<Req>,
{
    type State = TimeoutState<N::State>;

    const RETRIES: bool = N::RETRIES;

    #[inline(always)]
    fn idle() -> Self::State {
        TimeoutState {
            call: None,
            timer: None,
            sleep: None,
            next: N::idle(),
        }
    }

    #[inline(always)]
    fn start(
        &self,
        state: Pin<&mut Self::State>,
        svc: &mut Svc,
        req: Req,
    ) -> Option<Out<Svc, Req>> {
        let st = state.project();
        let key = const { &Key::of::<S>() };
        let call = TimeoutCall::new(key, crate::registry::lookup(key));
        match call.start_parts_inline() {
            Ok(timer) => *st.timer = timer,
            Err(e) => return Some(Err(Fail::Resilience(e))),
        }
        let call = st.call.insert(call);
        let out = self.1.start(st.next, svc, req)?;
        Some(timeout_exit(Some(call), st.timer.take(), out))
    }

    #[inline(always)]
    fn poll(
        &self,
        state: Pin<&mut Self::State>,
        cx: &mut Context<'_>,
        svc: &mut Svc,
    ) -> Poll<Out<Svc, Req>> {
        let mut st = state.project();
        if let Poll::Ready(out) = self.1.poll(st.next.as_mut(), cx, svc) {
            st.sleep.set(None);
            return Poll::Ready(timeout_exit(st.call.as_ref(), st.timer.take(), out));
        }
        let Some(timer) = *st.timer else {
            return Poll::Pending;
        };
        if st.sleep.is_none() {
            let sleep = tokio::time::sleep(timer.duration);
            st.sleep.set(Some(tokio::task::unconstrained(sleep)));
        }
        if let Some(sleep) = st.sleep.as_mut().as_pin_mut() {
            ready!(sleep.poll(cx));
        }
        // Timed out: what runs inside is dropped first, counted cancelled.
        self.1.stop(st.next);
        st.sleep.set(None);
        *st.timer = None;
        let error = match st.call.as_ref() {
            Some(call) => call.timed_out_parts(timer, timer.duration),
            None => Error::Timeout {
                spec: S::NAME,
                after: timer.duration,
            },
        };
        Poll::Ready(Err(Fail::Resilience(error)))
    }

    #[inline(always)]
    fn stop(&self, state: Pin<&mut Self::State>) {
        let mut st = state.project();
        self.1.stop(st.next);
        st.sleep.set(None);
        if let (Some(call), Some(timer)) = (st.call.as_ref(), st.timer.take()) {
            call.ended_parts(timer, None);
        }
    }
}

/// A gate's part (a concurrency limit, a rate limiter, chaos): how it
/// makes its call for a request. Not a public API.
#[doc(hidden)]
pub trait MakeGate<Req>: Clone {
    /// The gate.
    #[allow(private_bounds)]
    type Gate: Gate;
    /// The gate of a request.
    fn gate(&self, req: &Req) -> Self::Gate;
}

impl<S: ConcurrencyLimitSpec, K: KeyOf<Req>, Req> MakeGate<Req> for LimitLevel<S, K> {
    type Gate = LimitGate;

    #[inline(always)]
    fn gate(&self, req: &Req) -> LimitGate {
        let key = const { &Key::of::<S>() };
        LimitGate(LimitCall::new(key, self.key.instance(key, req)))
    }
}

/// A concurrency limit spec's part of a stack that reads the spec's
/// `retry_header` from each request (see
/// [`StackLayer::spec_reading_retry_header`]).
#[cfg(feature = "http")]
pub struct RetryHeaderLimitLevel<S> {
    _spec: PhantomData<fn() -> S>,
}

#[cfg(feature = "http")]
impl<S> Default for RetryHeaderLimitLevel<S> {
    fn default() -> Self {
        Self { _spec: PhantomData }
    }
}

#[cfg(feature = "http")]
impl<S> Clone for RetryHeaderLimitLevel<S> {
    fn clone(&self) -> Self {
        *self
    }
}

#[cfg(feature = "http")]
impl<S> Copy for RetryHeaderLimitLevel<S> {}

#[cfg(feature = "http")]
impl<S: Spec> Part for RetryHeaderLimitLevel<S> {
    const PATH: &'static str = S::PATH;
}

#[cfg(feature = "http")]
impl<S> std::fmt::Debug for RetryHeaderLimitLevel<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RetryHeaderLimitLevel")
            .field(&std::any::type_name::<S>())
            .finish()
    }
}

#[cfg(feature = "http")]
impl<S: ConcurrencyLimitSpec, Req: RequestHeaders> MakeGate<Req> for RetryHeaderLimitLevel<S> {
    type Gate = AnnouncedGate;

    #[inline(always)]
    fn gate(&self, req: &Req) -> AnnouncedGate {
        let key = const { &Key::of::<S>() };
        let call = LimitCall::new(key, crate::registry::lookup(key));
        AnnouncedGate::new(call, req.headers())
    }
}

impl<S: RateLimiterSpec, K: KeyOf<Req>, Req> MakeGate<Req> for RateLevel<S, K> {
    type Gate = RateCall;

    #[inline(always)]
    fn gate(&self, req: &Req) -> RateCall {
        let key = const { &Key::of::<S>() };
        RateCall::new(key, self.key.instance(key, req))
    }
}

impl<S: ChaosSpec, Req> MakeGate<Req> for ChaosLevel<S> {
    type Gate = ChaosGate;

    #[inline(always)]
    fn gate(&self, _: &Req) -> ChaosGate {
        let key = const { &Key::of::<S>() };
        ChaosGate(ChaosCall::new(key, crate::registry::lookup(key)))
    }
}

pin_project! {
    /// A gate's state: its place or permit while the request runs, or the
    /// wait for one.
    #[doc(hidden)]
    pub struct GateState<G, Svc, Req, N>
    where
        G: MakeGate<Req>,
    {
        call: Option<G::Gate>,
        held: Option<<G::Gate as Gate>::Parts>,
        waiting: Option<Box<Waiter<<G::Gate as Gate>::Parts, Svc, Req>>>,
        #[pin]
        next: N,
    }
}

/// Gives back what `held` holds, counting `out`, and passes it on.
#[inline(always)]
fn gate_exit<C: Gate, T, E>(
    call: Option<&C>,
    held: Option<C::Parts>,
    out: StackOut<T, E>,
) -> StackOut<T, E> {
    if let (Some(call), Some(parts)) = (call, held) {
        let outcome = match &out {
            Ok(_) => Ok(()),
            Err(_) => Err(Fail::Body(())),
        };
        call.finish(parts, Some(outcome));
    }
    out
}

/// `Chain` for a gate's part (`$level`, which makes its gate with
/// [`MakeGate`]).
macro_rules! gate_chain {
    ($level:ident<S $(, $k:ident)?>) => {
#[allow(private_bounds, private_interfaces)]
impl<S, $($k,)? N, Svc, Req> Chain<Svc, Req> for Then<$level<S $(, $k)?>, N>
where
    $level<S $(, $k)?>: MakeGate<Req>,
    N: Chain<Svc, Req>,
    Svc: Service<Req> + Clone,
{
    type State = GateState<$level<S $(, $k)?>, Svc, Req, N::State>;

    const RETRIES: bool = N::RETRIES;

    #[inline(always)]
    fn idle() -> Self::State {
        GateState {
            call: None,
            held: None,
            waiting: None,
            next: N::idle(),
        }
    }

    #[inline(always)]
    fn start(&self, state: Pin<&mut Self::State>, svc: &mut Svc, req: Req) -> Option<Out<Svc, Req>> {
        let st = state.project();
        let call = st.call.insert(self.0.gate(&req));
        match call.enter() {
            Entry::Ready(Ok(parts)) => *st.held = Some(parts),
            Entry::Ready(Err(e)) => return Some(Err(Fail::Resilience(e))),
            Entry::Wait(wait) => {
                let clone = svc.clone();
                *st.waiting = Some(waiter(wait, std::mem::replace(svc, clone), req));
                return None;
            }
        }
        let out = self.1.start(st.next, svc, req)?;
        Some(gate_exit(Some(&*call), st.held.take(), out))
    }

    #[inline(always)]
    fn poll(
        &self,
        state: Pin<&mut Self::State>,
        cx: &mut Context<'_>,
        svc: &mut Svc,
    ) -> Poll<Out<Svc, Req>> {
        let mut st = state.project();
        if let Some(waiter) = st.waiting.as_mut() {
            let entered = ready!(waiter.wait.as_mut().poll(cx));
            let Some(Waiter { svc: mut ready, req, attempt, .. }) = st.waiting.take().map(|w| *w) else {
                return Poll::Pending;
            };
            match entered {
                Ok(parts) => *st.held = Some(parts),
                Err(e) => return Poll::Ready(Err(Fail::Resilience(e))),
            }
            // One call of the parts' start, however it is marked: two
            // would put the whole inner start in this poll twice.
            let next = st.next.as_mut();
            let started =
                crate::retry::call_in_if(attempt, || self.1.start(next, &mut ready, req));
            if let Some(out) = started {
                return Poll::Ready(gate_exit(st.call.as_ref(), st.held.take(), out));
            }
        }
        let out = ready!(self.1.poll(st.next, cx, svc));
        Poll::Ready(gate_exit(st.call.as_ref(), st.held.take(), out))
    }

    #[inline(always)]
    fn stop(&self, state: Pin<&mut Self::State>) {
        let st = state.project();
        self.1.stop(st.next);
        *st.waiting = None;
        if let (Some(call), Some(parts)) = (st.call.as_ref(), st.held.take()) {
            call.finish(parts, None);
        }
    }
}
    };
}

gate_chain!(LimitLevel<S, K>);
#[cfg(feature = "http")]
gate_chain!(RetryHeaderLimitLevel<S>);
gate_chain!(RateLevel<S, K>);
gate_chain!(ChaosLevel<S>);

/// Where a retry's part is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// An attempt runs.
    Calling,
    /// The wait before the next attempt.
    Waiting,
    /// The service is made ready for the next attempt.
    Readying,
    /// The outcome was given.
    Done,
}

/// The retry call of spec `S` for `Result<T, E>`, as a stack's part makes it.
type RetryOf<S, T, E> = RetryCall<
    'static,
    T,
    E,
    <E as Exhaustion<<S as RetrySpec>::Exhausted>>::Trail,
    LayerJudge<<S as RetrySpec>::Classifier>,
>;

pin_project! {
    /// A retry's state: its call, the request kept for the retries, and
    /// the wait before the next one.
    #[doc(hidden)]
    pub struct RetryState<C, Req, N> {
        call: Option<C>,
        req: Option<Req>,
        phase: Phase,
        // The budget token of the retry being waited for, given back if
        // the request is dropped first.
        token: Option<crate::retry::budget::Token>,
        // Boxed: only a request that is retried waits.
        sleep: Option<Pin<Box<Sleep>>>,
        #[pin]
        next: N,
    }
}

impl<S, N, Svc, Req> Chain<Svc, Req> for Then<RetryLevel<S>, N>
where
    S: RetrySpec,
    N: Chain<Svc, Req>,
    Svc: Resend<Req>,
    Svc::Error: LayerError + Exhaustion<S::Exhausted>,
    S::Classifier: Classify<Svc::Response, Svc::Error>,
{
    type State = RetryState<RetryOf<S, Svc::Response, Svc::Error>, Req, N::State>;

    const RETRIES: bool = true;

    #[inline(always)]
    fn idle() -> Self::State {
        RetryState {
            call: None,
            req: None,
            phase: Phase::Done,
            token: None,
            sleep: None,
            next: N::idle(),
        }
    }

    #[inline(always)]
    fn start(
        &self,
        state: Pin<&mut Self::State>,
        svc: &mut Svc,
        req: Req,
    ) -> Option<Out<Svc, Req>> {
        let st = state.project();
        let ops = crate::retry::ops::<S, Svc::Response, Svc::Error>()
            .judged_by(LayerJudge::<S::Classifier>::new());
        let key = const { &Key::of::<S>() };
        let call = st
            .call
            .insert(RetryCall::start(ops, crate::registry::lookup(key)));
        if let Some(refused) = call.refused() {
            *st.phase = Phase::Done;
            return Some(Err(refused));
        }
        match Svc::resend(&req, S::NAME) {
            Ok(spare) => *st.req = Some(spare),
            // Sent once, as it is: nothing would send it again.
            Err(_) if !call.may_retry() => {}
            Err(refused) => {
                call.ended_now(Outcome::Rejected);
                *st.phase = Phase::Done;
                return Some(Err(refused));
            }
        }
        *st.phase = Phase::Calling;
        let out = if Svc::MARKS_FIRST || N::RETRIES {
            let attempt = call.attempt();
            crate::retry::call_in(attempt, || self.1.start(st.next, svc, req))?
        } else {
            self.1.start(st.next, svc, req)?
        };
        match call.step(out) {
            Step::Done(out) => {
                *st.phase = Phase::Done;
                Some(out)
            }
            Step::Wait(wait) => {
                let (delay, token) = wait.into_parts();
                *st.token = token;
                *st.sleep = Some(Box::pin(tokio::time::sleep(delay)));
                *st.phase = Phase::Waiting;
                None
            }
        }
    }

    #[inline(always)]
    fn poll(
        &self,
        state: Pin<&mut Self::State>,
        cx: &mut Context<'_>,
        svc: &mut Svc,
    ) -> Poll<Out<Svc, Req>> {
        let mut st = state.project();
        loop {
            let out = match *st.phase {
                // Polled unmarked: only the retry's call of the inner
                // service is marked (below), which a layer that sets the
                // attempt header needs; marking each poll cost the first
                // call 31 instructions more (941 against 910 per call).
                // Marked when a retry is inside, which judges its failures
                // in its poll and must see this one (as an attribute
                // chain's inner retry sees the outer's).
                Phase::Calling if N::RETRIES => {
                    let next = st.next.as_mut();
                    let attempt = st.call.as_ref().map(RetryCall::attempt);
                    let inner = &self.1;
                    ready!(crate::retry::call_in_if(attempt, || inner.poll(next, cx, svc)))
                }
                Phase::Calling => ready!(self.1.poll(st.next.as_mut(), cx, svc)),
                Phase::Waiting => {
                    if let Some(sleep) = st.sleep.as_mut() {
                        ready!(sleep.as_mut().poll(cx));
                    }
                    *st.sleep = None;
                    *st.phase = Phase::Readying;
                    continue;
                }
                Phase::Readying => match ready!(svc.poll_ready(cx)) {
                    Ok(()) => {
                        // The retry starts: its token is spent.
                        *st.token = None;
                        *st.phase = Phase::Calling;
                        let req = match st.req.as_ref().map(|r| Svc::resend(r, S::NAME)) {
                            Some(Ok(req)) => req,
                            Some(Err(refused)) => {
                                *st.phase = Phase::Done;
                                if let Some(call) = st.call.as_mut() {
                                    call.ended_now(Outcome::Rejected);
                                }
                                return Poll::Ready(Err(refused));
                            }
                            // Not kept: a request no retry could copy,
                            // which its spec never retries.
                            None => {
                                *st.phase = Phase::Done;
                                return Poll::Pending;
                            }
                        };
                        // Marked with its attempt: a layer inside (such
                        // as `AttemptHeaderLayer`) sees it.
                        // One call of the parts' start (see the gate's).
                        let next = st.next.as_mut();
                        let attempt = st.call.as_ref().map(RetryCall::attempt);
                        let started =
                            crate::retry::call_in_if(attempt, || self.1.start(next, svc, req));
                        match started {
                            Some(out) => out,
                            None => continue,
                        }
                    }
                    // A service whose readiness failed is done (tower's
                    // contract): the call ends with its error, not retried.
                    Err(e) => {
                        *st.phase = Phase::Done;
                        if let (Some(token), Some(call)) = (st.token.take(), st.call.as_ref()) {
                            call.give_back(token);
                        }
                        if let Some(call) = st.call.as_mut() {
                            call.ended_now(Outcome::Failure);
                        }
                        return Poll::Ready(Err(Fail::Body(e)));
                    }
                },
                Phase::Done => return Poll::Pending,
            };
            let Some(call) = st.call.as_mut() else {
                *st.phase = Phase::Done;
                return Poll::Ready(out);
            };
            match call.step(out) {
                Step::Done(out) => {
                    *st.phase = Phase::Done;
                    return Poll::Ready(out);
                }
                Step::Wait(wait) => {
                    let (delay, token) = wait.into_parts();
                    *st.token = token;
                    *st.sleep = Some(Box::pin(tokio::time::sleep(delay)));
                    *st.phase = Phase::Waiting;
                }
            }
        }
    }

    #[inline(always)]
    fn stop(&self, state: Pin<&mut Self::State>) {
        let st = state.project();
        self.1.stop(st.next);
        *st.sleep = None;
        if let (Some(token), Some(call)) = (st.token.take(), st.call.as_ref()) {
            call.give_back(token);
        }
    }
}
