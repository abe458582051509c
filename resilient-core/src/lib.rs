//! Resilience for async Rust by annotation: retry an `async fn`, run it
//! through a circuit breaker, a timeout, a concurrency limit or a rate
//! limiter, or answer its failures with a fallback, by writing one attribute
//! each, with settings read from configuration and validated when the
//! application starts.
//!
//! The [guide] has a chapter for each mechanism (its settings, what each
//! does), for composing them, for configuration, keyed instances, Redis,
//! tower, telemetry, operations, testing and migrating from other
//! libraries. This page lists the attributes and the modules they live in.
//!
//! | attribute | spec derive | module |
//! |---|---|---|
//! | `#[retryable(Spec)]` | `RetrySpec` | [`retry`] |
//! | `#[circuit_breakable(Spec)]`, `#[circuit_breakable(Spec, key = expr)]` | `CircuitBreakerSpec` | [`circuit_breaker`], [`keyed`] |
//! | `#[timeout(Spec)]` | `TimeoutSpec` | [`timeout`](mod@timeout) |
//! | `#[concurrency_limit(Spec)]`, `#[concurrency_limit(Spec, key = expr)]` | `ConcurrencyLimitSpec` | [`concurrency`], [`keyed`] |
//! | `#[rate_limited(Spec)]`, `#[rate_limited(Spec, key = expr)]` | `RateLimiterSpec` | [`rate_limiter`], [`keyed`] |
//! | `#[fallback(method = "name(args)")]` | none | [`fallback`](mod@fallback) |
//! | `#[chaos(Spec)]` | `ChaosSpec` | [`chaos`](mod@chaos) |
//! | `#[hedged(Spec)]` | `HedgingSpec` | [`hedging`] |
//!
//! All but `#[timeout]`, `#[chaos]` and `#[hedged]` also go on a blocking
//! fn (a plain `fn -> Result<T, E>`, see [`blocking`]), and all but the
//! last two on a fn that returns a stream of results (see [`stream`]).
//!
//! ```
//! use resilient_core::prelude::*; // the derives, their traits, the attributes
//!
//! #[derive(RetrySpec)]
//! #[spec("resilient.retry.pet")]
//! pub struct PetRetry;
//!
//! #[derive(Debug, thiserror::Error)]
//! pub enum PetError {
//!     #[error("pet store unavailable")]
//!     Unavailable,
//!     #[error(transparent)]
//!     Resilience(#[from] resilient_core::Error),
//! }
//!
//! #[retryable(PetRetry)]
//! pub async fn find(id: u64) -> Result<String, PetError> {
//!     Ok(format!("pet {id}"))
//! }
//! ```
//!
//! With its section in the configuration (keys at the spec's absolute path,
//! nothing inherited; see [`retry::RetrySettings`] for every key):
//!
//! ```toml
//! [resilient.retry.pet]
//! delay = "100ms"
//! attempts = 2      # retries after the first call: at most 3 calls
//! ```
//!
//! and the registry built and installed at startup by
//! `resilient_config::init(&config)`, which reports every problem of every spec
//! in the binary at once. Until then, an annotated fn returns
//! [`Error::NotConfigured`] through its error type; it never panics.
//!
//! # Specs
//!
//! A spec is a unit struct with a derive per mechanism ([`RetrySpec`]) and a
//! `#[spec("absolute.path")]` attribute. Every fn annotated with the same spec
//! shares one instance of its state (for retry: its budget).
//!
//! # Failure classification
//!
//! By default every `Err` is a failure and every `Ok` a success. A spec
//! declared with `classify = custom` implements [`Classify`] for the result
//! types it is used with, and can count an `Ok` value as a failure (an HTTP
//! client's `Ok(response)` with status 503), let an error pass through
//! untouched ([`Verdict::Ignore`]), or say how long to wait before the next
//! attempt ([`Verdict::RetryAfter`]). Specs that classify alike name one
//! shared type, `classify = PetOutcomes` (see [`Classifier`]); HTTP
//! responses are classified ready-made with `classify = http` (see
//! [`http`]), and gRPC outcomes with `classify = grpc` (feature `grpc`, see
//! `grpc`).
//!
//! # Order
//!
//! Resilience attributes on one fn nest in the order written: the top one is
//! the outermost wrapper, the one right above the fn the innermost (closest to
//! the body). The first resilience attribute collects every resilience
//! attribute below it and builds the whole chain, so the order you read is the
//! order that runs; other attributes (docs, `#[allow]`,
//! `#[tracing::instrument]`) are kept as written. Put `#[tracing::instrument]`
//! below the resilience attributes for its span to cover the whole chain (see
//! [`telemetry`]). Each resilience attribute may appear once per fn:
//!
//! ```compile_fail
//! # use resilient_core::{retryable, RetrySpec};
//! # #[derive(RetrySpec)] #[spec("a")] pub struct A;
//! # #[derive(RetrySpec)] #[spec("b")] pub struct B;
//! # #[derive(Debug, thiserror::Error)] #[error("e")] pub struct E(#[from] resilient_core::Error);
//! #[retryable(A)]
//! #[retryable(B)] // error: `#[retryable]` is given twice on this fn
//! async fn twice() -> Result<(), E> { Ok(()) }
//! ```
//!
//! Two orders of the same attributes, and what each records. A breaker above
//! a retry sees one outcome per call; below it, one per attempt:
//!
//! ```
//! use std::sync::atomic::{AtomicU32, Ordering};
//! use resilient_core::{circuit_breakable, retryable, settings::Value};
//! use resilient_core::{CircuitBreakerSpec, Registry, RetrySpec};
//!
//! #[derive(RetrySpec)]
//! #[spec("order.retry")]
//! pub struct OrderRetry;
//!
//! #[derive(CircuitBreakerSpec)]
//! #[spec("order.outside")]
//! pub struct Outside;
//!
//! #[derive(CircuitBreakerSpec)]
//! #[spec("order.inside")]
//! pub struct Inside;
//!
//! #[derive(Debug, thiserror::Error)]
//! #[error("failed")]
//! pub struct Failed;
//! impl From<resilient_core::Error> for Failed {
//!     fn from(_: resilient_core::Error) -> Self { Failed }
//! }
//!
//! static CALLS: AtomicU32 = AtomicU32::new(0);
//!
//! /// Docs and lint attributes stay where they are.
//! #[circuit_breakable(Outside)] // outermost: sees the whole retried call
//! #[retryable(OrderRetry)]
//! #[deny(unused_variables)]
//! async fn breaker_outside() -> Result<(), Failed> {
//!     CALLS.fetch_add(1, Ordering::SeqCst);
//!     Err(Failed)
//! }
//!
//! #[retryable(OrderRetry)]
//! #[circuit_breakable(Inside)] // innermost: sees every attempt
//! async fn breaker_inside() -> Result<(), Failed> {
//!     CALLS.fetch_add(1, Ordering::SeqCst);
//!     Err(Failed)
//! }
//!
//! # fn table(pairs: Vec<(&str, Value)>) -> Value {
//! #     Value::Table(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
//! # }
//! let retry = table(vec![("delay", Value::Str("0s".into())), ("attempts", Value::Int(2))]);
//! let breaker = || table(vec![
//!     ("failure_rate_threshold", Value::Int(100)),
//!     ("minimum_required_calls", Value::Int(100)),
//!     ("wait_duration_in_open_state", Value::Str("1s".into())),
//!     ("permitted_calls_in_half_open_state", Value::Int(1)),
//!     ("count_based", table(vec![("window_size", Value::Int(100))])),
//! ]);
//! let root = table(vec![("order", table(vec![
//!     ("retry", retry), ("outside", breaker()), ("inside", breaker()),
//! ]))]);
//! let registry = Registry::builder()
//!     .spec::<OrderRetry>().spec::<Outside>().spec::<Inside>()
//!     .build(&root).unwrap();
//! # let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
//! rt.block_on(registry.scope(breaker_outside())).unwrap_err();
//! rt.block_on(registry.scope(breaker_inside())).unwrap_err();
//! assert_eq!(CALLS.load(Ordering::SeqCst), 3 + 3); // 1 + 2 attempts each
//! let outside = registry.sync_scope(Outside::get).unwrap().metrics();
//! let inside = registry.sync_scope(Inside::get).unwrap().metrics();
//! assert_eq!(outside.window.failures, 1); // one per call
//! assert_eq!(inside.window.failures, 3); // one per attempt
//! ```
//!
//! # Crates
//!
//! `resilient-core` (this crate) holds the mechanisms, their settings and
//! validation, the registry and the error type, and re-exports the macros;
//! `resilient-config` reads settings from a `config::Config`.

