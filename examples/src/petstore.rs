//! The pet store: an axum service whose `GET /pets/{id}` looks the pet up at
//! an upstream store through a reqwest client with resilience attributes,
//! under a concurrency limit that is a route layer, beside `/health` and
//! `/metrics`.
//!
//! - [`PetClient::lookup`]: one request to the upstream, through a circuit
//!   breaker (outermost: one outcome per lookup) and a retry, each attempt
//!   bounded by a timeout. Both count a 5xx response as a failure although
//!   reqwest returns it as `Ok` (`classify = http`), and the retry waits what
//!   a `Retry-After` header asks for instead of its own delay (up to its
//!   `max_hinted_delay`).
//! - [`PetClient::find`]: the lookup decoded, with a fallback to the last
//!   answer the upstream gave for that pet when the resilience layers gave
//!   up.
//! - [`app`]: the routes; a request that [`PetsLimit`] refuses is answered
//!   503 by [`RespondLayer`], and a lookup the layers gave up on 502; the
//!   admin routes and the dashboard at `/resilience`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use metrics_exporter_prometheus::PrometheusHandle;
use resilient_core::admin::Admin;
use resilient_core::layer::RespondLayer;
use resilient_core::prelude::*;
use resilient_core::Registry;
use serde::{Deserialize, Serialize};

use crate::http::{Reply, Server};

/// Retry settings for pet lookups, at `resilient.retry.pet`: a 5xx, 408 or
/// 429 response is a failure, and its `Retry-After` the wait.
#[derive(RetrySpec)]
#[spec("resilient.retry.pet", classify = http)]
pub struct PetRetry;

/// Circuit breaker settings for the upstream store, at
/// `resilient.circuitbreaker.pet`, classified as [`PetRetry`] is.
#[derive(CircuitBreakerSpec)]
#[spec("resilient.circuitbreaker.pet", classify = http)]
pub struct PetBreaker;

/// A time limit for each attempt of a lookup, at `resilient.timeout.pet`.
#[derive(TimeoutSpec)]
#[spec("resilient.timeout.pet")]
pub struct PetTimeout;

/// How many `/pets/{id}` requests the service serves at once, at
/// `resilient.concurrency.pets`: a route layer.
#[derive(ConcurrencyLimitSpec)]
#[spec("resilient.concurrency.pets")]
pub struct PetsLimit;

/// A registry of the four pet store specs, from `toml` holding their
/// sections: what a test builds and runs its calls in, instead of installing
/// one.
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
            .spec::<PetTimeout>()
            .spec::<PetsLimit>(),
        &settings,
    )?)
}

/// A pet, as the store and this service write it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pet {
    /// Its id.
    pub id: u64,
    /// Its name.
    pub name: String,
    /// Why the answer came from the cache, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stale: Option<String>,
}

