//! One breaker per host: thirty calls spread over three hosts, one of them
//! down. Only that host's breaker opens; the healthy hosts keep being
//! served. Then the snapshot lists the keys.
//!
//! Run with `cargo run -p examples --bin per_host`.

use std::collections::BTreeMap;
use std::sync::Mutex;

use resilient_core::circuit_breaker::Metrics;
use resilient_core::prelude::*;
use resilient_core::Registry;

/// One breaker per value of `key = host` below, each with these settings.
#[derive(CircuitBreakerSpec)]
#[spec("resilient.circuitbreaker.host")]
pub struct HostBreaker;

const CONFIG: &str = r#"
[resilient.circuitbreaker.host]
failure_rate_threshold = 50
minimum_required_calls = 4
wait_duration_in_open_state = "30s"
permitted_calls_in_half_open_state = 1
count_based = { window_size = 10 }
keys = { max = 1000, idle_timeout = "10m" }
"#;

#[derive(Debug, thiserror::Error)]
enum FetchError {
    #[error("{0} is down")]
    Down(String),
    #[error(transparent)]
    Resilience(#[from] resilient_core::Error),
}

/// Requests that reached each host.
static REACHED: Mutex<BTreeMap<&'static str, u32>> = Mutex::new(BTreeMap::new());

#[circuit_breakable(HostBreaker, key = host)]
async fn fetch(host: &'static str) -> Result<&'static str, FetchError> {
    if let Ok(mut reached) = REACHED.lock() {
        *reached.entry(host).or_default() += 1;
    }
    if host == "c.example" {
        return Err(FetchError::Down(host.to_owned()));
    }
    Ok("200 OK")
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let config = config::Config::builder()
        .add_source(config::File::from_str(CONFIG, config::FileFormat::Toml))
        .build()?;
    resilient_config::build(Registry::builder().spec::<HostBreaker>(), &config)?.install()?;

    let hosts = ["a.example", "b.example", "c.example"];
    let mut seen: BTreeMap<&str, [u32; 3]> = BTreeMap::new();
    for _ in 0..10 {
        for host in hosts {
            let counts = seen.entry(host).or_default();
            match fetch(host).await {
                Ok(_) => counts[0] += 1,
                Err(FetchError::Resilience(resilient_core::Error::CallNotPermitted { .. })) => {
                    counts[2] += 1
                }
                Err(_) => counts[1] += 1,
            }
        }
    }
    let reached = REACHED.lock().map(|r| r.clone()).unwrap_or_default();
    for (host, [served, failed, rejected]) in &seen {
        let hits = reached.get(host).copied().unwrap_or(0);
        println!("{host}: reached {hits}, served {served}, failed {failed}, rejected {rejected}");
    }
    let registry = Registry::installed().ok_or("installed above")?;
    for spec in registry.snapshot().specs {
        let Some(keys) = spec.keys() else { continue };
        println!("{}: {} keys", spec.spec, keys.count);
        for key in &keys.shown {
            if let Some(breaker) = key.status::<Metrics>() {
                println!("  {}: {}", key.key, breaker.state);
            }
        }
    }
    Ok(())
}
