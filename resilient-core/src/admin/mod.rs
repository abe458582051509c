//! Admin routes for axum (feature `admin`): the registry's state, its
//! readiness, each spec's recent events, a live stream of events, a
//! dashboard page, and, apart, the routes that act on breakers and reload
//! the configuration. Nothing is served unless the application mounts it,
//! where it wants, and the routes that change state are a router of their
//! own, for the application to put behind its authentication.
//!
//! ```
//! # #[cfg(feature = "admin")] fn demo(registry: resilient_core::Registry) {
//! use axum::Router;
//! use resilient_core::admin::Admin;
//!
//! let admin = Admin::new(registry);
//! let app: Router = Router::new()
//!     // ... the application's routes ...
//!     .nest("/resilience", admin.read_routes());
//! # let _ = app;
//! # }
//! ```
//!
//! # Read routes ([`Admin::read_routes`], GET only)
//!
//! | route | answer |
//! |---|---|
//! | `/`, `/dashboard` | the dashboard: one page, no script or style from elsewhere, updated live from `stream` (nested at `/resilience`, axum serves `/` at `/resilience`, not `/resilience/`) |
//! | `/snapshot` | [`Registry::snapshot`] as JSON |
//! | `/ready` | [`Snapshot::readiness`](crate::Snapshot::readiness) as JSON; 200, or 503 when not ready |
//! | `/specs/{path}` | one spec of the snapshot; 404 with the paths there are |
//! | `/specs/{path}/events` | the spec's recent events ([`Registry::recent_events_of`]), oldest first |
//! | `/events` | every recent event of the registry, oldest first; `?after=SEQ` for those after one |
//! | `/stream` | Server-Sent Events: `recorded` (each event kept, `id` its `seq`), `snapshot` (`readiness`, `snapshot`, `dropped_clients`), at once and every second |
//!
//! # Write routes ([`Admin::write_routes`], POST only)
//!
//! | route | action |
//! |---|---|
//! | `/breakers/{path}/{action}` | [`Registry::operate_breaker`] on the spec's breaker: `force_open`, `close`, `disable`, `reset` |
//! | `/breakers/{path}/keys/{key}/{action}` | the same on a key's breaker |
//! | `/reload` | the reload the application gave ([`Admin::reload_with`]); 422 with the problems when the configuration is refused |
//!
//! Mount them behind the application's own authentication, a bearer
//! token for example (compare in constant time):
//!
//! ```
//! # #[cfg(feature = "admin")] mod demo {
//! use axum::extract::Request;
//! use axum::http::{header, StatusCode};
//! use axum::middleware::{self, Next};
//! use axum::response::Response;
//! use axum::Router;
//! use resilient_core::admin::Admin;
//!
//! fn same(a: &[u8], b: &[u8]) -> bool {
//!     a.len() == b.len() && a.iter().zip(b).fold(0, |d, (x, y)| d | (x ^ y)) == 0
//! }
//!
//! pub fn routes(admin: &Admin, token: String) -> Router {
//!     let expected = format!("Bearer {token}");
//!     let auth = middleware::from_fn(move |request: Request, next: Next| {
//!         let allowed = request
//!             .headers()
//!             .get(header::AUTHORIZATION)
//!             .is_some_and(|v| same(v.as_bytes(), expected.as_bytes()));
//!         async move {
//!             if allowed {
//!                 Ok::<Response, StatusCode>(next.run(request).await)
//!             } else {
//!                 Err(StatusCode::UNAUTHORIZED)
//!             }
//!         }
//!     });
//!     admin.read_routes().merge(admin.write_routes().route_layer(auth))
//! }
//! # }
//! ```
//!
//! # What watching costs
//!
//! Nothing on the calls' side: the routes read what the calls write
//! anyway (the snapshot's counters, the specs' rings of recent events), and
//! the stream registers no listener. One task per router feeds every
//! stream client, while there is one, every 250 ms; each client has a
//! bounded queue (256 frames by default), and one that falls that far
//! behind is dropped with a last `dropped` frame, never waited for. No
//! secret of the configuration is in any answer: the snapshot and the
//! events hold none (a Redis URL is shown without its password).

mod dashboard;
mod stream;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response, Sse};
use axum::routing::{get, post};
use axum::Router;

use crate::circuit_breaker::{Action, OperateError};
use crate::registry::{Registry, Reloaded};

/// What `POST /reload` runs: the application's reload, which reads its
/// configuration again and hands it to the registry (see
/// [`Admin::reload_with`]).
pub type ReloadFn =
    dyn Fn() -> Result<Reloaded, Box<dyn std::error::Error + Send + Sync>> + Send + Sync;

/// The admin routes of one registry: see the [module docs](self).
#[derive(Clone)]
pub struct Admin {
    registry: Registry,
    reload: Option<Arc<ReloadFn>>,
    stream: stream::Settings,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin")
            .field("registry", &self.registry)
            .field("reload", &self.reload.is_some())
            .field("stream", &self.stream)
            .finish()
    }
}

