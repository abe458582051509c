//! Items the macros' generated code names. Not a public API: anything here may
//! change in any release.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;

pub use inventory;

use crate::chaos::ChaosCall;
pub use crate::chaos::{Chaos, ChaosSpec, Go as ChaosGo, Step as ChaosStep};
use crate::circuit_breaker::BreakerCall;
pub use crate::circuit_breaker::{Breaker, CircuitBreakerSpec};
use crate::concurrency::LimitCall;
pub use crate::concurrency::{ConcurrencyLimitSpec, Enter, Limiter};
pub use crate::error::Error;
pub use crate::fallback::{
    Answer, BlockingFallbackOutput, FallbackArity, FallbackErrorParam, FallbackFit, FallbackFn,
    FallbackOn, FallbackOutput, FallbackParam, FallbackParams, FallbackPathParam, FallbackReceiver,
    NewFit,
};
use crate::hedging::HedgeCall;
pub use crate::hedging::{unarmed as hedge_unarmed, HedgeStep, Hedges, Hedging, HedgingSpec};
pub use crate::http::Http;

/// The classifier of `classify = grpc`: [`crate::grpc::Grpc`], or, without
/// the `grpc` feature, an error that says which feature to enable.
#[cfg(feature = "grpc")]
#[macro_export]
#[doc(hidden)]
macro_rules! __grpc_classifier {
    () => {
        $crate::grpc::Grpc
    };
}

/// The classifier of `classify = grpc`: [`crate::grpc::Grpc`], or, without
/// the `grpc` feature, an error that says which feature to enable.
#[cfg(not(feature = "grpc"))]
#[macro_export]
#[doc(hidden)]
macro_rules! __grpc_classifier {
    () => {
        ::core::compile_error!(
            "`classify = grpc` needs the `grpc` feature of `resilient-core`: enable it in Cargo.toml (`resilient-core = { version = \"..\", features = [\"grpc\"] }`)"
        )
    };
}
use crate::keyed::{KeyRef, PartitionKey};
pub use crate::outcome::{Fail, ResultType};
use crate::rate_limiter::RateCall;
pub use crate::rate_limiter::{RateLimiter, RateLimiterSpec};
pub use crate::registry::uses::{Attr as ChainAttr, FnChain, Link as ChainLink, Shape as FnShape};
use crate::registry::{Key, Mechanism};
pub use crate::registry::{Slot, Spec, SpecEntry};
use crate::retry::{By, Judge, RetryCall};
pub use crate::retry::{
    Exhaustion, OpsOf, Retry, RetryOps, RetrySpec, ReturnError, ReturnLastFailure, Step,
};
pub use crate::spec::{AllErrors, Classifier, Classify, Verdict};
pub use crate::stream::Stream;
use crate::timeout::{Bounded, TimeoutCall, Timer, TimerSleep};
pub use crate::timeout::{Timeout, TimeoutSpec};
pub use __grpc_classifier as grpc_classifier;

/// The retry operations of spec `S` for a fn returning `R`: where
/// `#[retryable(S)]` states every requirement, each once, on a type the user
/// wrote. `T` and `E` come out of `R`'s bound, as in every fn here that the
/// return type reaches, so that a return type that is no `Result` fails one
/// bound, reported once at the return type, and leaves the rest unknown.
#[inline(always)]
pub fn retry_ops<S, R, T, E, M>() -> RetryOf<S, T, E, <E as GivesUpWith<S::Exhausted, M>>::Trail>
where
    S: RetrySpec,
    R: ResultType<Ok = T, Err = E>,
    E: GivesUpWith<S::Exhausted, M>,
    S::Classifier: Classify<T, E>,
{
    RetryOf(E::ops::<S, T>(), PhantomData)
}

/// The retry operations of spec `S` for `Result<T, E>`, their bounds
/// checked.
pub struct RetryOf<S, T, E, Tr>(RetryOps<T, E, Tr>, PhantomData<fn() -> S>);

