//! The snapshot a health endpoint serves, and the Redis section's settings
//! serialized, of a registry whose Redis URL holds a password: neither
//! holds the password (the settings show the URL as `app:***@`).

use std::error::Error;

use resilient_core::backend::RedisSettings;
use resilient_core::settings::{Section, Value};
use resilient_core::{RateLimiterSpec, Registry, RetrySpec};

#[derive(RateLimiterSpec)]
#[spec("resilient.ratelimiter.quota")]
struct Quota;

#[derive(RetrySpec)]
#[spec("resilient.retry.pay")]
struct PayRetry;

const SECRET: &str = "s3cret-Pa55";

#[tokio::test]
async fn the_snapshot_json_and_the_settings_json_hold_no_password() -> Result<(), Box<dyn Error>> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let url = format!("redis://app:{SECRET}@127.0.0.1:{port}/0");
    let toml = format!(
        "[resilient.redis]
url = \"{url}\"
timeout = \"20ms\"
connect_timeout = \"50ms\"
[resilient.ratelimiter.quota]
limit_for_period = 10
limit_refresh_period = \"1s\"
backend = \"redis\"
[resilient.retry.pay]
attempts = 1
delay = \"1ms\"
retry_budget = {{ tokens_max = 5, backend = \"redis\" }}"
    );
    let settings = config::Config::builder()
        .add_source(config::File::from_str(&toml, config::FileFormat::Toml))
        .build()?;
    let registry = resilient_config::build(
        Registry::builder().spec::<Quota>().spec::<PayRetry>(),
        &settings,
    )?;
    // A call refused while Redis is unreachable: the snapshot after it.
    let refused = registry
        .scope(async { Quota::get()?.acquire().await })
        .await;
    assert!(refused.is_err());
    let snapshot = serde_json::to_string(&registry.snapshot())?;

    let value = Value::Table([("url".to_owned(), Value::Str(url.clone()))].into());
    let root = Value::Table(
        [(
            "resilient".to_owned(),
            Value::Table([("redis".to_owned(), value)].into()),
        )]
        .into(),
    );
    let mut problems = Vec::new();
    let mut section = Section::optional("Redis backend", RedisSettings::PATH, &root, &mut problems);
    let read = RedisSettings::read(&mut section).ok_or("valid settings")?;
    section.finish();
    let json = serde_json::to_string(&read)?;
    println!("{json}");
    assert!(json.contains("redis://app:***@127.0.0.1"), "{json}");
    for (what, text) in [("snapshot", &snapshot), ("settings", &json)] {
        assert!(
            !text.contains(SECRET),
            "the {what} holds the password: {text}"
        );
    }
    Ok(())
}
