//! The dashboard page: one HTML file with its style and script inside, no
//! resource from elsewhere (no CDN, no build step, no framework), so that
//! it works where the service runs, offline, behind whatever the
//! application mounts it under.
//!
//! It reads `snapshot`, `ready` and `events` once, relative to its own
//! address, then follows `stream` (Server-Sent Events): every spec's state
//! at a glance, with the last two minutes of each breaker's failure and
//! slow-call rates, each limit's places in use against its limit (an
//! adaptive limit's history with it), each rate limiter's permits, each
//! retry spec's retries per second and budget, the keys worth seeing (the
//! unhealthy ones), the shared backend, and the latest events. Every value
//! from the service is written as text, never as markup.
//!
//! What a test or a script reads from the page after its script ran: the
//! `body`'s `data-ready` (`ready`, `degraded`, `not_ready`), `data-live`
//! (`connecting`, `live`, `dropped`) and `data-updates` (snapshots shown);
//! each spec's card, `[data-path="…"]`, with `data-kind` and, for a
//! breaker or a backend, `data-state`.

/// The page.
pub(super) const PAGE: &str = include_str!("dashboard.html");