#![warn(missing_docs)]

#[cfg(feature = "admin")]
pub mod admin;
pub mod backend;
pub mod blocking;
pub mod chaos;
pub mod circuit_breaker;
pub mod concurrency;
mod error;
pub mod explain;
pub mod fallback;
mod gate;
#[cfg(feature = "grpc")]
pub mod grpc;
pub mod guide;
pub mod hedging;
pub mod http;
pub mod keyed;
#[cfg(feature = "tower")]
pub mod layer;
mod outcome;
pub mod prelude;
pub mod rate_limiter;
pub mod registry;
pub mod retry;
pub mod settings;
#[cfg(feature = "simulate")]
pub mod simulate;
mod spec;
pub mod stream;
pub mod telemetry;
pub mod timeout;
mod versions;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

/// README.md's Rust blocks, compiled (and run) by `cargo test`.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;

pub use chaos::{ChaosHandle, ChaosSpec};
pub use circuit_breaker::{CircuitBreakerHandle, CircuitBreakerSpec, Permit};
pub use concurrency::{ConcurrencyLimitHandle, ConcurrencyLimitSpec, ConcurrencyPermit};
pub use error::{BoxError, Error, Exhausted, FailedValue, GaveUp, Unconfigured};
pub use hedging::{HedgingHandle, HedgingSpec};
pub use rate_limiter::{RateLimiterHandle, RateLimiterSpec};
pub use registry::{
    AlreadyInstalled, DefaultGuard, Mechanism, Registry, RegistryBuilder, Reloaded, Snapshot, Spec,
    SpecChange, SpecEntry, SpecSnapshot, Subscription,
};
pub use retry::{RetryHandle, RetrySpec};
pub use spec::{AllErrors, Cause, Classifier, Classify, SpecKind, Verdict};
pub use timeout::{TimeoutHandle, TimeoutSpec};