/// An error type that retry can give up with under exhaustion mode `Mode`:
/// [`Exhaustion`], checked so that a failure is one error. `ReturnError` has
/// a second impl that never applies, so rustc weighs two candidates, finds
/// neither, and reports this trait once, instead of taking the one and
/// reporting each of its bounds (`Box<dyn Error>` would fail `Send`, `Sync`
/// and `Sized` separately).
#[diagnostic::on_unimplemented(
    message = "a retry spec that gives up with `resilient_core::Error::RetryExhausted` cannot keep `{Self}` as its source",
    label = "`{Self}` does not convert into `Box<dyn std::error::Error + Send + Sync>`",
    note = "a boxed error must be `Box<dyn std::error::Error + Send + Sync>`, and any other error type must implement `std::error::Error + Send + Sync` (for example with `thiserror`); or declare the spec with `#[spec(\"..\", exhausted = last_failure)]` to give up with the last failure unchanged"
)]
pub trait GivesUpWith<Mode, M>: Sized {
    /// What retry keeps of earlier failures.
    type Trail;
    /// The operations of spec `S` for `Result<T, Self>`.
    fn ops<S, T>() -> RetryOps<T, Self, Self::Trail>
    where
        S: RetrySpec<Exhausted = Mode>,
        S::Classifier: Classify<T, Self>;
}

/// The impl of [`GivesUpWith`] that applies.
#[derive(Debug)]
pub enum Applies {}

/// The impl of [`GivesUpWith`] that never applies.
#[derive(Debug)]
pub enum NeverApplies {}

/// Implemented by no type.
pub trait Unimplemented {}

macro_rules! gives_up_with {
    ($mode:ty, $m:ty, $($bound:tt)+) => {
        impl<E: $($bound)+> GivesUpWith<$mode, $m> for E {
            type Trail = <E as Exhaustion<$mode>>::Trail;
            #[inline]
            fn ops<S, T>() -> RetryOps<T, E, Self::Trail>
            where
                S: RetrySpec<Exhausted = $mode>,
                S::Classifier: Classify<T, E>,
            {
                crate::retry::ops::<S, T, E>()
            }
        }
    };
}

gives_up_with!(ReturnError, Applies, Exhaustion<ReturnError>);
gives_up_with!(
    ReturnError,
    NeverApplies,
    Exhaustion<ReturnError> + Unimplemented
);
gives_up_with!(ReturnLastFailure, Applies, Exhaustion<ReturnLastFailure>);

/// Starts a call under the retry operations `ops`; the generated code then
/// makes its attempts in a loop of its own. Its classification is typed as
/// any fn of the outcome, so that nothing after it has a bound that can
/// fail; the one here is [`retry_ops`]'s, reported once with it.
#[inline(always)]
pub fn retry<S, T, E, Tr: Default>(
    ops: RetryOf<S, T, E, Tr>,
) -> RetryCall<'static, T, E, Tr, impl Judge<T, E> + Copy>
where
    S: RetrySpec,
    S::Classifier: Classify<T, E>,
{
    let ops = ops.0.judged_by(By::<S::Classifier>::new());
    let instance = crate::registry::lookup(ops.key);
    RetryCall::start(ops, instance)
}

/// The breaker of spec `S` for a fn returning `R`; see [`retry_ops`].
#[inline(always)]
pub fn breaker_ops<S, R, T, E>() -> BreakerOf<S, T, E>
where
    S: CircuitBreakerSpec,
    R: ResultType<Ok = T, Err = E>,
    S::Classifier: Classify<T, E>,
{
    BreakerOf(PhantomData)
}

/// Spec `S` for `Result<T, E>`, its bounds checked.
pub struct BreakerOf<S, T, E>(PhantomData<Marker<S, T, E>>);

type Marker<S, T, E> = fn() -> (S, T, E);

