//! The pet store service as its clients see it: a real axum server on a
//! runtime of two workers, each request sent from a task of its own, the
//! upstream store counting what reached it.

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::routing::get;
use axum::Router;
use examples::petstore::{PetClient, PetsLimit};
use resilient_core::{ConcurrencyLimitSpec, Registry};
use tokio::sync::{mpsc, Semaphore};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn settings(limit: u32) -> String {
    format!(
        "[resilient.retry.pet]
delay = \"1ms\"
attempts = 2
max_hinted_delay = \"50ms\"
[resilient.circuitbreaker.pet]
failure_rate_threshold = 100
minimum_required_calls = 100
wait_duration_in_open_state = \"1m\"
permitted_calls_in_half_open_state = 1
count_based = {{ window_size = 100 }}
[resilient.timeout.pet]
duration = \"5s\"
[resilient.concurrency.pets]
limit = {limit}"
    )
}

/// A runtime of two workers whose every thread uses `registry`.
fn runtime(registry: &Registry) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.worker_threads(2).enable_all();
    registry.set_default_on(&mut builder).build()
}

/// Serves the pet store over `upstream` on a loopback port.
async fn serve(upstream: SocketAddr, registry: &Registry) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let app = examples::petstore::app(PetClient::new(upstream), registry.clone(), None);
    tokio::spawn(axum::serve(listener, app).into_future());
    Ok(addr)
}

/// `GET path` from a task of its own: the status and the body.
async fn get_from_a_task(addr: SocketAddr, path: String) -> Result<(u16, String), BoxError> {
    let task = tokio::spawn(async move {
        let response = examples::http::get(addr, &path).await?;
        Ok::<_, BoxError>((response.status, response.body))
    });
    task.await?
}

#[test]
fn a_client_sees_the_pet_then_the_cached_pet_then_a_502() -> Result<(), BoxError> {
    let registry = examples::petstore::registry(&settings(8)).map_err(|e| e.to_string())?;
    runtime(&registry)?.block_on(async {
        // Two 503s, the second asking for a second's wait; pet 7; then down.
        let upstream = examples::petstore::flaky_upstream().await?;
        let service = serve(upstream.addr(), &registry).await?;

        let fresh = get_from_a_task(service, "/pets/7".into()).await?;
        assert_eq!(fresh, (200, r#"{"id":7,"name":"Rex"}"#.to_owned()));
        assert_eq!(upstream.hits(), 3);
        // The retry waited its delay, then the hint capped by
        // `max_hinted_delay` (50 ms, not the second the store asked for).
        let gaps = upstream.gaps();
        assert!(gaps[0] >= Duration::from_millis(1), "{gaps:?}");
        assert!(gaps[1] >= Duration::from_millis(50), "{gaps:?}");
        assert!(gaps[1] < Duration::from_secs(1), "{gaps:?}");

        let (status, body) = get_from_a_task(service, "/pets/7".into()).await?;
        assert_eq!(status, 200);
        assert!(
            body.contains(r#""name":"Rex","stale":"`PetRetry` gave up after 3 calls"#),
            "{body}"
        );
        assert_eq!(upstream.hits(), 6, "three attempts before the cache");

        let (status, body) = get_from_a_task(service, "/pets/8".into()).await?;
        assert_eq!((status, body.as_str()), (502, ""), "nothing cached for 8");
        assert_eq!(upstream.hits(), 9);
        Ok(())
    })
}

/// An upstream whose every answer waits for a permit of `open`, and which
/// says on `arrived` when a request reached it.
#[derive(Clone)]
struct Gated {
    hits: Arc<AtomicU32>,
    open: Arc<Semaphore>,
    arrived: mpsc::UnboundedSender<()>,
}

async fn held(State(gated): State<Gated>) -> &'static str {
    gated.hits.fetch_add(1, Ordering::SeqCst);
    let _ = gated.arrived.send(());
    if let Ok(permit) = gated.open.acquire().await {
        permit.forget();
    }
    r#"{"id": 1, "name": "Rex"}"#
}

#[test]
fn the_route_limit_answers_503_to_requests_past_it_and_frees_every_place() -> Result<(), BoxError> {
    let registry = examples::petstore::registry(&settings(2)).map_err(|e| e.to_string())?;
    runtime(&registry)?.block_on(async {
        let (arrived, mut arrivals) = mpsc::unbounded_channel();
        let gated = Gated {
            hits: Arc::default(),
            open: Arc::new(Semaphore::new(0)),
            arrived,
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let upstream = listener.local_addr()?;
        let router = Router::new()
            .route("/pets/{id}", get(held))
            .with_state(gated.clone());
        tokio::spawn(axum::serve(listener, router).into_future());
        let service = serve(upstream, &registry).await?;

        // Six requests at once, each from a task of its own.
        let (done, mut answers) = mpsc::unbounded_channel();
        for id in 1..=6 {
            let done = done.clone();
            tokio::spawn(async move {
                let _ = done.send(get_from_a_task(service, format!("/pets/{id}")).await);
            });
        }
        // Two reach the upstream and hold their places there; the other
        // four are answered while they do.
        for _ in 0..2 {
            arrivals.recv().await.ok_or("an arrival")?;
        }
        let mut statuses = Vec::new();
        for _ in 0..4 {
            let (status, _) = answers.recv().await.ok_or("an answer")??;
            statuses.push(status);
        }
        assert_eq!(statuses, [503; 4]);
        assert_eq!(gated.hits.load(Ordering::SeqCst), 2);
        let limit = registry.sync_scope(PetsLimit::get)?;
        assert_eq!(limit.in_use(), 2);

        gated.open.add_permits(2);
        for _ in 0..2 {
            let (status, _) = answers.recv().await.ok_or("an answer")??;
            statuses.push(status);
        }
        assert_eq!(statuses, [503, 503, 503, 503, 200, 200]);
        assert_eq!(
            gated.hits.load(Ordering::SeqCst),
            2,
            "no refused request went on"
        );
        assert_eq!(limit.in_use(), 0, "every place given back");
        Ok(())
    })
}