/// What the handlers share.
struct Ctx {
    registry: Registry,
    reload: Option<Arc<ReloadFn>>,
    hub: Arc<stream::Hub>,
}

impl Admin {
    /// The admin routes of `registry` (the installed one:
    /// `Registry::installed()`).
    pub fn new(registry: Registry) -> Self {
        Self {
            registry,
            reload: None,
            stream: stream::Settings::default(),
        }
    }

    /// What `POST /reload` runs (on a blocking thread): typically the
    /// configuration built again and handed to
    /// `resilient_config::reload_registry(&registry, &config)`. Without
    /// it, `POST /reload` answers 501.
    ///
    /// ```
    /// # #[cfg(feature = "admin")] fn demo(registry: resilient_core::Registry, root: resilient_core::settings::Value) {
    /// use resilient_core::admin::Admin;
    ///
    /// let target = registry.clone();
    /// let admin = Admin::new(registry).reload_with(move || {
    ///     // e.g. resilient_config::reload_registry(&target, &load()?)
    ///     target.reload(&root).map_err(|problems| format!("{} problem(s)", problems.len()).into())
    /// });
    /// # let _ = admin;
    /// # }
    /// ```
    #[must_use]
    pub fn reload_with(
        mut self,
        reload: impl Fn() -> Result<Reloaded, Box<dyn std::error::Error + Send + Sync>>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        self.reload = Some(Arc::new(reload));
        self
    }

    /// How many frames a stream client may leave unread before it is
    /// dropped (256 by default; 0 is taken as 1, and logged at WARN).
    #[must_use]
    pub fn stream_buffer(mut self, frames: usize) -> Self {
        if frames == 0 {
            tracing::warn!(
                target: "resilient::admin",
                "`Admin::stream_buffer(0)` leaves no room for a frame: taken as 1"
            );
        }
        self.stream.buffer = frames.max(1);
        self
    }

    /// How often the stream sends the events kept since it last looked
    /// (250 ms by default) and the snapshot (1 s). A period under 10 ms is
    /// taken as 10 ms, and logged at WARN; a snapshot period shorter than
    /// the events' is the events'.
    #[must_use]
    pub fn stream_periods(mut self, events: Duration, snapshots: Duration) -> Self {
        const LEAST: Duration = Duration::from_millis(10);
        if events < LEAST || snapshots < LEAST {
            tracing::warn!(
                target: "resilient::admin",
                ?events, ?snapshots,
                "`Admin::stream_periods` under 10ms: taken as 10ms"
            );
        }
        self.stream.events = events.max(LEAST);
        self.stream.snapshots = snapshots.max(self.stream.events);
        self
    }

    fn ctx(&self) -> Arc<Ctx> {
        Arc::new(Ctx {
            registry: self.registry.clone(),
            reload: self.reload.clone(),
            hub: Arc::new(stream::Hub::new(self.registry.clone(), self.stream)),
        })
    }

    /// The routes that only read (GET): the dashboard, the snapshot, the
    /// readiness, the recent events and the stream. See the [module
    /// docs](self).
    pub fn read_routes<S: Clone + Send + Sync + 'static>(&self) -> Router<S> {
        Router::new()
            .route("/", get(page))
            .route("/dashboard", get(page))
            .route("/snapshot", get(snapshot))
            .route("/ready", get(ready))
            .route("/specs/{path}", get(spec))
            .route("/specs/{path}/events", get(spec_events))
            .route("/events", get(events))
            .route("/stream", get(stream_events))
            .with_state(self.ctx())
    }

    /// The routes that change state (POST): act on a breaker, reload. Put
    /// them behind the application's authentication (see the [module
    /// docs](self)); they are never part of
    /// [`read_routes`](Self::read_routes).
    pub fn write_routes<S: Clone + Send + Sync + 'static>(&self) -> Router<S> {
        Router::new()
            .route("/breakers/{path}/{action}", post(act))
            .route("/breakers/{path}/keys/{key}/{action}", post(act_on_key))
            .route("/reload", post(reload))
            .with_state(self.ctx())
    }
}

/// `value` as JSON, with `status`, never cached.
fn json(status: StatusCode, value: &impl serde::Serialize) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => (
            status,
            [
                (header::CONTENT_TYPE, "application/json"),
                (header::CACHE_CONTROL, "no-store"),
            ],
            body,
        )
            .into_response(),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the answer could not be written as JSON: {e}"),
        ),
    }
}