/// Retries an `async fn` under a retry spec: `#[retryable(PetRetry)]`; on a
/// plain fn, its delays block the thread (see [`blocking`]).
///
/// The fn keeps its exact signature. Each attempt runs the body with fresh
/// clones of the owned arguments (references and `&self` are copied), so an
/// owned argument must be `Clone`, and `&mut` arguments (`&mut self` included)
/// are refused. The fn must return `Result<T, E>` with
/// `E: From<resilient_core::Error>`.
///
/// See the [crate docs](crate#order) for how several resilience attributes on
/// one fn nest.
///
/// # Example
///
/// ```
/// use resilient_core::prelude::*;
///
/// #[derive(RetrySpec)]
/// #[spec("resilient.retry.pet")]
/// pub struct PetRetry;
/// #[derive(Debug, thiserror::Error)]
/// pub enum PetError {
///     #[error("the store is down")]
///     Down,
///     #[error(transparent)]
///     Resilience(#[from] resilient_core::Error),
/// }
///
/// #[retryable(PetRetry)]
/// pub async fn find(id: u64) -> Result<String, PetError> {
///     Ok(format!("pet {id}"))
/// }
/// ```
pub use resilient_macros::retryable;

/// Runs an `async fn` through a circuit breaker: `#[circuit_breakable(PetBreaker)]`;
/// a plain fn too (see [`blocking`]).
///
/// The fn keeps its exact signature and must return `Result<T, E>` with
/// `E: From<resilient_core::Error>`; a rejected call returns
/// [`Error::CallNotPermitted`] through `E` without running the body. See
/// [`circuit_breaker`] for the states and settings.
///
/// `#[circuit_breakable(HostBreaker, key = host)]` gives each value of the
/// expression `host` (over the fn's arguments) a breaker of its own; see
/// [`keyed`].
///
/// # Example
///
/// ```
/// use resilient_core::prelude::*;
///
/// #[derive(CircuitBreakerSpec)]
/// #[spec("resilient.circuitbreaker.pet")]
/// pub struct PetBreaker;
/// #[derive(Debug, thiserror::Error)]
/// pub enum PetError {
///     #[error("the store is down")]
///     Down,
///     #[error(transparent)]
///     Resilience(#[from] resilient_core::Error),
/// }
///
/// #[circuit_breakable(PetBreaker)]
/// pub async fn find(id: u64) -> Result<String, PetError> {
///     Ok(format!("pet {id}"))
/// }
/// ```
pub use resilient_macros::circuit_breakable;

