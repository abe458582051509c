//! Layers for an HTTP server: a rejection becomes the response a client
//! expects.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use crate::error::{BoxError, Error};
use crate::http::rejection_response;

/// Layers of this crate (one, or a `ServiceBuilder`'s stack of them) on an
/// HTTP service, so that a request they refuse is answered with the
/// response a client expects instead of an error: 429 with `Retry-After`
/// for a rate limit, 503 for an open breaker (with `Retry-After` while it
/// is open), a full limit or a shared limit whose backend is down, 504 for
/// a timeout (see
/// [`rejection_status`](crate::http::rejection_status)). The service keeps
/// its own error type, so an axum route (whose error is `Infallible`) takes
/// it with `route_layer`:
///
/// ```
/// use std::convert::Infallible;
///
/// use resilient_core::layer::{Layered, RespondLayer};
/// use resilient_core::{ConcurrencyLimitSpec, TimeoutSpec};
/// use tower::{service_fn, Layer};
///
/// #[derive(ConcurrencyLimitSpec)]
/// #[spec("resilient.concurrency.search")]
/// pub struct SearchLimit;
///
/// #[derive(TimeoutSpec)]
/// #[spec("resilient.timeout.search")]
/// pub struct SearchTimeout;
///
/// // For axum: `Router::new().route("/search", get(search)).route_layer(layer)`.
/// let layer = RespondLayer::new(
///     tower::ServiceBuilder::new()
///         .layer(SearchLimit::layer())
///         .layer(SearchTimeout::layer()),
/// );
/// let search = layer.layer(service_fn(|_: http::Request<String>| async {
///     Ok::<_, Infallible>(http::Response::new("results".to_owned()))
/// }));
/// # let _ = search;
/// ```
///
/// Inside, the layers see the service's errors as a
/// [`BoxError`], so that a rejection by one of them is judged by the
/// others as in an attribute chain; the specs' classifiers see
/// `Result<http::Response<B>, BoxError>` (`all_errors` and `http` take
/// any error type; an axum handler's answers fail only under `http`, as
/// its error is `Infallible`). A spec that
/// is not configured is answered 500 with an empty body (and logged at
/// ERROR): the body type is the service's.
///
/// A retry inside runs the handler again for each retry; see the tower
/// guide's "Which specs belong on a server route".
///
/// On a gRPC server (tonic's `Server::builder().layer(..)`),
/// `RespondLayer::grpc` answers with gRPC statuses instead (feature
/// `grpc`).
#[derive(Debug, Clone, Copy, Default)]
pub struct RespondLayer<L, A = HttpAnswers> {
    layers: L,
    answers: PhantomData<fn() -> A>,
}

impl<L> RespondLayer<L> {
    /// `layers` answering their rejections with responses.
    pub const fn new(layers: L) -> Self {
        Self {
            layers,
            answers: PhantomData,
        }
    }
}

/// How a [`RespondLayer`] answers a rejection, and an error from inside
/// that is neither a rejection nor the service's own.
pub trait Answers {
    /// The response to a request `error` refused.
    fn rejection<B: Default>(error: &Error) -> http::Response<B>;

    /// The response to a request that failed with an error that is neither
    /// a layer's rejection nor the service's own (not expected: answered,
    /// rather than lost in a panic).
    fn internal<B: Default>() -> http::Response<B>;
}

/// The answers of an HTTP server: the statuses of
/// [`rejection_status`](crate::http::rejection_status) (429, 503, 504),
/// and 500.
#[derive(Debug, Clone, Copy, Default)]
pub struct HttpAnswers;

impl Answers for HttpAnswers {
    fn rejection<B: Default>(error: &Error) -> http::Response<B> {
        rejection_response(error)
    }

    fn internal<B: Default>() -> http::Response<B> {
        let mut response = http::Response::new(B::default());
        *response.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
        response
    }
}

impl<L, Svc, A> Layer<Svc> for RespondLayer<L, A>
where
    L: Layer<BoxErrors<Svc>>,
{
    type Service = Respond<L::Service, Svc, A>;

    fn layer(&self, inner: Svc) -> Self::Service {
        Respond {
            inner: self.layers.layer(BoxErrors { inner }),
            refused: None,
            _service: PhantomData,
        }
    }
}

/// The service a [`RespondLayer`] makes: `S`, the layers around `Svc`, with
/// their rejections answered as responses (by `A`) and `Svc`'s own errors
/// passed on.
pub struct Respond<S, Svc, A = HttpAnswers> {
    inner: S,
    // A rejection met in `poll_ready`, answered by the next `call`.
    refused: Option<BoxError>,
    _service: PhantomData<fn() -> (Svc, A)>,
}

impl<S: Clone, Svc, A> Clone for Respond<S, Svc, A> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            refused: None,
            _service: PhantomData,
        }
    }
}

impl<S: std::fmt::Debug, Svc, A> std::fmt::Debug for Respond<S, Svc, A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Respond")
            .field("inner", &self.inner)
            .finish()
    }
}

/// What a boxed error from inside becomes: the service's own error, or a
/// response (a rejection, or, if it is neither, a 500).
fn answer<A: Answers, B: Default, E>(error: BoxError) -> Result<http::Response<B>, E>
where
    E: std::error::Error + Send + Sync + 'static,
{
    if let Some(rejection) = error.downcast_ref::<Error>() {
        return Ok(A::rejection(rejection));
    }
    match error.downcast::<E>() {
        Ok(own) => Err(*own),
        // Only the service's errors and the layers' reach here; anything
        // else is answered, not lost in a panic.
        Err(_) => Ok(A::internal()),
    }
}

