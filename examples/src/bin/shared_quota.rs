//! One quota and one retry budget for every replica, kept in Redis: three
//! replicas of a payment client (three registries built from one
//! configuration, as three processes would be) share a limit of 10 charges
//! an hour, and a budget of 5 retries for refunds while the provider fails.
//!
//! Run it with a redis-server at hand (the feature `redis` of
//! resilient-core is off by default):
//!
//! ```text
//! redis-server --port 6399 --save '' --appendonly no --daemonize yes
//! RESILIENT_REDIS_URL=redis://127.0.0.1:6399 cargo run -p examples --features redis --bin shared_quota
//! ```

use std::sync::atomic::{AtomicU32, Ordering};

use resilient_core::{rate_limited, retryable, RateLimiterSpec, Registry, RetrySpec};

/// The provider's quota, for all replicas together.
#[derive(RateLimiterSpec)]
#[spec("resilient.ratelimiter.payments")]
pub struct PaymentsQuota;

/// Refunds retried, within one budget for all replicas.
#[derive(RetrySpec)]
#[spec("resilient.retry.refunds")]
pub struct RefundsRetry;

/// The configuration every replica reads; `{url}` and `{prefix}` are
/// filled in at startup (a prefix of this run's own, so that a second run
/// starts afresh).
const CONFIG: &str = r#"
[resilient.redis]
url = "{url}"
key_prefix = "{prefix}"

[resilient.ratelimiter.payments]
limit_for_period = 10
limit_refresh_period = "1h"
backend = "redis"

[resilient.retry.refunds]
attempts = 2
delay = "1ms"
retry_budget = { tokens_max = 5, tokens_initial = 5, ratio = 0.0, backend = "redis" }
"#;

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error("the provider is unavailable")]
    Unavailable,
    #[error(transparent)]
    Resilience(#[from] resilient_core::Error),
}

/// Calls that reached the provider, per replica.
static REACHED: [AtomicU32; 3] = [AtomicU32::new(0), AtomicU32::new(0), AtomicU32::new(0)];

#[rate_limited(PaymentsQuota)]
async fn charge(replica: usize) -> Result<(), PayError> {
    REACHED[replica].fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// The provider fails every refund meanwhile.
#[retryable(RefundsRetry)]
async fn refund(replica: usize) -> Result<(), PayError> {
    REACHED[replica].fetch_add(1, Ordering::Relaxed);
    Err(PayError::Unavailable)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("RESILIENT_REDIS_URL")
        .map_err(|_| "set RESILIENT_REDIS_URL to a redis-server's URL (see this example's docs)")?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos();
    let prefix = format!("shared-quota-{}-{nanos}", std::process::id());
    let text = CONFIG.replace("{url}", &url).replace("{prefix}", &prefix);
    let config = config::Config::builder()
        .add_source(config::File::from_str(&text, config::FileFormat::Toml))
        .build()?;
    let mut replicas = Vec::new();
    for _ in 0..3 {
        let builder = Registry::builder()
            .spec::<PaymentsQuota>()
            .spec::<RefundsRetry>();
        replicas.push(resilient_config::build(builder, &config)?);
    }

    // Six charges per replica, in turn: the first ten of all are admitted.
    let mut charged = [0; 3];
    let mut refused = 0;
    for _ in 0..6 {
        for (i, r) in replicas.iter().enumerate() {
            match r.scope(charge(i)).await {
                Ok(()) => charged[i] += 1,
                Err(PayError::Resilience(resilient_core::Error::RateLimitExceeded { .. })) => {
                    refused += 1
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    println!(
        "quota of 10 an hour, shared: replica 1 charged {}, replica 2 {}, replica 3 {}; {refused} refused",
        charged[0], charged[1], charged[2]
    );

    // Ten refunds per replica, in turn, while the provider fails: each may
    // be retried twice, out of five retries for all.
    for counter in &REACHED {
        counter.store(0, Ordering::Relaxed);
    }
    for _ in 0..10 {
        for (i, r) in replicas.iter().enumerate() {
            let _failed = r.scope(refund(i)).await;
        }
    }
    let retried = REACHED.each_ref().map(|r| r.load(Ordering::Relaxed) - 10);
    println!(
        "budget of 5 retries, shared: replica 1 retried {}, replica 2 {}, replica 3 {}; {} in all",
        retried[0],
        retried[1],
        retried[2],
        retried.iter().sum::<u32>()
    );
    Ok(())
}
