//! README's five-minute tour shows a `resilient.toml` and what a misspelt
//! key in it stops the application with: the configuration must be valid
//! for the tour's three specs, and the report must be the one shown.

use std::error::Error;

use resilient_core::prelude::*;
use resilient_core::Registry;

const README: &str = include_str!("../../README.md");

#[derive(RetrySpec)]
#[spec("resilient.retry.store")]
struct StoreRetry;

#[derive(CircuitBreakerSpec)]
#[spec("resilient.circuitbreaker.store")]
struct StoreBreaker;

#[derive(TimeoutSpec)]
#[spec("resilient.timeout.store")]
struct StoreTimeout;

/// The block after `opening` in README.
fn block_after(opening: &str) -> Result<&'static str, Box<dyn Error>> {
    let start = README
        .find(opening)
        .ok_or_else(|| format!("README has no block after {opening:?}"))?
        + opening.len();
    let end = start + README[start..].find("```").ok_or("the block ends")?;
    Ok(&README[start..end])
}

fn settings(toml: &str) -> Result<config::Config, config::ConfigError> {
    config::Config::builder()
        .add_source(config::File::from_str(toml, config::FileFormat::Toml))
        .build()
}

fn build(settings: &config::Config) -> Result<Registry, resilient_config::ConfigError> {
    resilient_config::build(
        Registry::builder()
            .spec::<StoreRetry>()
            .spec::<StoreBreaker>()
            .spec::<StoreTimeout>(),
        settings,
    )
}

#[test]
fn the_tours_configuration_is_valid_and_a_misspelt_key_reports_what_readme_shows(
) -> Result<(), Box<dyn Error>> {
    let toml = block_after("`resilient.toml`, beside it:\n\n```toml\n")?;
    let registry = build(&settings(toml)?)?;
    assert_eq!(registry.snapshot().specs.len(), 3);

    let misspelt = toml.replacen("attempts = 2", "atempts = 2", 1);
    assert_ne!(misspelt, toml);
    let report = match build(&settings(&misspelt)?) {
        Ok(_) => return Err("a misspelt key is refused".into()),
        Err(e) => e.to_string(),
    };
    let shown = block_after("each naming the spec, the key and the fix:\n\n```text\n")?;
    assert_eq!(report.trim_end(), shown.trim_end());
    Ok(())
}
