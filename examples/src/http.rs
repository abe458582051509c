//! A loopback HTTP server that answers from a script (an axum router), and
//! one-shot requests to it through reqwest.

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::IntoResponse;
use axum::Router;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// A server on `127.0.0.1` that counts requests and answers each with the
/// status its script gives for that request's number, whatever its path.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    hits: Arc<AtomicU32>,
    times: Arc<Mutex<Vec<Instant>>>,
    task: JoinHandle<std::io::Result<()>>,
}

/// What the server answers to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// Extra headers, as (name, value).
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: String,
}

impl Reply {
    /// A reply with `status` and `body` and no extra header.
    pub fn new(status: u16, body: &str) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: body.to_owned(),
        }
    }

    /// The reply with header `name: value` added.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }
}

impl IntoResponse for Reply {
    fn into_response(self) -> axum::response::Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, self.body).into_response();
        for (name, value) in &self.headers {
            // A script's header that is no valid header is left out.
            if let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) {
                response.headers_mut().append(name, value);
            }
        }
        response
    }
}

/// The script and the counters a [`Server`]'s handler shares.
#[derive(Clone)]
struct Scripted {
    script: Arc<dyn Fn(u32) -> Reply + Send + Sync>,
    hits: Arc<AtomicU32>,
    times: Arc<Mutex<Vec<Instant>>>,
}

async fn answer(State(scripted): State<Scripted>) -> Reply {
    scripted
        .times
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(Instant::now());
    let n = scripted.hits.fetch_add(1, Ordering::SeqCst) + 1;
    (scripted.script)(n)
}

impl Server {
    /// Starts a server; `script(n)` is the status and body of request `n`
    /// (counted from 1).
    pub async fn start<F>(script: F) -> std::io::Result<Self>
    where
        F: Fn(u32) -> (u16, String) + Send + Sync + 'static,
    {
        Self::replying(move |n| {
            let (status, body) = script(n);
            Reply::new(status, &body)
        })
        .await
    }

    /// Starts a server; `script(n)` is the whole reply to request `n`
    /// (counted from 1), headers included.
    pub async fn replying<F>(script: F) -> std::io::Result<Self>
    where
        F: Fn(u32) -> Reply + Send + Sync + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let scripted = Scripted {
            script: Arc::new(script),
            hits: Arc::new(AtomicU32::new(0)),
            times: Arc::new(Mutex::new(Vec::new())),
        };
        let (hits, times) = (Arc::clone(&scripted.hits), Arc::clone(&scripted.times));
        let router = Router::new().fallback(answer).with_state(scripted);
        let task = tokio::spawn(axum::serve(listener, router).into_future());
        Ok(Self {
            addr,
            hits,
            times,
            task,
        })
    }

    /// A server that fails the first `failures` requests with 503, then
    /// answers 200 with `body`.
    pub async fn failing_first(failures: u32, body: &str) -> std::io::Result<Self> {
        let body = body.to_owned();
        Self::start(move |n| {
            if n <= failures {
                (503, "unavailable".to_owned())
            } else {
                (200, body.clone())
            }
        })
        .await
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Requests received so far.
    pub fn hits(&self) -> u32 {
        self.hits.load(Ordering::SeqCst)
    }

    /// The time between each request and the one before it, on tokio's
    /// clock (the paused clock in a test with `start_paused`).
    pub fn gaps(&self) -> Vec<std::time::Duration> {
        let times = self.times.lock().unwrap_or_else(|e| e.into_inner());
        times.windows(2).map(|w| w[1] - w[0]).collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A response: its status and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The body, as text.
    pub body: String,
}

/// Sends `GET path` to `addr` and reads the whole response.
///
/// Like most HTTP clients, it returns `Ok` for every status, 5xx included:
/// only a transport failure is an `Err`.
pub async fn get(addr: SocketAddr, path: &str) -> reqwest::Result<Response> {
    let response = reqwest::get(format!("http://{addr}{path}")).await?;
    Ok(Response {
        status: response.status().as_u16(),
        body: response.text().await?,
    })
}

/// Sends `GET path` to `addr` and reads the whole response as an
/// [`http::Response`], headers included: what `classify = http` classifies.
///
/// Like [`get`], it returns `Ok` for every status; only a transport failure
/// is an `Err`.
pub async fn get_response(
    addr: SocketAddr,
    path: &str,
) -> reqwest::Result<::http::Response<String>> {
    let response = reqwest::get(format!("http://{addr}{path}")).await?;
    let mut head = ::http::Response::new(String::new());
    *head.status_mut() = response.status();
    *head.headers_mut() = response.headers().clone();
    let body = response.text().await?;
    *head.body_mut() = body;
    Ok(head)
}