/// Declares a circuit breaker spec:
/// `#[derive(CircuitBreakerSpec)] #[spec("resilient.circuitbreaker.pet")]`.
///
/// Option after the path: `classify = ..` (`all_errors`, `custom`, `http`,
/// `grpc` with the `grpc` feature, or a shared classifier type; see
/// [`Classify`]).
///
/// # Example
///
/// ```
/// use resilient_core::prelude::*;
///
/// #[derive(CircuitBreakerSpec)]
/// #[spec("resilient.circuitbreaker.pet")]
/// pub struct PetBreaker;
/// ```
///
/// with its section in the configuration:
///
/// ```toml
/// [resilient.circuitbreaker.pet]
/// failure_rate_threshold = 50
/// minimum_required_calls = 10
/// wait_duration_in_open_state = "30s"
/// permitted_calls_in_half_open_state = 2
/// count_based = { window_size = 20 }
/// ```
pub use resilient_macros::CircuitBreakerSpec;

/// Answers a failed call with another method's result:
/// `#[fallback(method = "cached(id)")]`.
///
/// See [`fallback`](mod@fallback) for the reference syntax, the optional error
/// parameter, sync and async fallbacks, and `on = ..` / `when = ..`.
///
/// # Example
///
/// ```
/// use resilient_core::prelude::*;
///
/// #[derive(RetrySpec)]
/// #[spec("resilient.retry.pet")]
/// pub struct PetRetry;
///
/// #[derive(Debug, thiserror::Error)]
/// pub enum PetError {
///     #[error("the store is down")]
///     Down,
///     #[error(transparent)]
///     Resilience(#[from] resilient_core::Error),
/// }
///
/// pub struct PetClient;
///
/// impl PetClient {
///     #[fallback(method = "cached(id)")] // outermost: sees what retry gave up on
///     #[retryable(PetRetry)]
///     pub async fn find(&self, id: u64) -> Result<String, PetError> {
///         Err(PetError::Down)
///     }
///
///     fn cached(&self, id: u64) -> Result<String, PetError> {
///         Ok(format!("pet {id} (cached)"))
///     }
/// }
/// ```
pub use resilient_macros::fallback;

/// Gives up on an `async fn` that takes too long: `#[timeout(PetTimeout)]`.
///
/// The call's future is dropped when the limit passes, and the fn returns
/// [`Error::Timeout`] through its error type. See [`timeout`](mod@timeout).
///
/// # Example
///
/// ```
/// use resilient_core::prelude::*;
///
/// #[derive(TimeoutSpec)]
/// #[spec("resilient.timeout.pet")]
/// pub struct PetTimeout;
/// #[derive(Debug, thiserror::Error)]
/// pub enum PetError {
///     #[error("the store is down")]
///     Down,
///     #[error(transparent)]
///     Resilience(#[from] resilient_core::Error),
/// }
///
/// #[timeout(PetTimeout)]
/// pub async fn find(id: u64) -> Result<String, PetError> {
///     Ok(format!("pet {id}"))
/// }
/// ```
pub use resilient_macros::timeout;

