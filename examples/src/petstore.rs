//! A pet store client whose lookups go through a circuit breaker and are
//! retried, with a 5xx response counted as a failure although the HTTP client
//! returns it as `Ok`; one lookup also has a per-attempt timeout and a
//! fallback.

use std::net::SocketAddr;

use resilient_core::{
    circuit_breakable, fallback, retryable, timeout, CircuitBreakerSpec, Classifier, Classify,
    Registry, RetrySpec, TimeoutSpec, Verdict,
};

use crate::http::{self, Response};

/// Retry settings for pet lookups, at `resilient.retry.pet`; outcomes are
/// classified by [`PetOutcomes`].
#[derive(RetrySpec)]
#[spec("resilient.retry.pet", classify = PetOutcomes)]
pub struct PetRetry;

/// Circuit breaker settings for the pet store, at
/// `resilient.circuitbreaker.pet`; it classifies outcomes as [`PetRetry`]
/// does, by naming the same classifier.
#[derive(CircuitBreakerSpec)]
#[spec("resilient.circuitbreaker.pet", classify = PetOutcomes)]
pub struct PetBreaker;

/// A time limit for each attempt of a lookup, at `resilient.timeout.pet`.
#[derive(TimeoutSpec)]
#[spec("resilient.timeout.pet")]
pub struct PetTimeout;

/// A registry of the three pet specs, from `toml` holding their sections:
/// what a test builds and runs its calls in, instead of installing one.
///
/// # Errors
///
/// When `toml` is not TOML, or a section is missing or invalid.
pub fn registry(toml: &str) -> Result<Registry, Box<dyn std::error::Error>> {
    let settings = config::Config::builder()
        .add_source(config::File::from_str(toml, config::FileFormat::Toml))
        .build()?;
    Ok(resilient_config::build(
        Registry::builder()
            .spec::<PetRetry>()
            .spec::<PetBreaker>()
            .spec::<PetTimeout>(),
        &settings,
    )?)
}

/// What counts as a failed lookup, for the retry and the breaker alike.
#[derive(Debug)]
pub struct PetOutcomes;

impl Classifier for PetOutcomes {}

impl Classify<Response, PetError> for PetOutcomes {
    fn classify(outcome: &Result<Response, PetError>) -> Verdict {
        match outcome {
            // A 5xx arrives as a value: still a failure worth retrying.
            Ok(response) if response.status >= 500 => Verdict::Failure,
            Ok(_) => Verdict::Success,
            // The connection failed: retrying may help.
            Err(PetError::Io(_)) => Verdict::Failure,
            // Retry gave up at a lower level, or the spec has no settings:
            // another attempt cannot help.
            Err(PetError::Resilience(_)) => Verdict::Ignore,
        }
    }
}

/// Why a lookup failed.
#[derive(Debug, thiserror::Error)]
pub enum PetError {
    /// The store could not be reached.
    #[error("pet store unreachable: {0}")]
    Io(#[from] std::io::Error),
    /// Retry gave up, or has no settings.
    #[error(transparent)]
    Resilience(#[from] resilient_core::Error),
}

/// A client of the pet store at one address.
#[derive(Debug, Clone)]
pub struct PetClient {
    addr: SocketAddr,
}

impl PetClient {
    /// A client of the store at `addr`.
    pub fn new(addr: SocketAddr) -> Self {
        Self { addr }
    }

    /// Looks up pet `id`: through [`PetBreaker`] (outermost: one outcome per
    /// lookup), retried under [`PetRetry`].
    #[circuit_breakable(PetBreaker)]
    #[retryable(PetRetry)]
    pub async fn find(&self, id: u64) -> Result<Response, PetError> {
        Ok(http::get(self.addr, &format!("/pets/{id}")).await?)
    }

    /// Looks up pet `id` with every layer: a fallback answers from the cache
    /// when the breaker, the retries and the per-attempt timeout could not get
    /// an answer (Kora's canonical order).
    #[fallback(method = "cached(id)")]
    #[circuit_breakable(PetBreaker)]
    #[retryable(PetRetry)]
    #[timeout(PetTimeout)]
    pub async fn find_or_cached(&self, id: u64) -> Result<Response, PetError> {
        let response = http::get(self.addr, &format!("/pets/{id}")).await?;
        Ok(response)
    }

    /// The fallback: what a cache would answer, and why it was asked.
    async fn cached(&self, id: u64, error: PetError) -> Result<Response, PetError> {
        Ok(Response {
            status: 200,
            body: format!("{{\"id\": {id}, \"name\": \"(cached)\"}} after: {error}"),
        })
    }
}
