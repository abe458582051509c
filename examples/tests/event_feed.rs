//! The `event_feed` example: a feed refused twice is subscribed three
//! times and every event passes once; a stalled feed ends with the idle
//! timeout after its two events (not subscribed again: events had passed);
//! a feed that is down is subscribed three times, then the cache replays.

use std::error::Error;

#[test]
fn retry_timeout_and_fallback_on_an_event_feed() -> Result<(), Box<dyn Error>> {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_event_feed")).output()?;
    assert!(output.status.success(), "{output:?}");
    let printed = String::from_utf8(output.stdout)?;
    assert_eq!(
        printed,
        "refused twice: event 1, event 2, event 3, event 4, event 5 (3 subscriptions)\n\
         stalled: event 1, event 2, error: `FeedTimeout` timed out after 100ms (1 subscription)\n\
         down: cached 7, cached 8 (3 subscriptions)\n"
    );
    Ok(())
}
