//! The pet store's admin routes, mounted at `/resilience`: what an operator
//! reads (the dashboard, the snapshot, the readiness, the recent events,
//! the live stream), and, only when the service is given a token, what
//! acts (breaker actions, reload) behind a bearer-token check.

use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::Router;
use resilient_core::admin::Admin;

/// Whether two byte strings are equal, in a time that does not depend on
/// where they differ (a token compared byte by byte and stopping at the
/// first difference tells an attacker how much of it was right).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0, |d, (x, y)| d | (x ^ y)) == 0
}

/// The admin routes of `admin`: the read routes, and with `token` the
/// write routes, each request of which must carry `Authorization: Bearer
/// <token>` (401 otherwise). Without a token, the write routes are not
/// mounted at all.
pub fn routes<S: Clone + Send + Sync + 'static>(admin: &Admin, token: Option<&str>) -> Router<S> {
    let read = admin.read_routes();
    let Some(token) = token else {
        return read;
    };
    let expected = format!("Bearer {token}");
    let auth = middleware::from_fn(move |request: Request, next: Next| {
        let allowed = request
            .headers()
            .get(header::AUTHORIZATION)
            .is_some_and(|v| same(v.as_bytes(), expected.as_bytes()));
        async move {
            if allowed {
                Ok::<Response, StatusCode>(next.run(request).await)
            } else {
                Err(StatusCode::UNAUTHORIZED)
            }
        }
    });
    read.merge(admin.write_routes().route_layer(auth))
}

#[cfg(test)]
mod tests {
    use super::same;

    #[test]
    fn tokens_are_equal_only_when_every_byte_is() {
        assert!(same(b"Bearer s3cret", b"Bearer s3cret"));
        assert!(!same(b"Bearer s3cret", b"Bearer s3creT"));
        assert!(!same(b"Bearer s3cret", b"Bearer s3cre"));
        assert!(!same(b"", b"x"));
    }
}
