//! A tonic greeter, client and server, for the `grpc` example and its
//! tests: one unary method, `/hello.Greeter/SayHello`, written by hand
//! (what `tonic-prost-build` would generate for it, minus what a unary
//! call does not use), so that the example needs no `protoc` and no build
//! script.
//!
//! The server is scripted: it counts every request its handler receives
//! (its hits), answers the statuses it was given first, in order, then
//! greets; it can hold each call until released, so that a test fills a
//! concurrency limit on the server.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tonic::body::Body;
use tonic::codegen::http;
use tonic::server::NamedService;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Response, Status};
use tonic_prost::ProstCodec;

/// The request of `SayHello`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HelloRequest {
    /// Who to greet.
    #[prost(string, tag = "1")]
    pub name: String,
}

/// The answer of `SayHello`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HelloReply {
    /// The greeting.
    #[prost(string, tag = "1")]
    pub message: String,
}

/// The method's path.
const SAY_HELLO: &str = "/hello.Greeter/SayHello";

/// A client of the greeter over any tonic transport: a `Channel`, or a
/// channel wrapped in tower layers.
#[derive(Debug, Clone)]
pub struct GreeterClient<T> {
    inner: tonic::client::Grpc<T>,
}

impl GreeterClient<Channel> {
    /// A client of the server at `addr` (a lazy channel: it connects on
    /// the first call).
    pub fn connect_lazy(addr: SocketAddr) -> Result<Self, tonic::transport::Error> {
        Ok(Self::new(channel(addr)?))
    }
}

/// A lazy channel to the server at `addr`.
pub fn channel(addr: SocketAddr) -> Result<Channel, tonic::transport::Error> {
    Ok(Endpoint::from_shared(format!("http://{addr}"))?.connect_lazy())
}

impl<T> GreeterClient<T>
where
    T: tonic::client::GrpcService<Body>,
    T::Error: Into<tonic::codegen::StdError>,
    T::ResponseBody: tonic::codegen::Body<Data = tonic::codegen::Bytes> + Send + 'static,
    <T::ResponseBody as tonic::codegen::Body>::Error: Into<tonic::codegen::StdError> + Send,
{
    /// A client over `inner`.
    pub fn new(inner: T) -> Self {
        Self {
            inner: tonic::client::Grpc::new(inner),
        }
    }

    /// Calls `SayHello`.
    pub async fn say_hello(
        &mut self,
        request: impl tonic::IntoRequest<HelloRequest>,
    ) -> Result<Response<HelloReply>, Status> {
        self.inner
            .ready()
            .await
            .map_err(|e| Status::unknown(format!("service was not ready: {}", e.into())))?;
        let codec: ProstCodec<HelloRequest, HelloReply> = ProstCodec::default();
        let path = http::uri::PathAndQuery::from_static(SAY_HELLO);
        self.inner.unary(request.into_request(), path, codec).await
    }
}

/// What the scripted server does and saw.
#[derive(Debug, Default)]
struct Script {
    hits: AtomicU64,
    // When each request arrived, on tokio's clock (paused in tests).
    arrivals: Mutex<Vec<tokio::time::Instant>>,
    answers: Mutex<VecDeque<Status>>,
    // While set, each call waits for a permit here before it answers.
    hold: Mutex<Option<Arc<Semaphore>>>,
}

/// The greeter service: `SayHello` as scripted, every other path
/// `UNIMPLEMENTED`. Cheap to clone (one shared script).
#[derive(Debug, Clone, Default)]
pub struct Greeter {
    script: Arc<Script>,
}

impl Greeter {
    /// A greeter that greets every call.
    pub fn new() -> Self {
        Self::default()
    }

    /// The requests the handler received so far.
    pub fn hits(&self) -> u64 {
        self.script.hits.load(Ordering::SeqCst)
    }

    /// The time between each request and the next, on tokio's clock.
    pub fn gaps(&self) -> Vec<std::time::Duration> {
        let arrivals = match self.script.arrivals.lock() {
            Ok(arrivals) => arrivals.clone(),
            Err(_) => Vec::new(),
        };
        arrivals.windows(2).map(|w| w[1] - w[0]).collect()
    }

    /// Answers `statuses` to the next calls, in order, then greets again.
    pub fn fail_with(&self, statuses: impl IntoIterator<Item = Status>) {
        if let Ok(mut answers) = self.script.answers.lock() {
            answers.extend(statuses);
        }
    }

    /// Holds every call until [`release`](Self::release) (counted as a hit
    /// when it arrives).
    pub fn hold(&self) -> Arc<Semaphore> {
        let gate = Arc::new(Semaphore::new(0));
        if let Ok(mut hold) = self.script.hold.lock() {
            *hold = Some(gate.clone());
        }
        gate
    }

    async fn say_hello(script: Arc<Script>, request: HelloRequest) -> Result<HelloReply, Status> {
        script.hits.fetch_add(1, Ordering::SeqCst);
        if let Ok(mut arrivals) = script.arrivals.lock() {
            arrivals.push(tokio::time::Instant::now());
        }
        let gate = script.hold.lock().ok().and_then(|hold| hold.clone());
        if let Some(gate) = gate {
            // Closed or released: either way the call goes on.
            let _ = gate.acquire().await;
        }
        let scripted = script
            .answers
            .lock()
            .ok()
            .and_then(|mut answers| answers.pop_front());
        match scripted {
            Some(status) => Err(status),
            None => Ok(HelloReply {
                message: format!("hello {}", request.name),
            }),
        }
    }
}

impl NamedService for Greeter {
    const NAME: &'static str = "hello.Greeter";
}

/// `SayHello` as tonic's server calls a unary method.
struct SayHello(Arc<Script>);

impl tonic::server::UnaryService<HelloRequest> for SayHello {
    type Response = HelloReply;
    type Future = Pin<Box<dyn Future<Output = Result<Response<HelloReply>, Status>> + Send>>;

    fn call(&mut self, request: Request<HelloRequest>) -> Self::Future {
        let script = self.0.clone();
        Box::pin(async move {
            Greeter::say_hello(script, request.into_inner())
                .await
                .map(Response::new)
        })
    }
}

impl tower::Service<http::Request<Body>> for Greeter {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<http::Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let script = self.script.clone();
        Box::pin(async move {
            if request.uri().path() != SAY_HELLO {
                return Ok(Status::unimplemented("no such method").into_http());
            }
            let codec: ProstCodec<HelloReply, HelloRequest> = ProstCodec::default();
            let mut grpc = tonic::server::Grpc::new(codec);
            Ok(grpc.unary(SayHello(script), request).await)
        })
    }
}

/// Binds a free loopback port for a server.
pub async fn bind() -> std::io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    Ok((listener, addr))
}

/// Serves `router` (a tonic server with its layers and services) on
/// `listener` until the task is dropped.
pub fn serve<L>(router: tonic::transport::server::Router<L>, listener: TcpListener)
where
    L: tower::Layer<tonic::service::Routes> + Clone + Send + 'static,
    L::Service: tower::Service<http::Request<Body>, Response = http::Response<Body>>
        + Clone
        + Send
        + 'static,
    <L::Service as tower::Service<http::Request<Body>>>::Future: Send,
    <L::Service as tower::Service<http::Request<Body>>>::Error:
        Into<tonic::codegen::StdError> + Send,
{
    tokio::spawn(async move {
        if let Err(e) = router
            .serve_with_incoming(TcpIncoming::from(listener))
            .await
        {
            eprintln!("gRPC server stopped: {e}");
        }
    });
}
