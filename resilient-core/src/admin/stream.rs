//! The live stream of events (Server-Sent Events): one task per router,
//! running while clients are connected, reads what the calls wrote (the
//! specs' recent events, every `events` period; the snapshot, every
//! `snapshots` period) and hands each client its frames through a bounded
//! queue of its own. A run of rejections counted into its entry after the
//! entry was sent is sent again, same `id`, with its count.
//!
//! The calls never meet a client: they write their spec's ring of recent
//! events as they always do, whether or not anyone streams, and the task
//! reads the rings. No listener is registered, so a client costs the calls
//! no lock and no extra work. A client whose queue is full (it reads
//! slower than events come) is dropped: its queue is closed with a last
//! `dropped` frame, and its connection ends once it has read what was
//! queued. It never holds anything up but itself.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::response::sse;
use tokio::sync::mpsc;

use crate::registry::Registry;

/// One frame of the stream, shared by every client it goes to.
#[derive(Debug)]
pub(super) struct Frame {
    /// The SSE event name: `recorded`, `snapshot`, `dropped`.
    kind: &'static str,
    /// The SSE id: a recorded event's `seq`.
    id: Option<u64>,
    data: String,
}

impl Frame {
    fn to_event(&self) -> sse::Event {
        let event = sse::Event::default().event(self.kind).data(&self.data);
        match self.id {
            Some(id) => event.id(id.to_string()),
            None => event,
        }
    }
}

/// How the stream runs: see [`Admin`](super::Admin)'s setters.
#[derive(Debug, Clone, Copy)]
pub(super) struct Settings {
    /// How often new events are looked for.
    pub(super) events: Duration,
    /// How often a snapshot is sent.
    pub(super) snapshots: Duration,
    /// Frames a client may have queued, unread, before it is dropped.
    pub(super) buffer: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            events: Duration::from_millis(250),
            snapshots: Duration::from_secs(1),
            buffer: 256,
        }
    }
}

/// A connected client, as the task sees it.
struct Client {
    queue: mpsc::Sender<Arc<Frame>>,
}

/// The stream of one router.
pub(super) struct Hub {
    registry: Registry,
    settings: Settings,
    clients: Mutex<Clients>,
    /// Clients dropped for falling behind, since the start.
    dropped: AtomicU64,
}

struct Clients {
    list: Vec<Client>,
    /// Whether the task runs (it ends when the last client goes).
    running: bool,
}

impl Hub {
    pub(super) fn new(registry: Registry, settings: Settings) -> Self {
        Self {
            registry,
            settings,
            clients: Mutex::new(Clients {
                list: Vec::new(),
                running: false,
            }),
            dropped: AtomicU64::new(0),
        }
    }

    /// Clients dropped for falling behind, since the start.
    pub(super) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Connects a client: a snapshot frame at once, then the stream.
    pub(super) fn join(self: &Arc<Self>) -> ClientStream {
        let (queue, frames) = mpsc::channel(self.settings.buffer.max(1));
        // The snapshot now, so that a page has something to show before the
        // first period ends; a queue of one frame has room for it.
        let _ = queue.try_send(Arc::new(self.snapshot_frame()));
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        clients.list.push(Client { queue });
        if !clients.running {
            clients.running = true;
            let hub = Arc::clone(self);
            let after = self.last_seq();
            drop(clients);
            tokio::spawn(hub.run(after));
        }
        ClientStream {
            frames,
            goodbye: false,
        }
    }

    /// The number of the latest event, for a task starting now.
    fn last_seq(&self) -> u64 {
        self.registry.last_event_seq()
    }

    fn snapshot_frame(&self) -> Frame {
        #[derive(serde::Serialize)]
        struct Now<'a> {
            readiness: &'a crate::registry::Readiness,
            snapshot: &'a crate::registry::Snapshot,
            dropped_clients: u64,
        }
        let snapshot = self.registry.snapshot();
        let readiness = snapshot.readiness();
        let data = serde_json::to_string(&Now {
            readiness: &readiness,
            snapshot: &snapshot,
            dropped_clients: self.dropped(),
        })
        .unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
        Frame {
            kind: "snapshot",
            id: None,
            data,
        }
    }

    /// The task: every `events` period, the new events to every client;
    /// every `snapshots` period, the snapshot. Ends when no client is left.
    async fn run(self: Arc<Self>, mut after: u64) {
        let mut since_snapshot = Duration::ZERO;
        // The count sent with each ring's latest entry: a run of rejections
        // grows in its entry, which is sent again when its count changed.
        let mut sent: Vec<(u64, u64)> = Vec::new();
        let frame = |recorded: &crate::telemetry::Recorded| {
            Arc::new(Frame {
                kind: "recorded",
                id: Some(recorded.seq),
                data: serde_json::to_string(recorded).unwrap_or_default(),
            })
        };
        loop {
            tokio::time::sleep(self.settings.events).await;
            let latest = self.registry.recent_latest();
            let mut frames: Vec<Arc<Frame>> = latest
                .iter()
                .filter(|r| r.seq <= after && r.count > 1 && !sent.contains(&(r.seq, r.count)))
                .map(frame)
                .collect();
            frames.extend(self.registry.recent_after(after).iter().map(|recorded| {
                after = after.max(recorded.seq);
                frame(recorded)
            }));
            sent = latest.iter().map(|r| (r.seq, r.count)).collect();
            since_snapshot += self.settings.events;
            if since_snapshot >= self.settings.snapshots {
                since_snapshot = Duration::ZERO;
                frames.push(Arc::new(self.snapshot_frame()));
            }
            let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
            clients.list.retain(|client| self.deliver(client, &frames));
            if clients.list.is_empty() {
                clients.running = false;
                return;
            }
        }
    }

    /// Queues `frames` for `client`; `false` when it is gone, or was just
    /// dropped for a full queue.
    fn deliver(&self, client: &Client, frames: &[Arc<Frame>]) -> bool {
        for frame in frames {
            match client.queue.try_send(Arc::clone(frame)) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Closed(_)) => return false,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        target: "resilient::admin",
                        buffer = self.settings.buffer,
                        "an event stream client fell {} frames behind and was dropped: it reads slower than events come (a client that reconnects starts again from the snapshot)",
                        self.settings.buffer
                    );
                    return false;
                }
            }
        }
        true
    }
}

/// What one client reads: its queue, then a `dropped` frame if the hub
/// dropped it.
pub(super) struct ClientStream {
    frames: mpsc::Receiver<Arc<Frame>>,
    goodbye: bool,
}

impl futures_core::Stream for ClientStream {
    type Item = Result<sse::Event, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.goodbye {
            return Poll::Ready(None);
        }
        match self.frames.poll_recv(cx) {
            Poll::Ready(Some(frame)) => Poll::Ready(Some(Ok(frame.to_event()))),
            Poll::Ready(None) => {
                // The hub let go of the queue: this client fell behind (a
                // client that goes away is never polled again).
                self.goodbye = true;
                Poll::Ready(Some(Ok(sse::Event::default().event("dropped").data(
                    "{\"reason\":\"this client read slower than events came, and was dropped; reconnect to start again from the snapshot\"}",
                ))))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}
