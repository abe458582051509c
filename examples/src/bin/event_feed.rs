//! A stream under the attributes: an event feed whose subscriptions fail
//! before their first event now and then, stall, or find the feed down.
//! A retry subscribes again (never after an event has passed), a timeout
//! ends a stalled feed, and a fallback replays the cache when the feed is
//! down.
//!
//! Run with `cargo run -p examples --bin event_feed`.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use resilient_core::prelude::*;
use resilient_core::stream::Stream;
use resilient_core::Registry;

/// Subscribes again after a failure before the first event.
#[derive(RetrySpec)]
#[spec("resilient.retry.feed")]
pub struct FeedRetry;

/// The first event within `duration`, then no gap longer than `idle`.
#[derive(TimeoutSpec)]
#[spec("resilient.timeout.feed")]
pub struct FeedTimeout;

const CONFIG: &str = r#"
[resilient.retry.feed]
attempts = 2
delay = "10ms"

[resilient.timeout.feed]
duration = "500ms"
idle = "100ms"
"#;

#[derive(Debug, thiserror::Error)]
enum FeedError {
    #[error("subscription refused")]
    Refused,
    #[error(transparent)]
    Resilience(#[from] resilient_core::Error),
}

/// The upstream feed: how many subscriptions it refuses next, whether it
/// stalls after its second event, whether it is down.
struct Feed {
    subscriptions: AtomicU32,
    refuse: AtomicU32,
    stall: AtomicBool,
    down: AtomicBool,
}

impl Feed {
    #[fallback(method = "replay(from)")]
    #[retryable(FeedRetry)]
    #[timeout(FeedTimeout)]
    fn events(&self, from: u32) -> impl Stream<Item = Result<String, FeedError>> + '_ {
        self.subscriptions.fetch_add(1, Ordering::SeqCst);
        let refused = self.down.load(Ordering::SeqCst)
            || self
                .refuse
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
        let stall = self.stall.load(Ordering::SeqCst);
        futures_util::stream::unfold(from, move |n| async move {
            if refused {
                return (n == from).then_some((Err(FeedError::Refused), n + 1));
            }
            if n == from + 5 {
                return None;
            }
            if stall && n == from + 2 {
                std::future::pending::<()>().await;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
            Some((Ok(format!("event {n}")), n + 1))
        })
    }

    fn replay(&self, from: u32) -> impl Stream<Item = Result<String, FeedError>> + '_ {
        futures_util::stream::iter((from..from + 2).map(|n| Ok(format!("cached {n}"))))
    }
}

/// What a subscription yielded, in one line.
async fn show<S: Stream<Item = Result<String, FeedError>>>(s: S) -> String {
    let items: Vec<String> = s
        .map(|item| match item {
            Ok(event) => event,
            Err(e) => format!("error: {e}"),
        })
        .collect()
        .await;
    items.join(", ")
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let config = config::Config::builder()
        .add_source(config::File::from_str(CONFIG, config::FileFormat::Toml))
        .build()?;
    resilient_config::build(
        Registry::builder()
            .spec::<FeedRetry>()
            .spec::<FeedTimeout>(),
        &config,
    )?
    .install()?;

    let feed = Feed {
        subscriptions: AtomicU32::new(0),
        refuse: AtomicU32::new(2),
        stall: AtomicBool::new(false),
        down: AtomicBool::new(false),
    };
    let line = show(feed.events(1)).await;
    println!(
        "refused twice: {line} ({} subscriptions)",
        feed.subscriptions.swap(0, Ordering::SeqCst)
    );
    feed.stall.store(true, Ordering::SeqCst);
    let line = show(feed.events(1)).await;
    println!(
        "stalled: {line} ({} subscription)",
        feed.subscriptions.swap(0, Ordering::SeqCst)
    );
    feed.down.store(true, Ordering::SeqCst);
    let line = show(feed.events(7)).await;
    println!(
        "down: {line} ({} subscriptions)",
        feed.subscriptions.swap(0, Ordering::SeqCst)
    );
    Ok(())
}
