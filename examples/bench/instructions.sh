#!/usr/bin/env bash
# Instructions per successful call, counted by valgrind's callgrind: exact
# where wall time on a shared machine moves by several percent between runs.
# Builds a small program (release, the success path of each attribute alone
# and of the four-attribute stack, as the bench's "stack success path"; a
# bare fn without attributes; a chaos spec left disabled, its default; a
# hedging spec whose first attempt succeeds at once, so no hedge starts; a
# breaker keyed by a host string and one keyed by a u64, on a key that has
# its instance; the bench's hand-written reference, `hand`; the four
# specs through their handles, `retry.call(|| breaker.call(|| limit.call(||
# timeout.call(op))))`, `handles`; a token bucket's permit through
# `#[rate_limited]`, `rate`, and its handle's `try_acquire`, `rate_handle`,
# a fixed window's `try_acquire`, `rate_window_handle`, beside governor's
# direct limiter's `check`, `governor`; recloser's `AsyncRecloser::call`
# of the bare fn with a count-based window of 100, `recloser`, beside
# `breaker`), runs
# each stack N and 2N times, after one call that is not counted, collecting
# only inside the fn that makes the calls (callgrind's `--toggle-collect`),
# and prints (Ir(2N) - Ir(N)) / N; then the size of each stack's future in
# bytes. Start-up work that depends on wall time (the rate limiter clock's
# calibration) is never counted, so two runs print the same figures. A checkout
# with blocking fns adds the bench's "blocking" group, called outside any
# runtime: `blocking` (a plain fn under retry, breaker and limit, installed
# registry), `blocking_default` (the same under `set_default`),
# `hand_blocking` (the reference's blocking loop) and `bare_blocking`.
# A checkout with streams and their idle limit adds the bench's "streams"
# group, counted per item (N items in streams of 1000, so a stream's setup
# is spread over its items as in the bench): `stream` (a fn that returns a
# stream of numbers under retry, breaker and a timeout with `idle` set),
# `stream_retry`, `stream_breaker`, `stream_timeout` (each alone, the
# timeout with `idle`) and `bare_stream`; and the size of each stream.
# A checkout with adaptive throttling adds `retry_throttle`: the `retry`
# stack's spec with a `throttle` table (k = 2, window 2 m), whose success
# counts an accepted attempt in the window.
# A checkout with tower layers (resilient-core/src/layer/) adds the bench's
# "tower layers" group, each stack built once over a `tower::service_fn` of
# the bare fn and called as its one owner calls it,
# `svc.ready().await?.call(())`: `layers_four` (retry, breaker, limit and
# timeout layers, outermost first), `layers_retry`, `layers_breaker`,
# `layers_limit`, `layers_timeout` (each alone), their peers
# `tower_retry` (tower's `RetryLayer`, the bench's policy),
# `tower_limit`, `tower_timeout`, `tower_resilience_breaker` (its circuit
# breaker alone) and `tower_resilience` (the bench's tower-resilience
# stack), and `bare_service` (the `service_fn` alone); and the size of
# each response future. A checkout with the stack layer
# (resilient-core/src/layer/stack.rs) adds `stack_layer` (the same four
# specs as one `StackLayer`, outermost first, over the same `service_fn`)
# and each spec alone as a one-spec `StackLayer`, `stack_retry`,
# `stack_breaker`, `stack_limit`, `stack_timeout`, beside the single
# layers; and, as reqwest middleware, `stack_middleware` (that stack in a
# `ClientWithMiddleware` before a last middleware that answers each
# request with a canned response, sending nothing) beside
# `stack_middleware_no_retry` (the same without the retry, which copies
# the request each attempt sends) and `bare_middleware` (the last
# middleware alone); each middleware call is
# `client.execute(request.try_clone())` of one request built once.
#
# Usage: examples/bench/instructions.sh [CHECKOUT] [N]
#   CHECKOUT: the resilient checkout to measure (default: this one), so that
#             two commits compare in one run; N: calls (default 20000).
#   STACKS (environment): the stacks to count, default all of them.
#   CODEGEN_UNITS (environment): the measuring program's codegen units,
#             default cargo's (16 in release, as a user's release build).
#             With 16, a change anywhere in the library can move the
#             partition of the program's code, and with it the inlining
#             of stacks the change does not touch (by up to 17 % per
#             call, the hand-written reference's too); with 1, two commits
#             whose code for a stack is the same count the same. Compare
#             commits with CODEGEN_UNITS=1 to see a change's own effect.
# Needs valgrind. Builds in CARGO_TARGET_DIR when it is set (so that the
# dependencies are built once), else in a temporary directory.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
root=$(cd "${1:-$here}" && pwd)
n=${2:-20000}
codegen_units=${CODEGEN_UNITS:-}
command -v valgrind >/dev/null || { echo "instructions.sh needs valgrind" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src"
cat > "$work/Cargo.toml" <<TOML
[package]
name = "percall"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
resilient-core = { path = "$root/resilient-core" }
thiserror = "2"
tokio = { version = "1", features = ["rt", "time"] }
governor = { version = "0.10", default-features = false, features = ["std", "quanta"] }
recloser = "1.4"
futures-util = { version = "0.3", default-features = false, features = ["std"], optional = true }
tower = { version = "0.5", default-features = false, features = ["util", "timeout", "limit", "retry"], optional = true }
tower-resilience = { version = "0.13", default-features = false, features = ["bulkhead", "circuitbreaker", "retry", "timelimiter"], optional = true }
reqwest = { version = "0.13", default-features = false, optional = true }
reqwest-middleware = { version = "0.5", optional = true }
async-trait = { version = "0.1", optional = true }
http = { version = "1", optional = true }

[features]
# The checkout has blocking fns (resilient-core/src/blocking.rs).
blocking = []
# The checkout has streams with an idle limit (resilient-core/src/stream.rs).
streams = ["dep:futures-util"]
# The checkout has tower layers (resilient-core/src/layer/).
layers = ["resilient-core/tower", "dep:tower", "dep:tower-resilience"]
# The checkout has the stack layer (resilient-core/src/layer/stack.rs),
# also as reqwest middleware.
stack = ["layers", "resilient-core/reqwest-middleware", "dep:reqwest", "dep:reqwest-middleware", "dep:async-trait", "dep:http"]
# The checkout has adaptive throttling of retries (a throttle table).
throttle = []

[profile.release]
debug = 1
${codegen_units:+codegen-units = $codegen_units}

[workspace]
TOML
# The bench's hand-written reference, from this checkout whatever the
# measured one.
cp "$here/examples/bench/benches/hand.rs" "$work/src/hand.rs"
features=()
stacks="bare four retry breaker keyed keyed_u64 limit timeout chaos hedged hand handles rate rate_handle rate_window_handle governor recloser"
if [ -f "$root/resilient-core/src/blocking.rs" ]; then
  features=(--features blocking)
  stacks="$stacks bare_blocking blocking blocking_default hand_blocking"
fi
if [ -f "$root/resilient-core/src/stream.rs" ] && grep -q idle "$root/resilient-core/src/stream.rs"; then
  features+=(--features streams)
  stacks="$stacks bare_stream stream stream_retry stream_breaker stream_timeout"
fi
if [ -f "$root/resilient-core/src/layer/mod.rs" ]; then
  features+=(--features layers)
  stacks="$stacks bare_service layers_four layers_retry layers_breaker layers_limit layers_timeout"
  stacks="$stacks tower_retry tower_limit tower_timeout tower_resilience_breaker tower_resilience"
fi
if [ -f "$root/resilient-core/src/layer/stack.rs" ]; then
  features+=(--features stack)
  stacks="$stacks stack_layer stack_retry stack_breaker stack_limit stack_timeout bare_middleware stack_middleware stack_middleware_no_retry"
fi
if grep -q ThrottleSettings "$root/resilient-core/src/retry/settings.rs"; then
  features+=(--features throttle)
  stacks="$stacks retry_throttle"
fi
cat > "$work/src/main.rs" <<'RS'
use std::hint::black_box;

use resilient_core::settings::Value;
use resilient_core::{
    chaos, circuit_breakable, concurrency_limit, hedged, rate_limited, retryable, timeout,
    ChaosSpec, CircuitBreakerSpec, ConcurrencyLimitSpec, HedgingSpec, RateLimiterSpec, Registry,
    RetrySpec, TimeoutSpec,
};

#[derive(CircuitBreakerSpec)] #[spec("bench.breaker")] struct Breaker;
#[derive(RetrySpec)] #[spec("bench.retry")] struct Retry;
#[derive(TimeoutSpec)] #[spec("bench.timeout")] struct Timeout;
#[derive(ConcurrencyLimitSpec)] #[spec("bench.limit")] struct Limit;
#[derive(ChaosSpec)] #[spec("bench.chaos")] struct Chaos;
#[derive(HedgingSpec)] #[spec("bench.hedging")] struct Hedging;
#[derive(RateLimiterSpec)] #[spec("bench.rate")] struct Rate;
#[derive(RateLimiterSpec)] #[spec("bench.rate_window")] struct RateWindow;

#[derive(Debug, thiserror::Error)]
#[error(transparent)]
struct Failed(#[from] resilient_core::Error);
#[cfg(feature = "layers")]
impl resilient_core::layer::LayerError for Failed {
    fn resilience(&self) -> Option<&resilient_core::Error> { Some(&self.0) }
}

#[retryable(Retry)] #[circuit_breakable(Breaker)] #[concurrency_limit(Limit)] #[timeout(Timeout)]
async fn four() -> Result<u32, Failed> { Ok(black_box(1)) }
#[retryable(Retry)] async fn retry() -> Result<u32, Failed> { Ok(black_box(1)) }
#[circuit_breakable(Breaker)] async fn breaker() -> Result<u32, Failed> { Ok(black_box(1)) }
#[circuit_breakable(Breaker, key = host)]
async fn keyed(host: &str) -> Result<u32, Failed> { let _ = host; Ok(black_box(1)) }
#[circuit_breakable(Breaker, key = tenant)]
async fn keyed_u64(tenant: u64) -> Result<u32, Failed> { let _ = tenant; Ok(black_box(1)) }
#[concurrency_limit(Limit)] async fn limit() -> Result<u32, Failed> { Ok(black_box(1)) }
#[timeout(Timeout)] async fn timeout() -> Result<u32, Failed> { Ok(black_box(1)) }
#[chaos(Chaos)] async fn chaos() -> Result<u32, Failed> { Ok(black_box(1)) }
#[rate_limited(Rate)] async fn rate() -> Result<u32, Failed> { Ok(black_box(1)) }
#[hedged(Hedging)] async fn hedged() -> Result<u32, Failed> { Ok(black_box(1)) }
async fn bare() -> Result<u32, Failed> { Ok(black_box(1)) }
/// The retry stack's spec with adaptive throttling (`throttle`).
#[cfg(feature = "throttle")]
#[derive(RetrySpec)] #[spec("bench.retry_throttle")] struct RetryThrottle;
#[cfg(feature = "throttle")]
#[retryable(RetryThrottle)] async fn retry_throttle() -> Result<u32, Failed> { Ok(black_box(1)) }

#[allow(dead_code)] // `call_blocking` without the blocking stacks
mod hand;

/// The bench's "blocking" group: the stack's layers but the timeout on a
/// plain fn, and the plain fn alone.
#[cfg(feature = "blocking")]
mod blocking {
    use super::*;
    #[retryable(Retry)] #[circuit_breakable(Breaker)] #[concurrency_limit(Limit)]
    pub fn three() -> Result<u32, Failed> { Ok(black_box(1)) }
    pub fn bare() -> Result<u32, Failed> { Ok(black_box(1)) }
}

/// The bench's "streams" group: a stream of numbers under retry, breaker
/// and a timeout with an idle limit, each layer alone, and the bare stream.
#[cfg(feature = "streams")]
mod streams {
    use super::*;
    use futures_util::StreamExt;
    use resilient_core::stream::Stream;
    #[derive(TimeoutSpec)] #[spec("bench.stream_timeout")] pub struct StreamTimeout;
    #[retryable(Retry)] #[circuit_breakable(Breaker)] #[timeout(StreamTimeout)]
    pub fn three(n: u64) -> impl Stream<Item = Result<u64, Failed>> { futures_util::stream::iter((0..n).map(Ok)) }
    #[retryable(Retry)]
    fn retry(n: u64) -> impl Stream<Item = Result<u64, Failed>> { futures_util::stream::iter((0..n).map(Ok)) }
    #[circuit_breakable(Breaker)]
    fn breaker(n: u64) -> impl Stream<Item = Result<u64, Failed>> { futures_util::stream::iter((0..n).map(Ok)) }
    #[timeout(StreamTimeout)]
    fn timeout(n: u64) -> impl Stream<Item = Result<u64, Failed>> { futures_util::stream::iter((0..n).map(Ok)) }
    pub fn bare(n: u64) -> impl Stream<Item = Result<u64, Failed>> { futures_util::stream::iter((0..n).map(Ok)) }
    /// `n` items in streams of 1000, each drained with `next`, its items
    /// through `black_box`, as the bench does.
    fn drain<S: Stream<Item = Result<u64, Failed>>>(rt: &tokio::runtime::Runtime, n: u64, make: impl Fn(u64) -> S) {
        rt.block_on(async {
            let mut left = n;
            while left > 0 {
                let k = left.min(1000);
                let mut s = std::pin::pin!(make(k));
                let mut sum = 0u64;
                while let Some(item) = s.next().await {
                    sum = sum.wrapping_add(black_box(item).unwrap_or_else(|e| panic!("{e}")));
                }
                assert_eq!(sum, k * (k - 1) / 2);
                left -= k;
            }
        });
    }
    /// Runs `which` if it is a stream stack.
    pub fn run(which: &str, n: u64, rt: &tokio::runtime::Runtime) -> bool {
        match which {
            "stream" => drain(rt, n, three),
            "stream_retry" => drain(rt, n, retry),
            "stream_breaker" => drain(rt, n, breaker),
            "stream_timeout" => drain(rt, n, timeout),
            "bare_stream" => drain(rt, n, bare),
            _ => return false,
        }
        true
    }
}

/// The bench's "tower layers" group: each spec as a tower layer beside its
/// peer, and the four layers beside tower-resilience's stack, each built
/// once over a `service_fn` of the bare fn and called as its one owner
/// calls it: `svc.ready().await?.call(()).await`.
#[cfg(feature = "layers")]
mod layers {
    use super::*;
    use resilient_core::layer::Layered;
    use std::time::Duration;
    use tower::{Service, ServiceBuilder, ServiceExt};
    #[derive(RetrySpec)] #[spec("bench.layer_retry")] pub struct LayerRetry;
    #[derive(CircuitBreakerSpec)] #[spec("bench.layer_breaker")] pub struct LayerBreaker;
    #[derive(ConcurrencyLimitSpec)] #[spec("bench.layer_limit")] pub struct LayerLimit;
    #[derive(TimeoutSpec)] #[spec("bench.layer_timeout")] pub struct LayerTimeout;
    /// The bench's tower retry policy: any error retried, twice at most, 1 ms apart.
    #[derive(Clone, Copy)]
    struct Retries(u32);
    impl<Req: Clone, Res, E> tower::retry::Policy<Req, Res, E> for Retries {
        type Future = tokio::time::Sleep;
        fn retry(&mut self, _: &mut Req, result: &mut Result<Res, E>) -> Option<Self::Future> {
            if result.is_ok() || self.0 == 0 { return None; }
            self.0 -= 1;
            Some(tokio::time::sleep(Duration::from_millis(1)))
        }
        fn clone_request(&mut self, req: &Req) -> Option<Req> { Some(req.clone()) }
    }
    fn op() -> impl Service<(), Response = u32, Error = Failed, Future: Send + 'static> + Clone + Send + 'static {
        tower::service_fn(|()| bare())
    }
    fn four() -> impl Service<(), Response = u32> + Clone {
        ServiceBuilder::new().layer(LayerRetry::layer()).layer(LayerBreaker::layer())
            .layer(LayerLimit::layer()).layer(LayerTimeout::layer()).service(op())
    }
    fn tr_breaker() -> tower_resilience::circuitbreaker::CircuitBreakerLayer {
        tower_resilience::circuitbreaker::CircuitBreakerLayer::builder()
            .failure_rate_threshold(0.5).sliding_window_size(100).minimum_number_of_calls(10)
            .wait_duration_in_open(Duration::from_secs(1)).build().unwrap()
    }
    /// The bench's tower-resilience stack (`peer_stacks.rs`).
    fn tr_four() -> impl Service<(), Response = u32> + Clone {
        use tower_resilience::{bulkhead::BulkheadLayer, retry::RetryLayer, timelimiter::TimeLimiterLayer};
        ServiceBuilder::new()
            .layer(RetryLayer::builder().max_attempts(3).fixed_backoff(Duration::from_millis(1)).build())
            .layer(tr_breaker())
            .layer(BulkheadLayer::builder().max_concurrent_calls(64).reject_when_full().build().unwrap())
            .layer(TimeLimiterLayer::builder().timeout_duration(Duration::from_secs(1)).build())
            .service(op())
    }
    /// `$body` with `$svc` bound to `which`'s service (a macro: each
    /// service has its own type), or `$other` if `which` is none of them.
    macro_rules! with_stack {
        ($which:expr, |$svc:ident| $body:expr, $other:expr) => {
            match $which {
                "bare_service" => { let $svc = op(); $body }
                "layers_four" => { let $svc = four(); $body }
                "layers_retry" => { let $svc = ServiceBuilder::new().layer(LayerRetry::layer()).service(op()); $body }
                "layers_breaker" => { let $svc = ServiceBuilder::new().layer(LayerBreaker::layer()).service(op()); $body }
                "layers_limit" => { let $svc = ServiceBuilder::new().layer(LayerLimit::layer()).service(op()); $body }
                "layers_timeout" => { let $svc = ServiceBuilder::new().layer(LayerTimeout::layer()).service(op()); $body }
                "tower_retry" => { let $svc = ServiceBuilder::new().layer(tower::retry::RetryLayer::new(Retries(2))).service(op()); $body }
                "tower_limit" => { let $svc = ServiceBuilder::new().layer(tower::limit::ConcurrencyLimitLayer::new(64)).service(op()); $body }
                "tower_timeout" => { let $svc = ServiceBuilder::new().layer(tower::timeout::TimeoutLayer::new(Duration::from_secs(1))).service(op()); $body }
                "tower_resilience_breaker" => { let $svc = ServiceBuilder::new().layer(tr_breaker()).service(op()); $body }
                "tower_resilience" => { let $svc = tr_four(); $body }
                #[cfg(feature = "stack")]
                "stack_layer" => { let $svc = stack_four(); $body }
                #[cfg(feature = "stack")]
                "stack_retry" => { let $svc = ServiceBuilder::new().layer(StackLayer::new().spec::<LayerRetry>()).service(op()); $body }
                #[cfg(feature = "stack")]
                "stack_breaker" => { let $svc = ServiceBuilder::new().layer(StackLayer::new().spec::<LayerBreaker>()).service(op()); $body }
                #[cfg(feature = "stack")]
                "stack_limit" => { let $svc = ServiceBuilder::new().layer(StackLayer::new().spec::<LayerLimit>()).service(op()); $body }
                #[cfg(feature = "stack")]
                "stack_timeout" => { let $svc = ServiceBuilder::new().layer(StackLayer::new().spec::<LayerTimeout>()).service(op()); $body }
                _ => $other,
            }
        };
    }
    /// The four specs as one stack layer, outermost first.
    #[cfg(feature = "stack")]
    use resilient_core::layer::StackLayer;
    #[cfg(feature = "stack")]
    fn stack_four() -> impl Service<(), Response = u32> + Clone {
        ServiceBuilder::new()
            .layer(StackLayer::new().spec::<LayerRetry>().spec::<LayerBreaker>()
                .spec::<LayerLimit>().spec::<LayerTimeout>())
            .service(op())
    }
    #[cfg(not(feature = "stack"))]
    pub const STACKS: [&str; 11] = ["bare_service", "layers_four", "layers_retry", "layers_breaker",
        "layers_limit", "layers_timeout", "tower_retry", "tower_limit", "tower_timeout",
        "tower_resilience_breaker", "tower_resilience"];
    #[cfg(feature = "stack")]
    pub const STACKS: [&str; 16] = ["bare_service", "layers_four", "layers_retry", "layers_breaker",
        "layers_limit", "layers_timeout", "tower_retry", "tower_limit", "tower_timeout",
        "tower_resilience_breaker", "tower_resilience", "stack_layer", "stack_retry",
        "stack_breaker", "stack_limit", "stack_timeout"];
    fn drive<S: Service<(), Response = u32>>(mut svc: S, n: u64, rt: &tokio::runtime::Runtime) {
        rt.block_on(async {
            for _ in 0..n {
                let r = match svc.ready().await {
                    Ok(ready) => ready.call(()).await.ok(),
                    Err(_) => None,
                };
                assert_eq!(black_box(r), Some(1));
            }
        });
    }
    /// Runs `which` if it is a layer stack.
    pub fn run(which: &str, n: u64, rt: &tokio::runtime::Runtime) -> bool {
        with_stack!(which, |svc| drive(svc, n, rt), return false);
        true
    }
    fn future_size<S: Service<()>>(_: &S) -> usize { std::mem::size_of::<S::Future>() }
    /// The size of `which`'s response future, if it is a layer stack.
    pub fn size(which: &str) -> Option<usize> {
        with_stack!(which, |svc| Some(future_size(&svc)), None)
    }
}

/// The stack as reqwest middleware, before a last middleware that answers
/// at once, sending nothing; and that last middleware alone.
#[cfg(feature = "stack")]
mod middleware {
    use super::*;
    use layers::{LayerBreaker, LayerLimit, LayerRetry, LayerTimeout};
    use resilient_core::layer::StackLayer;
    /// Answers every request with an empty 200, sending nothing.
    struct Answer;
    #[async_trait::async_trait]
    impl reqwest_middleware::Middleware for Answer {
        async fn handle(&self, _: reqwest::Request, _: &mut http::Extensions,
            _: reqwest_middleware::Next<'_>) -> reqwest_middleware::Result<reqwest::Response> {
            Ok(reqwest::Response::from(http::Response::new(Vec::<u8>::new())))
        }
    }
    /// The answering middleware after `specs` specs of the stack: 4 (retry,
    /// breaker, limit, timeout), 3 (the same without the retry, so without
    /// the request's copy) or 0.
    fn client(specs: u8) -> reqwest_middleware::ClientWithMiddleware {
        let builder = reqwest_middleware::ClientBuilder::new(reqwest::Client::new());
        let builder = match specs {
            4 => builder.with(StackLayer::<_, reqwest::Request>::new().spec::<LayerRetry>()
                .spec::<LayerBreaker>().spec::<LayerLimit>().spec::<LayerTimeout>()),
            3 => builder.with(StackLayer::<_, reqwest::Request>::new()
                .spec::<LayerBreaker>().spec::<LayerLimit>().spec::<LayerTimeout>()),
            _ => builder,
        };
        builder.with(Answer).build()
    }
    /// Runs `which` if it is a middleware stack.
    pub fn run(which: &str, n: u64, rt: &tokio::runtime::Runtime) -> bool {
        let client = match which {
            "stack_middleware" => client(4),
            "stack_middleware_no_retry" => client(3),
            "bare_middleware" => client(0),
            _ => return false,
        };
        let Ok(request) = client.get("http://pets.example/7").build() else {
            panic!("the request did not build")
        };
        rt.block_on(async {
            for _ in 0..n {
                let Some(attempt) = request.try_clone() else { panic!("a request without a body clones") };
                let ok = client.execute(attempt).await.is_ok_and(|r| r.status() == 200);
                assert!(black_box(ok));
            }
        });
        true
    }
}

fn table<const N: usize>(pairs: [(&str, Value); N]) -> Value {
    Value::Table(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

fn main() {
    let mut args = std::env::args().skip(1);
    let which = args.next().unwrap_or_default();
    if which == "sizes" {
        println!(
            "four {} retry {} breaker {} keyed {} limit {} timeout {} chaos {} hedged {} bare {}",
            std::mem::size_of_val(&four()), std::mem::size_of_val(&retry()),
            std::mem::size_of_val(&breaker()), std::mem::size_of_val(&keyed("")),
            std::mem::size_of_val(&limit()),
            std::mem::size_of_val(&timeout()), std::mem::size_of_val(&chaos()),
            std::mem::size_of_val(&hedged()), std::mem::size_of_val(&bare()),
        );
        #[cfg(feature = "streams")]
        println!(
            "stream bytes: stream {} bare_stream {}",
            std::mem::size_of_val(&streams::three(0)), std::mem::size_of_val(&streams::bare(0)),
        );
        #[cfg(feature = "layers")]
        println!(
            "layer future bytes: {}",
            layers::STACKS.map(|s| format!("{s} {}", layers::size(s).unwrap_or_default())).join(" "),
        );
        return;
    }
    let n: u64 = args.next().and_then(|n| n.parse().ok()).unwrap_or(1);
    let s = |v: &str| Value::Str(v.into());
    // The settings of the bench's "stack success path".
    #[cfg_attr(not(any(feature = "streams", feature = "layers")), allow(unused_mut))]
    let mut bench = vec![
        ("retry", table([("delay", s("1ms")), ("attempts", Value::Int(3))])),
        ("breaker", table([
            ("failure_rate_threshold", Value::Int(50)),
            ("minimum_required_calls", Value::Int(10)),
            ("wait_duration_in_open_state", s("1s")),
            ("permitted_calls_in_half_open_state", Value::Int(1)),
            ("count_based", table([("window_size", Value::Int(100))])),
        ])),
        ("timeout", table([("duration", s("1s"))])),
        ("limit", table([("limit", Value::Int(64))])),
        // Disabled, as it ships: rates set, `enabled` left out.
        ("chaos", table([("error_rate", Value::Float(0.5)), ("latency_rate", Value::Float(0.5)),
            ("latency", s("1s"))])),
        // A second attempt after 100 ms: the calls here answer at once.
        ("hedging", table([("delay", s("100ms")), ("max_hedged_attempts", Value::Int(1))])),
        // A million permits per millisecond: never a refusal.
        ("rate", table([("type", s("token_bucket")), ("limit_for_period", Value::Int(1_000_000)),
            ("limit_refresh_period", s("1ms"))])),
        ("rate_window", table([("limit_for_period", Value::Int(1_048_575)),
            ("limit_refresh_period", s("1ms"))])),
    ];
    // The retry stack's settings, with throttling by the SRE book.
    #[cfg(feature = "throttle")]
    bench.push(("retry_throttle", table([("delay", s("1ms")), ("attempts", Value::Int(3)),
        ("throttle", table([("k", Value::Float(2.0)), ("window", s("2m"))]))])));
    // The streams group's timeout: 1s to the first item, 1s between items.
    #[cfg(feature = "streams")]
    bench.push(("stream_timeout", table([("duration", s("1s")), ("idle", s("1s"))])));
    // The tower layers group's specs: the settings of the stack's.
    #[cfg(feature = "layers")]
    bench.extend([
        ("layer_retry", table([("delay", s("1ms")), ("attempts", Value::Int(3))])),
        ("layer_breaker", table([
            ("failure_rate_threshold", Value::Int(50)),
            ("minimum_required_calls", Value::Int(10)),
            ("wait_duration_in_open_state", s("1s")),
            ("permitted_calls_in_half_open_state", Value::Int(1)),
            ("count_based", table([("window_size", Value::Int(100))])),
        ])),
        ("layer_timeout", table([("duration", s("1s"))])),
        ("layer_limit", table([("limit", Value::Int(64))])),
    ]);
    let bench = Value::Table(bench.into_iter().map(|(k, v)| (k.to_owned(), v)).collect());
    let root = table([("bench", bench)]);
    let build = || {
        let builder = Registry::builder()
            .spec::<Retry>().spec::<Breaker>().spec::<Timeout>().spec::<Limit>().spec::<Chaos>()
            .spec::<Hedging>().spec::<Rate>().spec::<RateWindow>();
        #[cfg(feature = "streams")]
        let builder = builder.spec::<streams::StreamTimeout>();
        #[cfg(feature = "throttle")]
        let builder = builder.spec::<RetryThrottle>();
        #[cfg(feature = "layers")]
        let builder = builder
            .spec::<layers::LayerRetry>().spec::<layers::LayerBreaker>()
            .spec::<layers::LayerLimit>().spec::<layers::LayerTimeout>();
        builder.build(&root)
    };
    match build().map(|r| r.install()) {
        Ok(Ok(())) => {}
        _ => panic!("the registry did not build and install"),
    }
    // The bench's settings: 3 attempts 1 ms apart, open after 5 failures
    // for 1 s, 64 in flight, timeout 1 s.
    let (ms, secs) = (std::time::Duration::from_millis, std::time::Duration::from_secs);
    let hand = hand::Hand::new(3, ms(1), 5, secs(1), 64, secs(1));
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    // The same four specs through their handles, nested as a caller
    // without the attributes writes them (the `handles` stack).
    let (rh, bh, lh, th) = match (Retry::get(), Breaker::get(), Limit::get(), Timeout::get()) {
        (Ok(r), Ok(b), Ok(l), Ok(t)) => (r, b, l, t),
        _ => panic!("the handles of the installed specs"),
    };
    let (Ok(rate_handle), Ok(window_handle)) = (Rate::get(), RateWindow::get()) else {
        panic!("the rate limiters' handles")
    };
    let per_second = std::num::NonZeroU32::new(u32::MAX).unwrap_or_else(|| panic!("not zero"));
    // recloser's breaker with the bench breaker's window and threshold.
    let recloser: recloser::AsyncRecloser = recloser::Recloser::custom()
        .error_rate(0.5).closed_len(100).open_wait(std::time::Duration::from_secs(1)).build().into();
    let governor = governor::RateLimiter::direct(governor::Quota::per_second(per_second));
    #[cfg(feature = "blocking")]
    let default = build().unwrap_or_else(|_| panic!("the registry did not build"));
    #[cfg(feature = "blocking")]
    let _default = (which == "blocking_default").then(|| default.set_default());
    // `n` calls of `which`.
    let calls = |n: u64| {
        #[cfg(feature = "blocking")]
        if let "bare_blocking" | "blocking" | "blocking_default" | "hand_blocking" = which.as_str() {
            // Outside any runtime, as a thread of its own calls a blocking fn.
            for _ in 0..n {
                let ok = match which.as_str() {
                    "blocking" | "blocking_default" => blocking::three().is_ok(),
                    "hand_blocking" => hand.call_blocking().is_ok(),
                    _ => blocking::bare().is_ok(),
                };
                assert!(ok);
            }
            return;
        }
        #[cfg(feature = "throttle")]
        if which == "retry_throttle" {
            rt.block_on(async {
                for _ in 0..n {
                    assert!(matches!(retry_throttle().await, Ok(1)));
                }
            });
            return;
        }
        #[cfg(feature = "streams")]
        if streams::run(&which, n, &rt) {
            return;
        }
        #[cfg(feature = "layers")]
        if layers::run(&which, n, &rt) {
            return;
        }
        #[cfg(feature = "stack")]
        if middleware::run(&which, n, &rt) {
            return;
        }
        rt.block_on(async {
            for _ in 0..n {
                let r = match which.as_str() {
                    "four" => four().await,
                    "retry" => retry().await,
                    "breaker" => breaker().await,
                    "keyed" => keyed(black_box("api.example.com")).await,
                    "keyed_u64" => keyed_u64(black_box(4_294_967_311)).await,
                    "limit" => limit().await,
                    "timeout" => timeout().await,
                    "chaos" => chaos().await,
                    "hedged" => hedged().await,
                    "bare" => bare().await,
                    "hand" => Ok(hand.call().await.unwrap_or_else(|e| panic!("{e:?}"))),
                    // Matched last: the arms above count as they did before it.
                    "handles" => rh.call(|| bh.call(|| lh.call(|| th.call(bare)))).await,
                    "rate" => rate().await,
                    "rate_handle" => rate_handle.try_acquire().map(|()| black_box(1)).map_err(Failed::from),
                    "rate_window_handle" => {
                        window_handle.try_acquire().map(|()| black_box(1)).map_err(Failed::from)
                    }
                    "recloser" => match recloser.call(async { Ok::<u32, Failed>(black_box(1)) }).await {
                        Ok(v) => Ok(v),
                        Err(_) => panic!("recloser refused"),
                    },
                    "governor" => match governor.check() {
                        Ok(()) => Ok(black_box(1)),
                        Err(_) => panic!("governor refused"),
                    },
                    other => panic!("unknown stack {other}"),
                };
                assert!(matches!(r, Ok(1)));
            }
        });
    };
    // One call first, not counted: what a first call does once (a keyed
    // instance made, a clock calibrated against wall time) stays out.
    calls(1);
    measured(|| calls(n));
}

/// The calls counted: callgrind collects inside this fn only
/// (`--toggle-collect`), so nothing the process does around them, and
/// nothing that depends on wall time at start-up, reaches the count.
#[inline(never)]
fn measured(f: impl FnOnce()) {
    f();
    black_box(());
}
RS
echo "building against $root ..." >&2
target=${CARGO_TARGET_DIR:-$work/target}
cargo build -q --release --manifest-path "$work/Cargo.toml" --target-dir "$target" "${features[@]}"
bin="$target/release/percall"
ir() { # ir STACK CALLS: instructions of the measured calls alone
  valgrind --tool=callgrind --callgrind-out-file=/dev/null --collect-atstart=no \
    --toggle-collect='percall::measured*' "$bin" "$1" "$2" 2>&1 |
    awk '/Collected/ {print $4}'
}
for stack in ${STACKS:-$stacks}; do
  # N calls and 2N: their difference leaves out the measured region's own
  # entry (the runtime's `block_on`), which does not grow with N.
  a=$(ir "$stack" "$n")
  b=$(ir "$stack" $((2 * n)))
  case $stack in
    *stream*) per=item ;;
    *) per=call ;;
  esac
  echo "$stack: $(( (b - a) / n )) instructions per $per"
done
"$bin" sizes | sed '1s/^/future bytes: /'
