//! The attempt header on an HTTP request sent again by a retry layer.

use std::task::{Context, Poll};

use tower_service::Service;

/// Sets a retry's attempt header on each `http::Request` that a retry
/// sends again: placed inside a [`RetryLayer`](super::RetryLayer) or a
/// [`StackLayer`](super::StackLayer) with a retry, for a spec with
/// `attempt_header`, it adds the header with the attempts made before this
/// one (`1` on the first retry) and leaves a first request as it is. See
/// [`retry::set_attempt_header`](crate::retry::set_attempt_header).
///
/// ```
/// use resilient_core::layer::{AttemptHeaderLayer, Layered};
/// # use resilient_core::RetrySpec;
/// # #[derive(RetrySpec)] #[spec("resilient.retry.pets")] struct PetsRetry;
///
/// let layers = tower::ServiceBuilder::new()
///     .layer(PetsRetry::layer())
///     .layer(AttemptHeaderLayer) // inside the retry: sees each attempt
///     .service(tower::service_fn(|_: http::Request<()>| async {
///         Ok::<_, resilient_core::BoxError>(http::Response::new(()))
///     }));
/// # let _ = layers;
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct AttemptHeaderLayer;

impl<Svc> tower_layer::Layer<Svc> for AttemptHeaderLayer {
    type Service = AttemptHeader<Svc>;

    fn layer(&self, inner: Svc) -> AttemptHeader<Svc> {
        AttemptHeader { inner }
    }
}

/// The service of an [`AttemptHeaderLayer`].
#[derive(Debug, Clone)]
pub struct AttemptHeader<Svc> {
    inner: Svc,
}

impl<Svc, B> Service<http::Request<B>> for AttemptHeader<Svc>
where
    Svc: Service<http::Request<B>>,
{
    type Response = Svc::Response;
    type Error = Svc::Error;
    type Future = Svc::Future;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    #[inline]
    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        crate::retry::set_attempt_header(req.headers_mut());
        self.inner.call(req)
    }
}