impl<S, Svc, Req, B, A> Service<Req> for Respond<S, Svc, A>
where
    Svc: Service<Req>,
    Svc::Error: std::error::Error + Send + Sync + 'static,
    S: Service<Req, Response = http::Response<B>, Error = BoxError>,
    B: Default,
    A: Answers,
{
    type Response = http::Response<B>;
    type Error = Svc::Error;
    type Future = RespondFuture<S::Future, Svc::Error, A>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if self.refused.is_some() {
            return Poll::Ready(Ok(()));
        }
        match ready!(self.inner.poll_ready(cx)) {
            Ok(()) => Poll::Ready(Ok(())),
            Err(error) => match error.downcast::<Svc::Error>() {
                Ok(own) => Poll::Ready(Err(*own)),
                Err(refused) => {
                    // A layer's rejection: the next call answers it.
                    self.refused = Some(refused);
                    Poll::Ready(Ok(()))
                }
            },
        }
    }

    fn call(&mut self, req: Req) -> Self::Future {
        match self.refused.take() {
            Some(error) => RespondFuture {
                refused: Some(error),
                inner: None,
                _error: PhantomData,
            },
            None => RespondFuture {
                refused: None,
                inner: Some(self.inner.call(req)),
                _error: PhantomData,
            },
        }
    }
}

pin_project! {
    /// The response future of a [`Respond`] service.
    pub struct RespondFuture<F, E, A = HttpAnswers> {
        refused: Option<BoxError>,
        #[pin]
        inner: Option<F>,
        _error: PhantomData<fn() -> (E, A)>,
    }
}

impl<F, E, B, A> Future for RespondFuture<F, E, A>
where
    F: Future<Output = Result<http::Response<B>, BoxError>>,
    E: std::error::Error + Send + Sync + 'static,
    B: Default,
    A: Answers,
{
    type Output = Result<http::Response<B>, E>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let Some(inner) = this.inner.as_pin_mut() else {
            return match this.refused.take() {
                Some(error) => Poll::Ready(answer::<A, _, _>(error)),
                None => Poll::Pending,
            };
        };
        Poll::Ready(match ready!(inner.poll(cx)) {
            Ok(response) => Ok(response),
            Err(error) => answer::<A, _, _>(error),
        })
    }
}

/// The innermost service of a [`RespondLayer`]'s stack: `Svc` with its
/// errors boxed, so that the layers around it and [`Respond`] tell them
/// from their own rejections.
#[derive(Debug, Clone)]
pub struct BoxErrors<Svc> {
    inner: Svc,
}

impl<Svc, Req> Service<Req> for BoxErrors<Svc>
where
    Svc: Service<Req>,
    Svc::Error: Into<BoxError>,
{
    type Response = Svc::Response;
    type Error = BoxError;
    type Future = BoxErrorsFuture<Svc::Future>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    #[inline]
    fn call(&mut self, req: Req) -> Self::Future {
        BoxErrorsFuture {
            inner: self.inner.call(req),
        }
    }
}

pin_project! {
    /// The response future of a [`BoxErrors`] service.
    pub struct BoxErrorsFuture<F> {
        #[pin]
        inner: F,
    }
}

impl<F, T, E> Future for BoxErrorsFuture<F>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    type Output = Result<T, BoxError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().inner.poll(cx).map_err(Into::into)
    }
}

/// The answers of a gRPC server: a trailers-only response whose
/// `grpc-status` is the code of
/// [`grpc::rejection_status`](crate::grpc::rejection_status)
/// (`UNAVAILABLE`, `RESOURCE_EXHAUSTED` with `grpc-retry-pushback-ms` when
/// the wait is known, `DEADLINE_EXCEEDED`), and `INTERNAL`.
#[cfg(feature = "grpc")]
#[derive(Debug, Clone, Copy, Default)]
pub struct GrpcAnswers;

#[cfg(feature = "grpc")]
impl Answers for GrpcAnswers {
    fn rejection<B: Default>(error: &Error) -> http::Response<B> {
        crate::grpc::rejection_response(error)
    }

    fn internal<B: Default>() -> http::Response<B> {
        crate::grpc::status_response(&tonic::Status::internal(""))
    }
}

#[cfg(feature = "grpc")]
impl<L> RespondLayer<L, GrpcAnswers> {
    /// `layers` on a gRPC server, answering their rejections as gRPC
    /// statuses (see [`GrpcAnswers`]) rather than HTTP statuses: a tonic
    /// client reads a 503 as `UNAVAILABLE` without its pushback, and a 429
    /// as `UNAVAILABLE` too, where the answer here tells a rate limit
    /// (`RESOURCE_EXHAUSTED`) and when to come back. For tonic's
    /// `Server::builder().layer(..)`:
    ///
    /// ```
    /// use std::convert::Infallible;
    ///
    /// use resilient_core::layer::{Layered, RespondLayer};
    /// use resilient_core::ConcurrencyLimitSpec;
    /// use tower::{service_fn, Layer};
    ///
    /// #[derive(ConcurrencyLimitSpec)]
    /// #[spec("resilient.concurrency.greeter")]
    /// pub struct GreeterLimit;
    ///
    /// // For tonic: `Server::builder().layer(layer).add_service(..)`.
    /// let layer = RespondLayer::grpc(GreeterLimit::layer());
    /// let greeter = layer.layer(service_fn(|_: http::Request<String>| async {
    ///     Ok::<_, Infallible>(http::Response::new(String::new()))
    /// }));
    /// # let _ = greeter;
    /// ```
    pub const fn grpc(layers: L) -> Self {
        Self {
            layers,
            answers: PhantomData,
        }
    }
}
