//! `classify = http` against a real HTTP server on 127.0.0.1 that counts the
//! requests it receives and when (on tokio's paused clock): 5xx, 408 and 429
//! are retried, `Retry-After` sets the wait in both of its forms, capped by
//! `delay_max`, and the last failed response survives exhaustion.

use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use examples::http::{get_response, Reply, Server};
use resilient_core::{
    rate_limited, retryable, Error, Exhausted, FailedValue, GaveUp, RateLimiterSpec, Registry,
    RetrySpec,
};

type TestResult = Result<(), Box<dyn std::error::Error>>;

#[derive(RetrySpec)]
#[spec("resilient.retry.store", classify = http)]
struct StoreRetry;

#[derive(RateLimiterSpec)]
#[spec("resilient.ratelimiter.store")]
struct StoreRate;

#[derive(Debug, thiserror::Error)]
enum StoreError {
    #[error("store unreachable: {0}")]
    Http(#[from] reqwest::Error),
    #[error("store unreachable: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Resilience(#[from] Error),
}

#[retryable(StoreRetry)]
async fn fetch(addr: SocketAddr) -> Result<http::Response<String>, StoreError> {
    Ok(get_response(addr, "/pets/1").await?)
}

#[retryable(StoreRetry)]
#[rate_limited(StoreRate)]
async fn fetch_limited(addr: SocketAddr) -> Result<http::Response<String>, StoreError> {
    Ok(get_response(addr, "/pets/1").await?)
}

/// A registry for the two specs, with `retry` as the retry's section.
fn registry(retry: &str) -> Result<Registry, Box<dyn std::error::Error>> {
    let toml = format!(
        "[resilient.retry.store]\n{retry}\n\
         [resilient.ratelimiter.store]\nlimit_for_period = 1\nlimit_refresh_period = \"500ms\""
    );
    let settings = config::Config::builder()
        .add_source(config::File::from_str(&toml, config::FileFormat::Toml))
        .build()?;
    Ok(resilient_config::build(
        Registry::builder().spec::<StoreRetry>().spec::<StoreRate>(),
        &settings,
    )?)
}

#[tokio::test(start_paused = true)]
async fn two_500s_then_a_200_take_three_requests() -> TestResult {
    let registry = registry("delay = \"10ms\"\nattempts = 5")?;
    let server = Server::start(|n| match n {
        1 | 2 => (500, "down".to_owned()),
        _ => (200, "rex".to_owned()),
    })
    .await?;

    let response = registry.scope(fetch(server.addr())).await?;

    assert_eq!(server.hits(), 3);
    assert_eq!(
        (response.status().as_u16(), response.body().as_str()),
        (200, "rex")
    );
    assert_eq!(server.gaps(), [Duration::from_millis(10); 2]);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_408_is_retried_and_a_404_is_a_success_that_is_not() -> TestResult {
    let registry = registry("delay = \"10ms\"\nattempts = 5")?;
    let server = Server::start(|n| match n {
        1 => (408, "slow".to_owned()),
        _ => (404, "no such pet".to_owned()),
    })
    .await?;

    let response = registry.scope(fetch(server.addr())).await?;

    assert_eq!(server.hits(), 2, "the 408 once more, then the 404 alone");
    assert_eq!(response.status().as_u16(), 404);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_429_with_retry_after_1_is_retried_no_sooner_than_a_second_later() -> TestResult {
    let registry = registry("delay = \"10ms\"\nattempts = 3")?;
    let server = Server::replying(|n| match n {
        1 => Reply::new(429, "slow down").header("Retry-After", "1"),
        _ => Reply::new(200, "rex"),
    })
    .await?;

    let response = registry.scope(fetch(server.addr())).await?;

    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(server.hits(), 2);
    assert_eq!(
        server.gaps(),
        [Duration::from_secs(1)],
        "not the 10 ms delay"
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_beyond_delay_max_is_capped_at_delay_max() -> TestResult {
    let registry = registry(
        "delay = \"10ms\"\nattempts = 3\nbackoff = { multiplier = 2, delay_max = \"2s\" }",
    )?;
    let server = Server::replying(|n| match n {
        1 => Reply::new(503, "maintenance").header("Retry-After", "3600"),
        _ => Reply::new(200, "rex"),
    })
    .await?;

    registry.scope(fetch(server.addr())).await?;

    assert_eq!(server.hits(), 2);
    assert_eq!(server.gaps(), [Duration::from_secs(2)]);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_http_date_is_waited_until_that_date() -> TestResult {
    let registry = registry("delay = \"10ms\"\nattempts = 3")?;
    let server = Server::replying(|n| match n {
        // Three seconds from now on the wall clock, in whole seconds: the
        // wait is more than 2 s and at most 3 s.
        1 => Reply::new(503, "maintenance").header(
            "Retry-After",
            &httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(3)),
        ),
        _ => Reply::new(200, "rex"),
    })
    .await?;

    registry.scope(fetch(server.addr())).await?;

    assert_eq!(server.hits(), 2);
    let gap = server.gaps()[0];
    assert!(
        gap > Duration::from_secs(2) && gap <= Duration::from_secs(3),
        "{gap:?}"
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_rate_limiter_inside_a_retry_delays_the_request_by_its_retry_after() -> TestResult {
    let registry = registry("delay = \"10ms\"\nattempts = 3")?;
    let server = Server::start(|_| (200, "rex".to_owned())).await?;

    registry.scope(fetch_limited(server.addr())).await?;
    tokio::time::advance(Duration::from_millis(100)).await;
    // The limiter's period has 400 ms left: the retry waits exactly that,
    // instead of spending its three retries 10 ms apart on rejections.
    registry.scope(fetch_limited(server.addr())).await?;

    assert_eq!(server.hits(), 2);
    assert_eq!(server.gaps(), [Duration::from_millis(500)]);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn exhaustion_keeps_the_last_failed_response_with_its_body() -> TestResult {
    let registry = registry("delay = \"10ms\"\nattempts = 2")?;
    let server = Server::start(|n| (503, format!("down {n}"))).await?;

    let out = registry.scope(fetch(server.addr())).await;

    assert_eq!(server.hits(), 3);
    let Err(StoreError::Resilience(Error::RetryExhausted(e))) = out else {
        panic!("expected RetryExhausted, got {out:?}");
    };
    let Exhausted {
        calls,
        reason,
        last,
        ..
    } = *e;
    assert_eq!((calls, reason), (3, GaveUp::Attempts));
    let Ok(failed) = last.downcast::<FailedValue>() else {
        panic!("the last failure is a failed value");
    };
    let Ok(response) = failed.into_value::<http::Response<String>>() else {
        panic!("the failed value is the response");
    };
    assert_eq!(response.status().as_u16(), 503);
    assert_eq!(response.body(), "down 3");
    Ok(())
}

/// The same rules through `reqwest::Response` of the reqwest crate
/// `$reqwest`, expanded in a module of its own for each reqwest version.
macro_rules! through_reqwest {
    ($reqwest:ident) => {
        use super::*;

        #[retryable(StoreRetry)]
        async fn fetch(
            client: &$reqwest::Client,
            url: &str,
        ) -> Result<$reqwest::Response, StoreError> {
            client
                .get(url)
                .send()
                .await
                .map_err(|e| StoreError::Io(std::io::Error::other(e)))
        }

        #[tokio::test(start_paused = true)]
        async fn a_429_with_retry_after_1_is_retried_no_sooner_than_a_second_later() -> TestResult {
            let registry = registry("delay = \"10ms\"\nattempts = 3")?;
            let server = Server::replying(|n| match n {
                1 => Reply::new(429, "slow down").header("Retry-After", "1"),
                _ => Reply::new(200, "rex"),
            })
            .await?;
            let client = $reqwest::Client::new();
            let url = format!("http://{}/pets/1", server.addr());

            let response = registry.scope(fetch(&client, &url)).await?;

            assert_eq!(response.status().as_u16(), 200);
            assert_eq!(response.text().await?, "rex");
            assert_eq!(server.hits(), 2);
            assert_eq!(server.gaps(), [Duration::from_secs(1)]);
            Ok(())
        }

        #[tokio::test(start_paused = true)]
        async fn exhaustion_keeps_the_last_failed_response_with_its_body() -> TestResult {
            let registry = registry("delay = \"10ms\"\nattempts = 1")?;
            let server = Server::start(|n| (500, format!("down {n}"))).await?;
            let client = $reqwest::Client::new();
            let url = format!("http://{}/pets/1", server.addr());

            let out = registry.scope(fetch(&client, &url)).await;

            assert_eq!(server.hits(), 2);
            let Err(StoreError::Resilience(Error::RetryExhausted(e))) = out else {
                panic!("expected RetryExhausted, got {out:?}");
            };
            let Ok(failed) = e.last.downcast::<FailedValue>() else {
                panic!("the last failure is a failed value");
            };
            let Ok(response) = failed.into_value::<$reqwest::Response>() else {
                panic!("the failed value is the response");
            };
            assert_eq!(response.status().as_u16(), 500);
            assert_eq!(response.text().await?, "down 2");
            Ok(())
        }
    };
}

/// reqwest 0.13, which the examples use.
mod with_reqwest {
    through_reqwest!(reqwest);
}

/// reqwest 0.12 (`--features reqwest-0-12`), renamed `reqwest012`.
#[cfg(feature = "reqwest-0-12")]
mod with_reqwest_0_12 {
    through_reqwest!(reqwest012);
}