/// Declares a timeout spec: `#[derive(TimeoutSpec)] #[spec("resilient.timeout.pet")]`.
///
/// # Example
///
/// ```
/// use resilient_core::prelude::*;
///
/// #[derive(TimeoutSpec)]
/// #[spec("resilient.timeout.pet")]
/// pub struct PetTimeout;
/// ```
///
/// with its section in the configuration:
///
/// ```toml
/// [resilient.timeout.pet]
/// duration = "2s"
/// ```
pub use resilient_macros::TimeoutSpec;

/// Limits how many calls run at once: `#[concurrency_limit(Reviews)]`; on a
/// plain fn, a `block` limit's wait blocks the thread (see [`blocking`]).
///
/// A rejected call returns [`Error::ConcurrencyLimitReached`] through the
/// fn's error type. See [`concurrency`]. With `key = expr`, one limit per
/// value of the expression; see [`keyed`].
///
/// # Example
///
/// ```
/// use resilient_core::prelude::*;
///
/// #[derive(ConcurrencyLimitSpec)]
/// #[spec("resilient.concurrency.pet")]
/// pub struct PetLimit;
/// #[derive(Debug, thiserror::Error)]
/// pub enum PetError {
///     #[error("the store is down")]
///     Down,
///     #[error(transparent)]
///     Resilience(#[from] resilient_core::Error),
/// }
///
/// #[concurrency_limit(PetLimit)]
/// pub async fn find(id: u64) -> Result<String, PetError> {
///     Ok(format!("pet {id}"))
/// }
/// ```
pub use resilient_macros::concurrency_limit;

/// Declares a concurrency limit spec:
/// `#[derive(ConcurrencyLimitSpec)] #[spec("resilient.concurrency.reviews")]`.
///
/// # Example
///
/// ```
/// use resilient_core::prelude::*;
///
/// #[derive(ConcurrencyLimitSpec)]
/// #[spec("resilient.concurrency.pet")]
/// pub struct PetLimit;
/// ```
///
/// with its section in the configuration:
///
/// ```toml
/// [resilient.concurrency.pet]
/// limit = 64
/// ```
pub use resilient_macros::ConcurrencyLimitSpec;

/// Limits how many calls start per period: `#[rate_limited(PetRate)]`; on a
/// plain fn, a reservation blocks the thread (see [`blocking`]).
///
/// A rejected call returns [`Error::RateLimitExceeded`] through the fn's
/// error type. See [`rate_limiter`]. With `key = expr`, one limiter per
/// value of the expression; see [`keyed`].
///
/// # Example
///
/// ```
/// use resilient_core::prelude::*;
///
/// #[derive(RateLimiterSpec)]
/// #[spec("resilient.ratelimiter.pet")]
/// pub struct PetRate;
/// #[derive(Debug, thiserror::Error)]
/// pub enum PetError {
///     #[error("the store is down")]
///     Down,
///     #[error(transparent)]
///     Resilience(#[from] resilient_core::Error),
/// }
///
/// #[rate_limited(PetRate)]
/// pub async fn find(id: u64) -> Result<String, PetError> {
///     Ok(format!("pet {id}"))
/// }
/// ```
pub use resilient_macros::rate_limited;

/// Declares a rate limiter spec:
/// `#[derive(RateLimiterSpec)] #[spec("resilient.ratelimiter.pet")]`.
///
/// # Example
///
/// ```
/// use resilient_core::prelude::*;
///
/// #[derive(RateLimiterSpec)]
/// #[spec("resilient.ratelimiter.pet")]
/// pub struct PetRate;
/// ```
///
/// with its section in the configuration:
///
/// ```toml
/// [resilient.ratelimiter.pet]
/// limit_for_period = 100
/// limit_refresh_period = "1s"
/// ```
pub use resilient_macros::RateLimiterSpec;

