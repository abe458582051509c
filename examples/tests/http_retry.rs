//! Retry against a real HTTP server on 127.0.0.1: the server counts the
//! requests it received, so a missing or extra retry cannot hide behind the
//! outcome.

use examples::http::Server;
use examples::petstore::{PetBreaker, PetClient, PetError};
use resilient_core::circuit_breaker::State;
use resilient_core::{CircuitBreakerSpec, Error, GaveUp, Registry};

/// A breaker that opens on the 4th failed lookup, and waits a minute.
const BREAKER: &str = "[resilient.circuitbreaker.pet]
failure_rate_threshold = 100
minimum_required_calls = 4
wait_duration_in_open_state = \"1m\"
permitted_calls_in_half_open_state = 1
count_based = { window_size = 4 }";

/// The route limit's section, which the example's registry needs.
const LIMIT: &str = "[resilient.concurrency.pets]\nlimit = 8";

fn registry(retry: &str) -> Result<Registry, Box<dyn std::error::Error>> {
    examples::petstore::registry(&format!(
        "[resilient.retry.pet]\n{retry}\n{BREAKER}\n[resilient.timeout.pet]\nduration = \"2s\"\n{LIMIT}"
    ))
}

#[tokio::test]
async fn server_always_answering_500_gets_one_plus_attempts_requests(
) -> Result<(), Box<dyn std::error::Error>> {
    let registry = registry("delay = \"1ms\"\nattempts = 3")?;
    let server = Server::start(|_| (500, "down".to_owned())).await?;
    let client = PetClient::new(server.addr());

    let out = registry.scope(client.lookup(1)).await;

    assert_eq!(server.hits(), 1 + 3);
    match out {
        Err(PetError::Resilience(Error::RetryExhausted(e)))
            if e.calls == 4 && e.reason == GaveUp::Attempts => {}
        other => panic!("expected exhaustion after 4 calls, got {other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn server_failing_twice_then_answering_gets_three_requests(
) -> Result<(), Box<dyn std::error::Error>> {
    let registry = registry("delay = \"1ms\"\nattempts = 5")?;
    let server = Server::failing_first(2, "rex").await?;
    let client = PetClient::new(server.addr());

    let response = registry.scope(client.lookup(7)).await?;

    assert_eq!(server.hits(), 3);
    assert_eq!(response.status(), 200);
    assert_eq!(response.body(), "rex");
    Ok(())
}

#[tokio::test]
async fn zero_attempts_send_exactly_one_request_and_return_the_503_as_is(
) -> Result<(), Box<dyn std::error::Error>> {
    let registry = registry("delay = \"1ms\"\nattempts = 0")?;
    let server = Server::failing_first(10, "rex").await?;
    let client = PetClient::new(server.addr());

    let response = registry.scope(client.lookup(7)).await?;

    assert_eq!(server.hits(), 1);
    assert_eq!(response.status(), 503);
    Ok(())
}

#[tokio::test]
async fn unreachable_server_is_retried_as_a_transport_failure(
) -> Result<(), Box<dyn std::error::Error>> {
    let registry = registry("delay = \"1ms\"\nattempts = 2")?;
    // Bind, learn the port, and close it again: connections are refused.
    let addr = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.local_addr()?
    };
    let out = registry.scope(PetClient::new(addr).lookup(1)).await;
    match out {
        Err(PetError::Resilience(Error::RetryExhausted(e))) => {
            assert_eq!(e.calls, 3);
            assert!(e.last.to_string().contains("unreachable"), "{}", e.last);
        }
        other => panic!("expected exhaustion, got {other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn an_open_breaker_stops_the_requests_a_failing_server_receives(
) -> Result<(), Box<dyn std::error::Error>> {
    let registry = registry("delay = \"1ms\"\nattempts = 1")?;
    let server = Server::start(|_| (500, "down".to_owned())).await?;
    let client = PetClient::new(server.addr());

    for lookup in 1..=10 {
        let out = registry.scope(client.lookup(lookup)).await;
        if lookup <= 4 {
            assert!(
                matches!(
                    out,
                    Err(PetError::Resilience(Error::RetryExhausted(ref e))) if e.calls == 2
                ),
                "lookup {lookup}: {out:?}"
            );
        } else {
            assert!(
                matches!(
                    out,
                    Err(PetError::Resilience(Error::CallNotPermitted {
                        state: State::Open,
                        ..
                    }))
                ),
                "lookup {lookup}: {out:?}"
            );
        }
    }
    // Four lookups of two requests each opened the breaker; the six after it
    // never reached the server.
    assert_eq!(server.hits(), 4 * 2);
    let breaker = registry.sync_scope(PetBreaker::get)?;
    assert_eq!(breaker.metrics().rejected, 6);
    Ok(())
}

#[tokio::test]
async fn a_store_that_went_down_is_answered_from_the_cache_after_the_retries(
) -> Result<(), Box<dyn std::error::Error>> {
    let registry = registry("delay = \"1ms\"\nattempts = 2")?;
    let server = Server::start(|n| match n {
        1 => (200, r#"{"id": 8, "name": "Rex"}"#.to_owned()),
        _ => (503, "down".to_owned()),
    })
    .await?;
    let client = PetClient::new(server.addr());

    let fresh = registry.scope(client.find(8)).await?;
    assert_eq!((fresh.name.as_str(), fresh.stale), ("Rex", None));
    assert_eq!(server.hits(), 1);
    let cached = registry.scope(client.find(8)).await?;

    assert_eq!(server.hits(), 1 + 3, "every attempt reached the server");
    assert_eq!(cached.name, "Rex");
    let why = cached.stale.ok_or("a cached pet says why")?;
    assert!(why.contains("gave up after 3 calls"), "{why}");
    Ok(())
}

#[tokio::test]
async fn a_pet_never_seen_is_the_retrys_error_and_a_404_is_not_retried(
) -> Result<(), Box<dyn std::error::Error>> {
    let registry = registry("delay = \"1ms\"\nattempts = 2")?;
    let server = Server::start(|n| match n {
        1 => (404, "no such pet".to_owned()),
        _ => (503, "down".to_owned()),
    })
    .await?;
    let client = PetClient::new(server.addr());

    let missing = registry.scope(client.find(9)).await;
    assert!(matches!(missing, Err(PetError::Status(404))), "{missing:?}");
    assert_eq!(server.hits(), 1, "a 404 is an answer: not retried");
    let unknown = registry.scope(client.find(9)).await;
    assert!(
        matches!(unknown, Err(PetError::Resilience(Error::RetryExhausted(ref e))) if e.calls == 3),
        "nothing cached for pet 9: {unknown:?}"
    );
    assert_eq!(server.hits(), 1 + 3);
    Ok(())
}

/// A store that sends its head and then stalls: the per-attempt timeout
/// covers the body, so each attempt ends, is retried, and the retry gives
/// up, counted at the store.
#[tokio::test]
async fn a_store_that_stalls_in_its_body_is_timed_out_per_attempt(
) -> Result<(), Box<dyn std::error::Error>> {
    use std::future::IntoFuture;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    let registry = examples::petstore::registry(&format!(
        "[resilient.retry.pet]\ndelay = \"1ms\"\nattempts = 1\n{BREAKER}\n[resilient.timeout.pet]\nduration = \"100ms\"\n{LIMIT}"
    ))?;
    let hits = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&hits);
    let stalling = axum::Router::new().fallback(move || {
        counted.fetch_add(1, Ordering::SeqCst);
        async {
            let never = futures_util::stream::pending::<Result<Vec<u8>, std::io::Error>>();
            axum::body::Body::from_stream(never)
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(axum::serve(listener, stalling).into_future());

    let out = registry.scope(PetClient::new(addr).lookup(1)).await;

    match out {
        Err(PetError::Resilience(Error::RetryExhausted(e))) => {
            assert_eq!(e.calls, 2);
            // The last attempt's failure, as the timeout raised it.
            assert!(
                matches!(e.last.downcast_ref::<Error>(), Some(Error::Timeout { .. })),
                "{}",
                e.last
            );
        }
        other => panic!("expected two timed-out attempts, got {other:?}"),
    }
    assert_eq!(hits.load(Ordering::SeqCst), 2);
    server.abort();
    Ok(())
}