/// Starts a call through the breaker of `S`. Its classification is typed as
/// any fn of the outcome, so that nothing after it has a bound that can
/// fail; the one here is [`breaker_ops`]'s, reported once with it.
#[inline(always)]
pub fn circuit_breaker<S, T, E>(
    _: BreakerOf<S, T, E>,
) -> BreakerCall<'static, impl Fn(&Result<T, E>) -> Verdict + Copy>
where
    S: CircuitBreakerSpec,
    S::Classifier: Classify<T, E>,
{
    let ops = crate::circuit_breaker::ops::<S, T, E>();
    let instance = crate::registry::lookup(ops.key);
    BreakerCall::new(ops, instance)
}

/// Starts a call through the breaker of the key `key` among
/// the keyed breakers of `S` (`#[circuit_breakable(S, key = ..)]`).
#[inline(always)]
pub fn circuit_breaker_keyed<S, T, E>(
    _: BreakerOf<S, T, E>,
    key: KeyRef<'_>,
) -> BreakerCall<'static, impl Fn(&Result<T, E>) -> Verdict + Copy>
where
    S: CircuitBreakerSpec,
    S::Classifier: Classify<T, E>,
{
    let ops = crate::circuit_breaker::ops::<S, T, E>();
    let instance = crate::registry::lookup_keyed(ops.key, key);
    BreakerCall::new(ops, instance)
}

/// Starts a keyed call (`start`) with the text of a key expression's value,
/// checked where the user wrote it: the only bound on the key, so that a
/// key that is no `PartitionKey` is reported once, at the key.
#[inline(always)]
pub fn key<K: PartitionKey + ?Sized, R>(key: &K, start: impl FnOnce(KeyRef<'_>) -> R) -> R {
    key.with_key(start)
}

/// The hedging spec `S` for a fn returning `R`; see [`retry_ops`].
#[inline(always)]
pub fn hedge_ops<S, R, T, E>() -> HedgeOf<S, T, E>
where
    S: HedgingSpec,
    R: ResultType<Ok = T, Err = E>,
    S::Classifier: Classify<T, E>,
{
    HedgeOf(PhantomData)
}

/// Hedging spec `S` for `Result<T, E>`, its bounds checked.
pub struct HedgeOf<S, T, E>(PhantomData<Marker<S, T, E>>);

/// Starts a call under the hedging spec of `S`; the generated code then
/// starts its attempts in a loop of its own. Its bound is [`hedge_ops`]'s,
/// reported once with it.
#[inline(always)]
pub fn hedge<S, T, E>(
    _: HedgeOf<S, T, E>,
) -> HedgeCall<'static, T, E, impl Fn(&Result<T, E>) -> Verdict + Copy>
where
    S: HedgingSpec,
    S::Classifier: Classify<T, E>,
{
    let ops = crate::hedging::ops::<S, T, E>();
    let instance = crate::registry::lookup(ops.key);
    HedgeCall::start(ops, instance)
}

/// An argument that hedging passes to each attempt.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be passed to each hedged attempt",
    label = "this argument is not `Clone`",
    note = "`#[hedged]` runs the body once per attempt with a fresh clone of each owned argument: implement `Clone` for `{Self}`, or take it by shared reference (`&{Self}`)"
)]
pub trait HedgeArg: Clone {}

impl<T: Clone> HedgeArg for T {}

/// A fresh clone of an argument, for one hedged attempt.
pub fn hedge_arg<T: HedgeArg>(arg: &T) -> T {
    arg.clone()
}

/// A receiver taken by value that hedging clones for each attempt.
#[diagnostic::on_unimplemented(
    message = "`#[hedged]` needs a fresh receiver for each attempt, and `{Self}` is not `Clone`",
    label = "the receiver is taken by value here",
    note = "take `&self` (each attempt borrows the receiver), or `self: Arc<Self>` (each attempt gets a clone of the `Arc`), or implement `Clone` for `{Self}`"
)]
pub trait HedgeReceiver: Clone {}

