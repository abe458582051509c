//! The specs as reqwest middleware (feature `reqwest-middleware`): the
//! four specs as one `StackLayer`, and as four single-spec middleware, each
//! in a `ClientWithMiddleware` before a last middleware that answers every
//! request with an empty 200 and sends nothing, beside that last middleware
//! alone. Each call is `client.execute(request.try_clone())` of a request
//! built once, on a tokio current-thread runtime with the registry
//! installed. What reqwest and reqwest-middleware do per request (a boxed
//! future per middleware, the copy of the request, the response's own
//! work) is in every line, the baseline's included.

use std::hint::black_box;

use criterion::Criterion;
use resilient_core::layer::middleware::Middlewares;
use resilient_core::layer::StackLayer;

use super::layers::{LayerBreaker, LayerLimit, LayerRetry, LayerTimeout};
use super::{current_thread, install};

/// Answers every request with an empty 200, sending nothing.
struct Answer;

#[async_trait::async_trait]
impl reqwest_middleware::Middleware for Answer {
    async fn handle(
        &self,
        _: reqwest::Request,
        _: &mut http::Extensions,
        _: reqwest_middleware::Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        Ok(reqwest::Response::from(http::Response::new(Vec::<u8>::new())))
    }
}

/// `builder`'s middleware before [`Answer`].
fn client(builder: reqwest_middleware::ClientBuilder) -> reqwest_middleware::ClientWithMiddleware {
    builder.with(Answer).build()
}

fn builder() -> reqwest_middleware::ClientBuilder {
    reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
}

pub fn reqwest_middleware(c: &mut Criterion) {
    install();
    let rt = current_thread();
    let clients = [
        ("last middleware alone (baseline)", client(builder())),
        (
            "4 specs: resilient StackLayer as one middleware",
            client(
                builder().with(
                    StackLayer::<_, reqwest::Request>::new()
                        .spec::<LayerRetry>()
                        .spec::<LayerBreaker>()
                        .spec::<LayerLimit>()
                        .spec::<LayerTimeout>(),
                ),
            ),
        ),
        (
            "4 specs: resilient single-spec middleware",
            client(
                builder()
                    .with(LayerRetry::middleware())
                    .with(LayerBreaker::middleware())
                    .with(LayerLimit::middleware())
                    .with(LayerTimeout::middleware()),
            ),
        ),
    ];
    let mut g = c.benchmark_group("reqwest middleware");
    for (name, client) in &clients {
        let Ok(request) = client.get("http://pets.example/7").build() else {
            panic!("{name}: the request did not build")
        };
        let call = || async {
            match request.try_clone() {
                Some(attempt) => client
                    .execute(attempt)
                    .await
                    .is_ok_and(|r| r.status() == 200),
                None => false,
            }
        };
        assert!(rt.block_on(call()), "{name}: the first call failed");
        g.bench_function(*name, |bench| {
            bench.to_async(&rt).iter(|| async { black_box(call().await) });
        });
    }
    g.finish();
}