/// Injects latency and errors into an `async fn`, at the rates its spec
/// sets, when the spec is enabled: `#[chaos(PetChaos)]`.
///
/// Off unless its section says `enabled = true`. An injected error returns
/// [`Error::Injected`] through the fn's error type. Where it sits among the
/// other attributes decides what it tests; see [`chaos`](mod@chaos).
///
/// # Example
///
/// ```
/// use resilient_core::prelude::*;
///
/// #[derive(ChaosSpec)]
/// #[spec("resilient.chaos.pet")]
/// pub struct PetChaos;
/// #[derive(Debug, thiserror::Error)]
/// pub enum PetError {
///     #[error("the store is down")]
///     Down,
///     #[error(transparent)]
///     Resilience(#[from] resilient_core::Error),
/// }
///
/// #[chaos(PetChaos)]
/// pub async fn find(id: u64) -> Result<String, PetError> {
///     Ok(format!("pet {id}"))
/// }
/// ```
pub use resilient_macros::chaos;

/// Declares a chaos spec: `#[derive(ChaosSpec)] #[spec("resilient.chaos.pet")]`.
///
/// # Example
///
/// ```
/// use resilient_core::prelude::*;
///
/// #[derive(ChaosSpec)]
/// #[spec("resilient.chaos.pet")]
/// pub struct PetChaos;
/// ```
///
/// with its section in the configuration:
///
/// ```toml
/// [resilient.chaos.pet]
/// enabled = true
/// error_rate = 0.1
/// ```
pub use resilient_macros::ChaosSpec;

/// Starts another attempt of an `async fn` beside a slow one and returns the
/// first accepted outcome: `#[hedged(PetHedging)]`.
///
/// Each attempt runs the body with fresh clones of the owned arguments, as
/// under `#[retryable]`, inside the fn's own future; the attempts that lose
/// are dropped. Hedge only calls that are safe to run twice (idempotent);
/// see [`hedging`].
///
/// # Example
///
/// ```
/// use resilient_core::prelude::*;
///
/// #[derive(HedgingSpec)]
/// #[spec("resilient.hedging.pet")]
/// pub struct PetHedging;
/// #[derive(Debug, thiserror::Error)]
/// pub enum PetError {
///     #[error("the store is down")]
///     Down,
///     #[error(transparent)]
///     Resilience(#[from] resilient_core::Error),
/// }
///
/// #[hedged(PetHedging)]
/// pub async fn find(id: u64) -> Result<String, PetError> {
///     Ok(format!("pet {id}"))
/// }
/// ```
pub use resilient_macros::hedged;

/// Declares a hedging spec:
/// `#[derive(HedgingSpec)] #[spec("resilient.hedging.pet")]`, with
/// `classify = ..` as a retry spec takes it.
///
/// # Example
///
/// ```
/// use resilient_core::prelude::*;
///
/// #[derive(HedgingSpec)]
/// #[spec("resilient.hedging.pet")]
/// pub struct PetHedging;
/// ```
///
/// with its section in the configuration:
///
/// ```toml
/// [resilient.hedging.pet]
/// delay = "50ms"
/// ```
pub use resilient_macros::HedgingSpec;

/// Declares a retry spec: `#[derive(RetrySpec)] #[spec("resilient.retry.pet")]`.
///
/// Options after the path: `classify = ..` (`all_errors`, `custom`, `http`,
/// `grpc` with the `grpc` feature, or a shared classifier type; see
/// [`Classify`]) and
/// `exhausted = last_failure` (see [`retry::ReturnLastFailure`]).
///
/// # Example
///
/// ```
/// use resilient_core::prelude::*;
///
/// #[derive(RetrySpec)]
/// #[spec("resilient.retry.pet")]
/// pub struct PetRetry;
/// ```
///
/// with its section in the configuration:
///
/// ```toml
/// [resilient.retry.pet]
/// delay = "100ms"
/// attempts = 2      # retries after the first call: at most 3 calls
/// ```
pub use resilient_macros::RetrySpec;
