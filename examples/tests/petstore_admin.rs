//! The pet store's admin routes over a real socket: the reads are there
//! for anyone, the routes that act are not mounted without a token, and
//! with one they answer 401 to a request without it (or with another) and
//! act on the breaker with it.

use std::future::IntoFuture;
use std::net::SocketAddr;

use examples::http::Server;
use examples::petstore::PetClient;
use resilient_core::admin::Admin;
use resilient_core::circuit_breaker::State;
use resilient_core::Registry;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn registry() -> Result<Registry, Box<dyn std::error::Error>> {
    examples::petstore::registry(
        "[resilient.retry.pet]
delay = \"1ms\"
attempts = 1
[resilient.circuitbreaker.pet]
failure_rate_threshold = 100
minimum_required_calls = 1
wait_duration_in_open_state = \"1m\"
permitted_calls_in_half_open_state = 1
count_based = { window_size = 1 }
[resilient.timeout.pet]
duration = \"2s\"
[resilient.concurrency.pets]
limit = 8",
    )
}

/// The pet store on a loopback port, and the upstream it calls (kept by
/// the caller: dropping it stops it).
async fn serve(registry: &Registry, token: Option<&str>) -> std::io::Result<(SocketAddr, Server)> {
    let upstream = Server::replying(|_| examples::http::Reply::new(200, "{}")).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let admin = Admin::new(registry.clone());
    let app = examples::petstore::service(
        PetClient::new(upstream.addr()),
        registry.clone(),
        None,
        &admin,
        token,
    );
    tokio::spawn(axum::serve(listener, app).into_future());
    Ok((addr, upstream))
}

async fn post(addr: SocketAddr, path: &str, auth: Option<&str>) -> reqwest::Result<u16> {
    let mut request = reqwest::Client::new().post(format!("http://{addr}{path}"));
    if let Some(auth) = auth {
        request = request.header("authorization", auth);
    }
    Ok(request.send().await?.status().as_u16())
}

fn state(registry: &Registry) -> Option<State> {
    registry
        .snapshot()
        .specs
        .iter()
        .find(|s| s.path == "resilient.circuitbreaker.pet")
        .and_then(|s| s.status::<resilient_core::circuit_breaker::Metrics>())
        .map(|m| m.state)
}

const FORCE_OPEN: &str = "/resilience/breakers/resilient.circuitbreaker.pet/force_open";

#[tokio::test]
async fn without_a_token_the_routes_that_act_are_not_there() -> TestResult {
    let registry = registry()?;
    let (addr, _upstream) = serve(&registry, None).await?;
    assert_eq!(
        examples::http::get(addr, "/resilience/ready").await?.status,
        200
    );
    assert_eq!(examples::http::get(addr, "/resilience").await?.status, 200);
    assert_eq!(post(addr, FORCE_OPEN, None).await?, 404);
    assert_eq!(post(addr, FORCE_OPEN, Some("Bearer anything")).await?, 404);
    assert_eq!(state(&registry), Some(State::Closed));
    Ok(())
}

#[tokio::test]
async fn with_a_token_only_a_request_that_carries_it_acts() -> TestResult {
    let registry = registry()?;
    let (addr, _upstream) = serve(&registry, Some("s3cret-token")).await?;
    assert_eq!(post(addr, FORCE_OPEN, None).await?, 401);
    assert_eq!(
        post(addr, FORCE_OPEN, Some("Bearer s3cret-tokeN")).await?,
        401
    );
    assert_eq!(post(addr, FORCE_OPEN, Some("s3cret-token")).await?, 401);
    assert_eq!(
        state(&registry),
        Some(State::Closed),
        "refused: nothing changed"
    );
    assert_eq!(
        post(addr, FORCE_OPEN, Some("Bearer s3cret-token")).await?,
        200
    );
    assert_eq!(state(&registry), Some(State::ForcedOpen));
    // The reads need no token.
    let ready = examples::http::get(addr, "/resilience/ready").await?;
    assert_eq!(ready.status, 200, "forced open degrades, by default");
    assert!(ready.body.contains("\"forced_open\""), "{}", ready.body);
    assert!(!ready.body.contains("s3cret"), "no token in any answer");
    Ok(())
}
