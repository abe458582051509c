//! A `/health` endpoint: every spec's state, as JSON, from
//! [`Registry::snapshot`] (the `serde` feature of `resilient-core`).

use resilient_core::Registry;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// The body of `GET /health`.
///
/// # Errors
///
/// When the snapshot cannot be written as JSON (it always can).
pub fn body(registry: &Registry) -> serde_json::Result<String> {
    serde_json::to_string_pretty(&registry.snapshot())
}

/// Answers `GET /health` on `listener` with `registry`'s snapshot, and any
/// other path with 404, one request per connection, until the task is
/// dropped.
pub async fn serve(listener: TcpListener, registry: Registry) {
    while let Ok((stream, _)) = listener.accept().await {
        let registry = registry.clone();
        tokio::spawn(async move {
            let _ = answer(stream, &registry).await;
        });
    }
}

async fn answer(stream: TcpStream, registry: &Registry) -> std::io::Result<()> {
    let mut stream = BufReader::new(stream);
    let mut request_line = String::new();
    stream.read_line(&mut request_line).await?;
    // Drain the headers.
    let mut line = String::new();
    while stream.read_line(&mut line).await? > 2 {
        line.clear();
    }
    let path = request_line.split_whitespace().nth(1).unwrap_or("");
    let (status, content) = match (path, body(registry)) {
        ("/health", Ok(json)) => ("200 OK", json),
        ("/health", Err(e)) => ("500 Internal Server Error", e.to_string()),
        _ => ("404 Not Found", String::new()),
    };
    let reply = format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{content}",
        content.len()
    );
    stream.get_mut().write_all(reply.as_bytes()).await
}
