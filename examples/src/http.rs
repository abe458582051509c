//! A loopback HTTP server that answers from a script, and a one-shot client.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// A server on `127.0.0.1` that counts requests and answers each with the
/// status its script gives for that request's number.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    hits: Arc<AtomicU32>,
    times: Arc<Mutex<Vec<Instant>>>,
    task: JoinHandle<()>,
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
        let hits = Arc::new(AtomicU32::new(0));
        let times = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(script);
        let (counter, log) = (Arc::clone(&hits), Arc::clone(&times));
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                log.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(Instant::now());
                let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
                let reply = script(n);
                tokio::spawn(async move {
                    let _ = answer(stream, &reply).await;
                });
            }
        });
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

async fn answer(stream: TcpStream, reply: &Reply) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream);
    // Read the request head up to the blank line.
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).await? == 0 || line == "\r\n" || line == "\n" {
            break;
        }
    }
    let Reply {
        status,
        headers,
        body,
    } = reply;
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        408 => "Request Timeout",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    };
    let mut head = format!("HTTP/1.1 {status} {reason}\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    let response = format!(
        "{head}content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut stream = reader.into_inner();
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
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
pub async fn get(addr: SocketAddr, path: &str) -> std::io::Result<Response> {
    let mut stream = TcpStream::connect(addr).await?;
    let request = format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await?;
    let invalid = || std::io::Error::new(std::io::ErrorKind::InvalidData, "malformed response");
    let (head, body) = raw.split_once("\r\n\r\n").ok_or_else(invalid)?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(invalid)?;
    Ok(Response {
        status,
        body: body.to_owned(),
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
) -> std::io::Result<::http::Response<String>> {
    let mut stream = TcpStream::connect(addr).await?;
    let request = format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await?;
    let invalid =
        |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned());
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .ok_or_else(|| invalid("no end of head"))?;
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| invalid("no status"))?;
    let mut response = ::http::Response::builder().status(status);
    for line in lines {
        let (name, value) = line.split_once(':').ok_or_else(|| invalid("bad header"))?;
        response = response.header(name.trim(), value.trim());
    }
    response
        .body(body.to_owned())
        .map_err(|e| invalid(&e.to_string()))
}