impl<T: Clone> HedgeReceiver for T {}

/// A fresh clone of the receiver, for one hedged attempt.
pub fn hedge_receiver<T: HedgeReceiver>(receiver: &T) -> T {
    receiver.clone()
}

/// Where a spec without classification lives: its name, path, type and
/// slot.
#[derive(Debug)]
pub struct SpecRef<M: Mechanism>(&'static Key<M>);

impl<M: Mechanism> Clone for SpecRef<M> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<M: Mechanism> Copy for SpecRef<M> {}

fn spec_ref<S: Spec>() -> SpecRef<S::Mechanism> {
    SpecRef(const { &Key::of::<S>() })
}

/// The timeout spec `S`, checked where the user named it.
pub fn timeout_spec<S: TimeoutSpec>() -> SpecRef<Timeout> {
    spec_ref::<S>()
}

/// The concurrency limit spec `S`, checked where the user named it.
pub fn concurrency_spec<S: ConcurrencyLimitSpec>() -> SpecRef<Limiter> {
    spec_ref::<S>()
}

/// The rate limiter spec `S`, checked where the user named it.
pub fn rate_spec<S: RateLimiterSpec>() -> SpecRef<RateLimiter> {
    spec_ref::<S>()
}

/// The chaos spec `S`, checked where the user named it.
pub fn chaos_spec<S: ChaosSpec>() -> SpecRef<Chaos> {
    spec_ref::<S>()
}

/// Starts a call under the chaos spec `spec`.
#[inline(always)]
pub fn chaos(spec: SpecRef<Chaos>) -> ChaosCall<'static> {
    let instance = crate::registry::lookup(spec.0);
    ChaosCall::new(spec.0, instance)
}

/// Starts a call under the timeout spec `spec`.
#[inline(always)]
pub fn timeout(spec: SpecRef<Timeout>) -> TimeoutCall<'static> {
    let instance = crate::registry::lookup(spec.0);
    TimeoutCall::new(spec.0, instance)
}

/// An await inside `#[timeout]`: `fut`, or [`Error::Timeout`] when the
/// limit of `timer` passes first.
#[inline(always)]
pub fn bounded<'a, F: Future>(
    timer: &'a Timer<'a>,
    sleep: Pin<&'a mut TimerSleep>,
    fut: Pin<&'a mut F>,
) -> Bounded<'a, F> {
    Bounded::new(timer, sleep, fut)
}

/// A timer's sleep, before the timer is armed.
#[inline(always)]
pub fn unarmed() -> TimerSleep {
    None
}

/// Starts a call under the concurrency limit spec `spec`.
#[inline(always)]
pub fn concurrency_limit(spec: SpecRef<Limiter>) -> LimitCall<'static> {
    let instance = crate::registry::lookup(spec.0);
    LimitCall::new(spec.0, instance)
}

/// Starts a call under the rate limiter spec `spec`.
#[inline(always)]
pub fn rate_limited(spec: SpecRef<RateLimiter>) -> RateCall {
    RateCall::new(spec.0, crate::registry::lookup(spec.0))
}

