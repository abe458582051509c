//! `use resilient_core::prelude::*;` is the one import a module needs to
//! declare a spec of every kind, annotate fns with all eight attributes,
//! and reach the specs' handles (`get`, `for_key`), names (`NAME`, `PATH`)
//! and tower layers (`layer`); the rest is written out by path. Nothing
//! here warns.
#![deny(warnings)]

use resilient_core::prelude::*;

#[derive(RetrySpec)]
#[spec("ui.prelude.retry")]
pub struct PetRetry;

#[derive(CircuitBreakerSpec)]
#[spec("ui.prelude.breaker")]
pub struct PetBreaker;

#[derive(TimeoutSpec)]
#[spec("ui.prelude.timeout")]
pub struct PetTimeout;

#[derive(ConcurrencyLimitSpec)]
#[spec("ui.prelude.concurrency")]
pub struct PetLimit;

#[derive(RateLimiterSpec)]
#[spec("ui.prelude.rate")]
pub struct PetRate;

#[derive(ChaosSpec)]
#[spec("ui.prelude.chaos")]
pub struct PetChaos;

#[derive(HedgingSpec)]
#[spec("ui.prelude.hedging")]
pub struct PetHedging;

#[derive(Debug, thiserror::Error)]
pub enum PetError {
    #[error("pet store unavailable")]
    Unavailable,
    #[error(transparent)]
    Resilience(#[from] resilient_core::Error),
}

pub struct PetClient;

impl PetClient {
    #[fallback(method = "cached(id)")]
    #[circuit_breakable(PetBreaker)]
    #[retryable(PetRetry)]
    #[timeout(PetTimeout)]
    #[concurrency_limit(PetLimit)]
    #[rate_limited(PetRate)]
    #[chaos(PetChaos)]
    pub async fn find(&self, id: u64) -> Result<String, PetError> {
        Ok(format!("pet {id}"))
    }

    #[hedged(PetHedging)]
    #[circuit_breakable(PetBreaker, key = host)]
    pub async fn find_at(&self, host: &str, id: u64) -> Result<String, PetError> {
        Ok(format!("pet {id} at {host}"))
    }

    async fn cached(&self, _id: u64) -> Result<String, PetError> {
        Err(PetError::Unavailable)
    }
}

/// The handles, names and layers of the specs, by their traits' methods.
fn reach() -> Result<(), resilient_core::Error> {
    let retry = PetRetry::get()?;
    let host = PetBreaker::for_key("pets.example")?;
    let limit = PetLimit::for_key(&7_u64)?;
    let rate = PetRate::get()?;
    let names = (PetRetry::NAME, PetBreaker::PATH, PetHedging::get().is_ok());
    let pets = tower::ServiceBuilder::new()
        .layer(PetBreaker::layer())
        .layer(PetTimeout::layer())
        .service(tower::service_fn(|id: u64| async move {
            Ok::<_, resilient_core::BoxError>(format!("pet {id}"))
        }));
    let _ = (retry, host, limit, rate, names, pets, PetChaos::get());
    Ok(())
}

fn main() {
    let client = PetClient;
    let _ = (client.find(7), client.find_at("pets.example", 7), reach);
}
