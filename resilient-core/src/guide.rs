//! The user guide: one chapter per module, each found from this index.
//!
//! | chapter | what it answers |
//! |---|---|
//! | [`getting_started`] | the pet store example and what it prints, the crates |
//! | [`retry`] | retry settings, what counts as a failure, delay hints, HTTP responses, when retry gives up |
//! | [`circuit_breaker`] | circuit breaker settings, its windows, its states |
//! | [`timeout`] | timeout settings |
//! | [`concurrency_limit`] | concurrency limit settings, the adaptive limit |
//! | [`rate_limiter`] | rate limiter settings |
//! | [`hedging`] | hedging settings |
//! | [`fallback`] | `#[fallback]`: which failures, which answer |
//! | [`chaos`] | fault injection |
//! | [`composition`] | how the attributes nest and see each other; blocking fns and streams |
//! | [`configuration`] | specs, sources, environment overrides, validation at startup, reload |
//! | [`keyed`] | one breaker, limit or rate limiter per key (per host, per tenant) |
//! | [`redis`] | limits and retry budgets shared by replicas in Redis |
//! | [`tower`] | every spec as a tower layer and as reqwest middleware; one layer for a whole stack |
//! | [`grpc`] | `classify = grpc` for tonic's `Status`, pushback, layers on a tonic channel and server |
//! | [`telemetry`] | logs, metrics, events, the snapshot |
//! | [`operations`] | readiness, acting on a breaker, admin routes, dashboard, Grafana, traces |
//! | [`explain`] | what a stack will do, before it runs |
//! | [`simulate`] | a stack run against a described outage, on a paused clock |
//! | [`testing`] | tests of your own code: paused clock, a registry per test |
//! | [`migrating`] | from Resilience4j, Polly, Kora, Spring, tower-resilience, backon |
//! | [`design`] | design choices |
//! | [`benchmarks`] | figures beside the peer crates, each table with its date and commit |
//! | [`developing`] | working on this repository |
//!
//! # Why rustdoc modules
//!
//! The guide is written in markdown files (`resilient-core/guide/*.md`,
//! readable as they are on GitHub) that these empty modules include as
//! their documentation. So docs.rs renders the guide beside the API it
//! speaks of; every Rust block in it is a doctest that `cargo test
//! --workspace` compiles, and runs where it runs; rustdoc checks its links
//! to items (`cargo doc` with `-D warnings` fails on a broken one); and no
//! other tool (an mdBook) has to be installed, built or kept in step in CI.
//! The settings tables in the chapters are checked against the settings
//! types' rustdoc and against the keys their readers accept by the test
//! `readme` of this crate.

#[doc = include_str!("../guide/getting_started.md")]
pub mod getting_started {}
#[doc = include_str!("../guide/retry.md")]
pub mod retry {}
#[doc = include_str!("../guide/circuit_breaker.md")]
pub mod circuit_breaker {}
#[doc = include_str!("../guide/timeout.md")]
pub mod timeout {}
#[doc = include_str!("../guide/concurrency_limit.md")]
pub mod concurrency_limit {}
#[doc = include_str!("../guide/rate_limiter.md")]
pub mod rate_limiter {}
#[doc = include_str!("../guide/hedging.md")]
pub mod hedging {}
#[doc = include_str!("../guide/fallback.md")]
pub mod fallback {}
#[doc = include_str!("../guide/chaos.md")]
pub mod chaos {}
#[doc = include_str!("../guide/composition.md")]
pub mod composition {}
#[doc = include_str!("../guide/configuration.md")]
pub mod configuration {}
#[doc = include_str!("../guide/keyed.md")]
pub mod keyed {}
#[doc = include_str!("../guide/redis.md")]
pub mod redis {}
#[doc = include_str!("../guide/tower.md")]
pub mod tower {}
#[doc = include_str!("../guide/grpc.md")]
pub mod grpc {}
#[doc = include_str!("../guide/telemetry.md")]
pub mod telemetry {}
#[doc = include_str!("../guide/operations.md")]
pub mod operations {}
#[doc = include_str!("../guide/explain.md")]
pub mod explain {}
#[doc = include_str!("../guide/simulate.md")]
pub mod simulate {}
#[doc = include_str!("../guide/testing.md")]
pub mod testing {}
#[doc = include_str!("../guide/migrating.md")]
pub mod migrating {}
#[doc = include_str!("../guide/design.md")]
pub mod design {}
#[doc = include_str!("../guide/benchmarks.md")]
pub mod benchmarks {}
#[doc = include_str!("../guide/developing.md")]
pub mod developing {}
