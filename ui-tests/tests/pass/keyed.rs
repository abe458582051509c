//! `key = ..` on `#[circuit_breakable]`, `#[concurrency_limit]` and
//! `#[rate_limited]`: all three keyed on one fn; keys of every kind a key
//! can be (`&str`, `String` by reference and by `.clone()`, integers, an IP
//! address, a `Display` type in `DisplayKey`, a type implementing
//! `PartitionKey`), a method keyed on `self.field`, a key expression that
//! makes a temporary, and a keyed breaker under `#[retryable]` (whose
//! arguments are cloned for each attempt); every future is `Send`; with no
//! registry a call returns `NotConfigured` without running the body.
#![deny(warnings)]

use std::fmt;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, Ordering};

use resilient_core::keyed::{DisplayKey, KeyRef, PartitionKey};
use resilient_core::{
    circuit_breakable, concurrency_limit, rate_limited, retryable, CircuitBreakerSpec,
    ConcurrencyLimitSpec, RateLimiterSpec,
};
use ui_tests::{UiError, UiRetry};

#[derive(CircuitBreakerSpec)]
#[spec("ui.keyed.breaker")]
pub struct HostBreaker;

#[derive(ConcurrencyLimitSpec)]
#[spec("ui.keyed.concurrency")]
pub struct ShardLimit;

#[derive(RateLimiterSpec)]
#[spec("ui.keyed.rate")]
pub struct TenantRate;

static BODY_RUNS: AtomicU32 = AtomicU32::new(0);

/// A `Display` type, keyed through `DisplayKey`.
#[derive(Clone, Copy)]
pub enum Region {
    Eu,
    Us,
}

impl fmt::Display for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Region::Eu => "eu",
            Region::Us => "us",
        })
    }
}

/// A user type that keys an instance by its number.
#[derive(Clone)]
pub struct TenantId(u32);

impl PartitionKey for TenantId {
    fn with_key<R>(&self, f: impl FnOnce(KeyRef<'_>) -> R) -> R {
        self.0.with_key(f)
    }
}

/// All three keyed on one fn, each on a different argument: a breaker per
/// host (`&str`), a limit per shard (`u64`), a rate per tenant (a user type).
#[circuit_breakable(HostBreaker, key = host)]
#[concurrency_limit(ShardLimit, key = shard)]
#[rate_limited(TenantRate, key = tenant)]
pub async fn fetch(host: &str, shard: u64, tenant: TenantId) -> Result<String, UiError> {
    BODY_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(format!("{host}/{shard}/{}", tenant.0))
}

/// A `String` by reference, an IP address, a `Display` enum.
#[circuit_breakable(HostBreaker, key = name)]
#[concurrency_limit(ShardLimit, key = addr)]
#[rate_limited(TenantRate, key = DisplayKey(region))]
pub async fn by_value(name: String, addr: IpAddr, region: Region) -> Result<String, UiError> {
    BODY_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(format!("{name}@{addr} in {region}"))
}

/// A `String` by `.clone()`, and a key made in the expression: the
/// temporary lives through the start of the call.
#[circuit_breakable(HostBreaker, key = format!("{a}:{b}"))]
#[rate_limited(TenantRate, key = name.clone())]
pub async fn temporary(a: &str, b: u16, name: String) -> Result<String, UiError> {
    BODY_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(format!("{a}:{b}/{name}"))
}

/// Retry outermost: each attempt goes through the breaker of its host,
/// keyed on the attempt's clone of the arguments.
#[retryable(UiRetry)]
#[circuit_breakable(HostBreaker, key = host)]
pub async fn retried(host: String, tenant: TenantId) -> Result<String, UiError> {
    BODY_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(format!("{host}/{}", tenant.0))
}

#[derive(Clone)]
pub struct Client {
    host: String,
    shard: u64,
    region: Region,
}

impl Client {
    /// Keyed on the receiver's fields.
    #[circuit_breakable(HostBreaker, key = self.host)]
    #[concurrency_limit(ShardLimit, key = self.shard)]
    #[rate_limited(TenantRate, key = DisplayKey(self.region))]
    pub async fn get(&self, path: &str) -> Result<String, UiError> {
        BODY_RUNS.fetch_add(1, Ordering::SeqCst);
        Ok(format!("{}{path}", self.host))
    }

    /// Under `#[retryable]`, keyed on `self.field` of each attempt.
    #[retryable(UiRetry)]
    #[circuit_breakable(HostBreaker, key = self.host.as_str())]
    pub async fn get_retried(&self, path: String) -> Result<String, UiError> {
        BODY_RUNS.fetch_add(1, Ordering::SeqCst);
        Ok(format!("{}{path}", self.host))
    }
}

fn assert_send<T: Send>(_: T) {}

fn main() {
    let client = Client {
        host: "pets.example".into(),
        shard: 3,
        region: Region::Us,
    };
    assert_send(fetch("pets.example", 3, TenantId(7)));
    assert_send(by_value("pets".into(), IpAddr::from([10, 0, 0, 1]), Region::Eu));
    assert_send(temporary("pets.example", 443, "pets".into()));
    assert_send(retried("pets.example".into(), TenantId(7)));
    assert_send(client.get("/cats"));
    assert_send(client.get_retried("/dogs".into()));

    // No registry: the call is refused before the body runs.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    for out in [
        rt.block_on(fetch("pets.example", 3, TenantId(7))),
        rt.block_on(temporary("pets.example", 443, "pets".into())),
        rt.block_on(client.get("/cats")),
    ] {
        match out {
            Err(UiError::Resilience(resilient_core::Error::NotConfigured { .. })) => {}
            other => panic!("expected NotConfigured, got {other:?}"),
        }
    }
    assert_eq!(BODY_RUNS.load(Ordering::SeqCst), 0);
}
