//! A real axum server on a runtime of two workers, whose handlers call an
//! annotated client: with the test's registry made the default of every
//! thread the runtime starts (`Registry::set_default_on`), every request
//! uses the test's settings, counted at the upstream server.

use std::collections::BTreeSet;
use std::future::IntoFuture;
use std::sync::{Arc, Mutex, PoisonError};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use examples::http::Server;
use examples::petstore::{PetClient, PetError};
use resilient_core::{Error, Registry, Unconfigured};

const SETTINGS: &str = "
[resilient.retry.pet]
delay = \"1ms\"
attempts = 2
[resilient.circuitbreaker.pet]
failure_rate_threshold = 100
minimum_required_calls = 100
wait_duration_in_open_state = \"1m\"
permitted_calls_in_half_open_state = 1
count_based = { window_size = 100 }
[resilient.timeout.pet]
duration = \"2s\"
[resilient.concurrency.pets]
limit = 8";

#[derive(Clone)]
struct App {
    client: PetClient,
    /// The threads the handlers ran on.
    threads: Arc<Mutex<BTreeSet<String>>>,
}

async fn pet(State(app): State<App>, Path(id): Path<u64>) -> (StatusCode, String) {
    app.threads
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(format!("{:?}", std::thread::current().id()));
    match app.client.lookup(id).await {
        Ok(response) => (response.status(), response.into_body()),
        Err(PetError::Resilience(
            e @ Error::NotConfigured {
                reason: Unconfigured::OutsideTestRegistry,
                ..
            },
        )) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()),
    }
}

/// What six lookups saw: each answer's status and body, the upstream's
/// hits, and the threads the handlers ran on.
struct Seen {
    answers: Vec<(u16, String)>,
    hits: u32,
    threads: BTreeSet<String>,
}

/// Serves the app on a loopback port of `runtime` and sends 6 lookups, one
/// after another.
fn six_lookups(runtime: &tokio::runtime::Runtime) -> Result<Seen, Box<dyn std::error::Error>> {
    runtime.block_on(async {
        // Each lookup's first attempt gets a 503, its retry a 200.
        let upstream = Server::start(|n| {
            if n % 2 == 1 {
                (503, "busy".to_owned())
            } else {
                (200, "{\"name\": \"Rex\"}".to_owned())
            }
        })
        .await?;
        let app = App {
            client: PetClient::new(upstream.addr()),
            threads: Arc::default(),
        };
        let router = Router::new()
            .route("/pets/{id}", get(pet))
            .with_state(app.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let server = tokio::spawn(axum::serve(listener, router).into_future());
        let mut answers = Vec::new();
        for id in 1..=6 {
            let response = examples::http::get(addr, &format!("/pets/{id}")).await?;
            answers.push((response.status, response.body));
        }
        server.abort();
        let threads = app
            .threads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        Ok(Seen {
            answers,
            hits: upstream.hits(),
            threads,
        })
    })
}

fn two_workers() -> tokio::runtime::Builder {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.worker_threads(2).enable_all();
    builder
}

#[test]
fn every_request_on_every_worker_uses_the_test_registry() -> Result<(), Box<dyn std::error::Error>>
{
    let registry: Registry = examples::petstore::registry(SETTINGS)?;
    let runtime = registry.set_default_on(&mut two_workers()).build()?;
    let Seen {
        answers,
        hits,
        threads,
    } = six_lookups(&runtime)?;
    for (status, body) in &answers {
        assert_eq!(*status, 200, "{body}");
    }
    // One 503 and one retry per lookup: the test's `attempts = 2` applied.
    assert_eq!(hits, 12);
    let me = format!("{:?}", std::thread::current().id());
    assert!(!threads.is_empty() && !threads.contains(&me), "{threads:?}");
    Ok(())
}

/// What the issue was filed with: `set_default` on the test's thread does
/// not reach the workers. Each request then fails with `NotConfigured`,
/// whose message names the way that works, and the upstream sees nothing.
#[test]
fn a_default_on_the_tests_thread_alone_names_set_default_on(
) -> Result<(), Box<dyn std::error::Error>> {
    let registry: Registry = examples::petstore::registry(SETTINGS)?;
    let _default = registry.set_default();
    let runtime = two_workers().build()?;
    let Seen { answers, hits, .. } = six_lookups(&runtime)?;
    for (status, body) in &answers {
        assert_eq!(*status, 500, "{body}");
        assert!(
            body.contains("registry.set_default_on(&mut builder)"),
            "{body}"
        );
    }
    assert_eq!(hits, 0);
    Ok(())
}