/// Why a lookup failed.
#[derive(Debug, thiserror::Error)]
pub enum PetError {
    /// The store could not be reached, or its answer not read.
    #[error("pet store unreachable: {0}")]
    Unreachable(#[from] reqwest::Error),
    /// The store answered with a status that is no pet (a 404).
    #[error("pet store answered {0}")]
    Status(u16),
    /// The store's answer is no pet.
    #[error("pet store sent no pet: {0}")]
    Decode(#[from] serde_json::Error),
    /// A resilience layer refused the lookup or gave up.
    #[error(transparent)]
    Resilience(#[from] resilient_core::Error),
}

impl PetError {
    /// Whether a resilience layer refused the lookup or gave up on it: what
    /// the cache answers for. A spec without settings is no such failure:
    /// it shows.
    pub fn gave_up(&self) -> bool {
        matches!(self, Self::Resilience(e) if !matches!(e, resilient_core::Error::NotConfigured { .. }))
    }
}

impl IntoResponse for PetError {
    fn into_response(self) -> Response {
        match self {
            // 429, 502, 503, 504, with `Retry-After` when it is known.
            Self::Resilience(e) => e.into_response(),
            Self::Status(404) => StatusCode::NOT_FOUND.into_response(),
            other => (StatusCode::BAD_GATEWAY, other.to_string()).into_response(),
        }
    }
}

/// A client of the upstream pet store at one address.
#[derive(Debug, Clone)]
pub struct PetClient {
    http: reqwest::Client,
    base: String,
    /// The last pet the store sent for each id, for the fallback.
    cache: Arc<Mutex<HashMap<u64, Pet>>>,
}

impl PetClient {
    /// A client of the store at `addr`.
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            http: reqwest::Client::new(),
            base: format!("http://{addr}"),
            cache: Arc::default(),
        }
    }

    /// Sends `GET /pets/{id}` to the store and reads its answer whole:
    /// through [`PetBreaker`], retried under [`PetRetry`], each attempt
    /// (its body included) within [`PetTimeout`] (Kora's order). A 5xx
    /// answer after the retries is the retry's `RetryExhausted`, which keeps
    /// the last response.
    #[circuit_breakable(PetBreaker)]
    #[retryable(PetRetry)]
    #[timeout(PetTimeout)]
    pub async fn lookup(&self, id: u64) -> Result<http::Response<String>, PetError> {
        let sent = self
            .http
            .get(format!("{}/pets/{id}", self.base))
            .send()
            .await?;
        let mut response = http::Response::new(String::new());
        *response.status_mut() = sent.status();
        *response.headers_mut() = sent.headers().clone();
        // Read here, inside the timeout: a store that sends its head and
        // then stalls is one slow attempt, retried like any other.
        *response.body_mut() = sent.text().await?;
        Ok(response)
    }

    /// Pet `id`: the [`lookup`](Self::lookup) read as a pet, or, when the
    /// resilience layers refused it or gave up, the last pet the store sent
    /// for that id, marked stale. Any other failure (a 404, an answer that is
    /// no pet) is the caller's.
    #[fallback(method = "cached(id)", when = PetError::gave_up)]
    pub async fn find(&self, id: u64) -> Result<Pet, PetError> {
        let response = self.lookup(id).await?;
        let status = response.status();
        if !status.is_success() {
            return Err(PetError::Status(status.as_u16()));
        }
        let pet: Pet = serde_json::from_str(response.body())?;
        self.cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, pet.clone());
        Ok(pet)
    }

    /// The fallback: the cached pet, or the error when there is none.
    async fn cached(&self, id: u64, error: PetError) -> Result<Pet, PetError> {
        let cached = self
            .cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
            .cloned();
        match cached {
            Some(pet) => Ok(Pet {
                stale: Some(error.to_string()),
                ..pet
            }),
            None => Err(error),
        }
    }
}

/// The upstream store the example runs against: two 503s (the second
/// asks for a second's wait with `Retry-After`), then pet 7, then 503 from
/// there on.
///
/// # Errors
///
/// When no loopback port can be bound.
pub async fn flaky_upstream() -> std::io::Result<Server> {
    Server::replying(|n| match n {
        1 => Reply::new(503, "busy"),
        2 => Reply::new(503, "busy").header("retry-after", "1"),
        3 => Reply::new(200, r#"{"id": 7, "name": "Rex"}"#),
        _ => Reply::new(503, "down"),
    })
    .await
}

/// The service's routes: `GET /pets/{id}` under [`PetsLimit`], `/health`
/// and `/metrics` (see [`health`](crate::health)) from `registry` and
/// `metrics`, and the admin read routes at `/resilience` (the dashboard at
/// `/resilience` itself, see [`admin`](crate::admin)).
pub fn app(client: PetClient, registry: Registry, metrics: Option<PrometheusHandle>) -> Router {
    let admin = Admin::new(registry.clone());
    service(client, registry, metrics, &admin, None)
}

/// [`app`] with the admin routes of `admin`, its write routes too when
/// `token` is given (each request then needs `Authorization: Bearer
/// <token>`).
pub fn service(
    client: PetClient,
    registry: Registry,
    metrics: Option<PrometheusHandle>,
    admin: &Admin,
    token: Option<&str>,
) -> Router {
    Router::new()
        .route(
            "/pets/{id}",
            get(pet).route_layer(RespondLayer::new(PetsLimit::layer())),
        )
        .with_state(client)
        .merge(crate::health::routes(registry, metrics))
        .nest("/resilience", crate::admin::routes(admin, token))
}

async fn pet(State(client): State<PetClient>, Path(id): Path<u64>) -> Result<Json<Pet>, PetError> {
    Ok(Json(client.find(id).await?))
}