/// Starts a call under the concurrency limit of the key `key`
/// among the keyed limits of `spec`.
#[inline(always)]
pub fn concurrency_limit_keyed(spec: SpecRef<Limiter>, key: KeyRef<'_>) -> LimitCall<'static> {
    let instance = crate::registry::lookup_keyed(spec.0, key);
    LimitCall::new(spec.0, instance)
}

/// Starts a call under the rate limiter of the key `key`
/// among the keyed rate limiters of `spec`.
#[inline(always)]
pub fn rate_limited_keyed(spec: SpecRef<RateLimiter>, key: KeyRef<'_>) -> RateCall {
    let instance = crate::registry::lookup_keyed(spec.0, key);
    RateCall::new(spec.0, instance)
}

/// The outcome of what is inside a `#[fallback]`, passed on (`Ok`), or the
/// error its fallback is to answer (`Err`).
#[inline(always)]
pub fn fallback_decide<T, E>(
    fn_name: &'static str,
    on: FallbackOn<E>,
    wrap: fn(Error) -> E,
    outcome: Result<T, Fail<E>>,
) -> Result<Result<T, Fail<E>>, E> {
    crate::fallback::decide(fn_name, &on, wrap, outcome)
}

/// The fallback's answer, entering the chain as the body's outcome would.
#[inline(always)]
pub fn fallback_done<T, E>(answer: Result<T, E>) -> Result<T, Fail<E>> {
    answer.map_err(Fail::Body)
}

/// The fallback's output as an answer of the fn's output `R`: its one
/// check, so that a wrong output type is reported once, at the `method`
/// string.
#[inline(always)]
pub fn fallback_output<R, T, E, X, M>(output: X) -> Answer<T, E, X::Future>
where
    R: ResultType<Ok = T, Err = E>,
    X: FallbackOutput<T, E, M>,
{
    output.into_answer()
}

/// The body's stream, entering a stream's chain of layers (see
/// [`crate::stream`]). No bound here: the macro checks the body's stream
/// against the fn's return type where the user wrote it (a bound here
/// would report a mismatch a second time, at the body).
#[inline(always)]
pub fn stream_lift<S>(body: S) -> crate::stream::Lift<S> {
    crate::stream::lift(body)
}

/// A stream's chain as the fn returns it.
#[inline(always)]
pub fn stream_lower<S, E>(wrap: fn(Error) -> E, chain: S) -> crate::stream::Lower<S, E> {
    crate::stream::lower(wrap, chain)
}

/// A breaker's layer of a stream, around what `make` makes; `start`
/// looks the breaker up at the stream's first poll.
#[inline(always)]
pub fn stream_breaker<G, C, F, S>(start: G, make: F) -> crate::stream::BreakerStream<G, C, F, S>
where
    G: FnOnce() -> BreakerCall<'static, C>,
{
    crate::stream::breaker(start, make)
}

/// A concurrency limit's layer of a stream.
#[inline(always)]
pub fn stream_limit<G, F, S>(start: G, make: F) -> crate::stream::LimitStream<G, F, S>
where
    G: FnOnce() -> LimitCall<'static>,
{
    crate::stream::gate(start, make)
}

/// A rate limiter's layer of a stream.
#[inline(always)]
pub fn stream_rate<G, F, S>(start: G, make: F) -> crate::stream::RateStream<G, F, S>
where
    G: FnOnce() -> RateCall,
{
    crate::stream::gate(start, make)
}

/// A fallback's layer of a stream: `fallback` makes the replacement.
#[inline(always)]
pub fn stream_fallback<F, S, G, R, E>(
    fn_name: &'static str,
    on: FallbackOn<E>,
    wrap: fn(Error) -> E,
    make: F,
    fallback: G,
) -> crate::stream::FallbackStream<F, S, G, R, E> {
    crate::stream::fallback(fn_name, on, wrap, make, fallback)
}

/// A stream fn's fallback's output, of the fn's item type `R`, entering
/// the chain (its one check, at the `method` string).
#[inline(always)]
pub fn fallback_stream<R, T, E, X, M>(output: X) -> crate::stream::Lift<X::Stream>
where
    R: ResultType<Ok = T, Err = E>,
    X: crate::stream::StreamFallbackOutput<T, E, M>,
{
    crate::stream::lift(output.into_stream())
}

/// A timeout's layer of a stream.
#[inline(always)]
pub fn stream_timeout<G, F, S>(start: G, make: F) -> crate::stream::TimeoutStream<G, F, S>
where
    G: FnOnce() -> TimeoutCall<'static>,
{
    crate::stream::timeout(start, make)
}

/// A retry's layer of a stream: `make` makes the stream for each attempt;
/// `start` starts the retry's call at the first poll.
#[inline(always)]
pub fn stream_retry<G, F, S, T, E, Tr, J>(
    start: G,
    make: F,
) -> crate::stream::RetryStream<G, F, S, T, E, Tr, J>
where
    G: FnOnce() -> RetryCall<'static, T, E, Tr, J>,
{
    crate::stream::retry(start, make)
}

/// The answer of a blocking fn's fallback: its output, of the fn's output
/// type `R` (the one check, at the `method` string).
#[inline(always)]
pub fn fallback_now<R, T, E, X>(output: X) -> Result<T, Fail<E>>
where
    R: ResultType<Ok = T, Err = E>,
    X: BlockingFallbackOutput<T, E>,
{
    output.into_result().map_err(Fail::Body)
}

/// The fallback `target`'s parameters, matched against the arguments and
/// the error: what the checks below match each argument against.
/// `R` is the annotated fn's output, whose error type the fallback gets.
#[inline(always)]
pub fn fallback_fit<R, F, M, A, E>(_target: &F, _args: &A, _error: &E) -> A::Fit
where
    R: ResultType<Err = E>,
    F: FallbackParams<M>,
    A: FallbackArity<F::List, E>,
    A::Fit: NewFit,
{
    A::Fit::new_fit()
}

/// Argument `arg`, passed as the fallback's parameter `I` of type `X`.
#[inline(always)]
pub fn fallback_param<X, A, const I: usize>(_param: PhantomData<X>, arg: A) -> X
where
    A: FallbackParam<X, I>,
{
    arg.into_param()
}

/// As [`fallback_param`], for a fallback named by a path from `Self`.
#[inline(always)]
pub fn fallback_path_param<X, A, const I: usize>(_param: PhantomData<X>, arg: A) -> X
where
    A: FallbackPathParam<X, I>,
{
    arg.into_param()
}

/// The receiver, passed as a fallback method's of type `X`.
#[inline(always)]
pub fn fallback_receiver<X, A>(_param: PhantomData<X>, receiver: A) -> X
where
    A: FallbackReceiver<X>,
{
    receiver.into_receiver()
}

/// The body's outcome (of the fn's return type `R`), entering the chain.
#[inline]
pub fn body<R, T, E>(outcome: R) -> Result<T, Fail<E>>
where
    R: ResultType<Ok = T, Err = E>,
{
    outcome.into_result().map_err(Fail::Body)
}

/// How a resilience error becomes the error of a fn returning `R`. Checked
/// apart from the chain, so that a missing `From` impl is reported once, at
/// the return type.
#[inline]
pub fn error_wrap<R, E>() -> fn(Error) -> E
where
    R: ResultType<Err = E>,
    E: ResilientError,
{
    E::from_resilient
}

/// The chain's outcome, leaving it as the fn's return type `R`: a resilience
/// error becomes the fn's error through `wrap`. Typed as `R` itself, so that
/// a return type that is no `Result` is reported once, by its bound, and not
/// again as a mismatch.
#[inline]
pub fn finish<R, T, E>(outcome: Result<T, Fail<E>>, wrap: fn(Error) -> E) -> R
where
    R: ResultType<Ok = T, Err = E>,
{
    R::from_result(outcome.map_err(|fail| fail.into_error(wrap)))
}

/// An error type that can carry a resilience failure.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot carry a resilience failure",
    label = "`{Self}` does not implement `From<resilient_core::Error>`",
    note = "if `{Self}` is your own type, add a variant for it, for example `#[error(transparent)] Resilience(#[from] resilient_core::Error)` with thiserror",
    note = "if it is not (`String`, `&str`, `std::io::Error`, another crate's error), return an error type that can carry both: your own enum with such a variant beside one for `{Self}`, `Box<dyn std::error::Error + Send + Sync>`, or `anyhow::Error`"
)]
pub trait ResilientError {
    /// `From::from`, without making `From<Error>` a supertrait (which would
    /// report a missing impl twice).
    fn from_resilient(e: Error) -> Self;
}

