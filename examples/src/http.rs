//! A loopback HTTP server that answers from a script, and a one-shot client.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A server on `127.0.0.1` that counts requests and answers each with the
/// status its script gives for that request's number.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    hits: Arc<AtomicU32>,
    task: JoinHandle<()>,
}

impl Server {
    /// Starts a server; `script(n)` is the status and body of request `n`
    /// (counted from 1).
    pub async fn start<F>(script: F) -> std::io::Result<Self>
    where
        F: Fn(u32) -> (u16, String) + Send + Sync + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let hits = Arc::new(AtomicU32::new(0));
        let script = Arc::new(script);
        let counter = Arc::clone(&hits);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
                let (status, body) = script(n);
                tokio::spawn(async move {
                    let _ = answer(stream, status, &body).await;
                });
            }
        });
        Ok(Self { addr, hits, task })
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
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn answer(stream: TcpStream, status: u16, body: &str) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream);
    // Read the request head up to the blank line.
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).await? == 0 || line == "\r\n" || line == "\n" {
            break;
        }
    }
    let reason = match status {
        200 => "OK",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    };
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
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
