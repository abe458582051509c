//! The pet store's lookup under a described outage, on a paused clock:
//! two minutes of traffic in well under a second. The upstream answers in
//! 30 ms at the median and 400 ms at p99, fails 1 % of calls, fails every
//! call from 30 s to 60 s, then hangs for 15 s (each call answering only
//! after 5 s, past the lookup's timeout).
//!
//! Run with `cargo run -p examples --bin simulate` (`--json` for JSON).

use std::time::Duration;

use examples::petstore::{PetBreaker, PetRetry, PetTimeout};
use resilient_core::layer::StackLayer;
use resilient_core::simulate::{self, Dependency, Latency, Load, Outage};
use resilient_core::Registry;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let settings = config::Config::builder()
        .add_source(config::File::from_str(
            include_str!("../../resilient.toml"),
            config::FileFormat::Toml,
        ))
        .build()?;
    // A registry of its own for the run: fresh breakers and budgets.
    let registry = resilient_config::build(
        Registry::builder()
            .spec::<PetBreaker>()
            .spec::<PetRetry>()
            .spec::<PetTimeout>(),
        &settings,
    )?;
    let secs = Duration::from_secs;
    let upstream = Dependency::new()
        .latency(Latency::LogNormal {
            p50: Duration::from_millis(30),
            p99: Duration::from_millis(400),
        })
        .failure_rate(0.01)
        .outage(Outage::new(secs(30), secs(30)))
        .outage(Outage::new(secs(60), secs(15)).slow(secs(5)));
    // 50 lookups a second for two minutes, arriving as a Poisson process.
    let load = Load::new(6_000, 50.0).poisson().seed(7).timeline(secs(5));
    // `lookup`'s attributes, outermost first: checked against its chain.
    let report = simulate::run_fn(
        &registry,
        "examples::petstore::lookup",
        StackLayer::new()
            .spec::<PetBreaker>()
            .spec::<PetRetry>()
            .spec::<PetTimeout>(),
        &upstream,
        &load,
    )?;
    if std::env::args().any(|a| a == "--json") {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{report}");
    }
    Ok(())
}