/// An error answer: `{"error": "..."}`.
fn error(status: StatusCode, message: String) -> Response {
    #[derive(serde::Serialize)]
    struct Error {
        error: String,
    }
    let body = serde_json::to_vec(&Error { error: message }).unwrap_or_default();
    (
        status,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

/// The paths of the registry's specs, for a 404.
fn paths(registry: &Registry) -> String {
    registry
        .snapshot()
        .specs
        .iter()
        .map(|s| format!("`{}`", s.path))
        .collect::<Vec<_>>()
        .join(", ")
}

async fn page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        dashboard::PAGE,
    )
        .into_response()
}

async fn snapshot(State(ctx): State<Arc<Ctx>>) -> Response {
    json(StatusCode::OK, &ctx.registry.snapshot())
}

async fn ready(State(ctx): State<Arc<Ctx>>) -> Response {
    let readiness = ctx.registry.snapshot().readiness();
    let status = StatusCode::from_u16(readiness.status.http_status())
        .unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
    json(status, &readiness)
}

async fn spec(State(ctx): State<Arc<Ctx>>, Path(path): Path<String>) -> Response {
    let snapshot = ctx.registry.snapshot();
    match snapshot.specs.iter().find(|s| s.path == path) {
        Some(spec) => json(StatusCode::OK, spec),
        None => error(
            StatusCode::NOT_FOUND,
            format!(
                "no spec at `{path}`; the specs are at {}",
                paths(&ctx.registry)
            ),
        ),
    }
}

async fn spec_events(State(ctx): State<Arc<Ctx>>, Path(path): Path<String>) -> Response {
    match ctx.registry.recent_events_of(&path) {
        Some(events) => json(StatusCode::OK, &events),
        None => error(
            StatusCode::NOT_FOUND,
            format!(
                "no spec at `{path}`; the specs are at {}",
                paths(&ctx.registry)
            ),
        ),
    }
}

async fn events(State(ctx): State<Arc<Ctx>>, RawQuery(query): RawQuery) -> Response {
    let mut after = 0;
    for pair in query
        .as_deref()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
    {
        match pair.split_once('=') {
            Some(("after", n)) => match n.parse() {
                Ok(n) => after = n,
                Err(_) => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        format!(
                            "`after` must be an event's `seq`, a whole number ≥ 0 (found `{n}`)"
                        ),
                    )
                }
            },
            _ => {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!("unknown query `{pair}`: the one query is `after=SEQ`"),
                )
            }
        }
    }
    json(StatusCode::OK, &ctx.registry.recent_after(after))
}

async fn stream_events(State(ctx): State<Arc<Ctx>>) -> Response {
    Sse::new(ctx.hub.join()).into_response()
}

/// An action's answer: what it did, or why it was refused.
fn operated(ctx: &Ctx, path: &str, key: Option<&str>, action: &str) -> Response {
    let Some(action) = Action::from_label(action) else {
        let known = Action::ALL
            .iter()
            .map(|a| format!("`{a}`"))
            .collect::<Vec<_>>()
            .join(", ");
        return error(
            StatusCode::NOT_FOUND,
            format!("unknown action `{action}`; a breaker takes {known}"),
        );
    };
    match ctx.registry.operate_breaker(path, key, action) {
        Ok(done) => json(StatusCode::OK, &done),
        Err(e @ OperateError::NotABreaker { .. }) => {
            error(StatusCode::UNPROCESSABLE_ENTITY, e.to_string())
        }
        Err(e) => error(StatusCode::NOT_FOUND, e.to_string()),
    }
}

async fn act(
    State(ctx): State<Arc<Ctx>>,
    Path((path, action)): Path<(String, String)>,
) -> Response {
    operated(&ctx, &path, None, &action)
}

async fn act_on_key(
    State(ctx): State<Arc<Ctx>>,
    Path((path, key, action)): Path<(String, String, String)>,
) -> Response {
    operated(&ctx, &path, Some(&key), &action)
}

async fn reload(State(ctx): State<Arc<Ctx>>) -> Response {
    let Some(reload) = ctx.reload.clone() else {
        return error(
            StatusCode::NOT_IMPLEMENTED,
            "no reload here: the application gave none (`Admin::reload_with`)".into(),
        );
    };
    match tokio::task::spawn_blocking(move || reload()).await {
        Ok(Ok(reloaded)) => json(StatusCode::OK, &reloaded),
        Ok(Err(e)) => error(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()),
        Err(_) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the reload panicked; every spec keeps its running settings unless the reload got as far as applying them".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::Value;

    /// A stream client registers no listener: the calls do nothing more
    /// for it than they always do.
    #[tokio::test]
    async fn a_stream_client_registers_no_listener() {
        let registry = crate::registry::RegistryBuilder::none()
            .build(&Value::Table(Default::default()))
            .unwrap_or_else(|p| panic!("{p:?}"));
        let admin = Admin::new(registry.clone());
        let hub = admin.ctx().hub.clone();
        let _client = hub.join();
        assert!(!registry.listening(), "no listener for a stream client");
    }
}