// Not recommended: a missing impl is then reported as this trait's, in the
// words above, not as `From`'s with a list of its unrelated impls.
#[diagnostic::do_not_recommend]
impl<E: From<Error>> ResilientError for E {
    fn from_resilient(e: Error) -> Self {
        E::from(e)
    }
}

/// An argument that retry passes again to each attempt.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be passed to the body again on retry",
    label = "this argument is not `Clone`",
    note = "`#[retryable]` runs the body once per attempt with a fresh clone of each owned argument: implement `Clone` for `{Self}`, or take it by shared reference (`&{Self}`)"
)]
pub trait RetryArg: Clone {}

impl<T: Clone> RetryArg for T {}

/// An argument a fallback gets a clone of.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be passed to the fallback",
    label = "this argument is not `Clone`",
    note = "the fallback gets clones of the arguments named in `method = \"..\"`: implement `Clone` for `{Self}`, take it by shared reference, or leave it out of `method`"
)]
pub trait FallbackArg: Clone {}

impl<T: Clone> FallbackArg for T {}

/// A clone of an argument, for the fallback.
pub fn fallback_arg<T: FallbackArg>(arg: &T) -> T {
    arg.clone()
}

/// A fresh clone of an argument, for one attempt.
pub fn clone_arg<T: RetryArg>(arg: &T) -> T {
    arg.clone()
}

/// A receiver taken by value (`self`, `self: Box<Self>`) that retry clones
/// for each attempt.
#[diagnostic::on_unimplemented(
    message = "`#[retryable]` needs a fresh receiver for each attempt, and `{Self}` is not `Clone`",
    label = "the receiver is taken by value here",
    note = "take `&self` (each attempt borrows the receiver), or `self: Arc<Self>` (each attempt gets a clone of the `Arc`), or implement `Clone` for `{Self}`"
)]
pub trait RetryReceiver: Clone {}

impl<T: Clone> RetryReceiver for T {}

/// A fresh clone of the receiver, for one attempt.
pub fn clone_receiver<T: RetryReceiver>(receiver: &T) -> T {
    receiver.clone()
}

/// A receiver taken by value that a fallback method is called on: it gets
/// a clone, made before the call consumes the receiver.
#[diagnostic::on_unimplemented(
    message = "the fallback method is called on a clone of the receiver, and `{Self}` is not `Clone`",
    label = "the receiver is taken by value here",
    note = "take `&self` in both methods, or `self: Arc<Self>`, or implement `Clone` for `{Self}`; or name a free fn as the fallback (a path such as `crate::cache::lookup(id)`)"
)]
pub trait FallbackReceiverArg: Clone {}

impl<T: Clone> FallbackReceiverArg for T {}

/// A clone of the receiver, for a fallback method.
pub fn fallback_receiver_arg<T: FallbackReceiverArg>(receiver: &T) -> T {
    receiver.clone()
}

/// A blocking fn's body (or a stream fn's), called once: an `FnOnce`, so
/// that it may return borrows of what it captured, as the fn could.
#[inline(always)]
pub fn call_once<R>(body: impl FnOnce() -> R) -> R {
    body()
}

/// A blocking fn's body under a retry: called with the thread marked with
/// the attempt when it is a retry (see `retry::current_attempt`).
#[inline(always)]
pub fn call_in_attempt<R>(attempt: crate::retry::Attempt, body: impl FnOnce() -> R) -> R {
    crate::retry::call_in(attempt, body)
}

/// An async fn's body under a retry: polled with the thread marked with the
/// attempt when it is a retry (see `retry::current_attempt`).
#[inline(always)]
pub fn in_attempt<F>(attempt: crate::retry::Attempt, body: F) -> crate::retry::InAttempt<F> {
    crate::retry::InAttempt::new(attempt, body)
}
