//! A spec on Redis, and the Redis section written under a near name: one
//! problem, the spec's, naming the section it found (not a second one for
//! the section that no spec reads). The one spec below is all there is in
//! this binary, so the registry of every spec checks unread configuration.

use resilient_core::{RateLimiterSpec, Registry};

/// A limit shared by replicas.
#[derive(RateLimiterSpec)]
#[spec("resilient.ratelimiter.tenant")]
pub struct TenantQuota;

fn messages(toml: &str) -> Vec<String> {
    let config = config::Config::builder()
        .add_source(config::File::from_str(toml, config::FileFormat::Toml))
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    match resilient_config::build(Registry::builder(), &config) {
        Ok(_) => Vec::new(),
        Err(err) => err.problems().iter().map(ToString::to_string).collect(),
    }
}

const SPEC: &str = "[resilient.ratelimiter.tenant]\nlimit_for_period = 10\nlimit_refresh_period = \"1s\"\nbackend = \"redis\"\n";

#[test]
fn a_spec_on_redis_names_the_near_miss_of_its_section_once() {
    for near in ["rediss", "Redis", "redsi"] {
        assert_eq!(
            messages(&format!("{SPEC}\n[resilient.{near}]\nurl = \"redis://127.0.0.1:6379\"\n")),
            [format!("TenantQuota at `resilient.ratelimiter.tenant`: key `backend` is \"redis\", and the configuration has no `[resilient.redis]` section; did you mean `[resilient.{near}]`? (the section must be at `resilient.redis`)")],
            "{near}"
        );
    }
}

#[test]
fn a_spec_on_redis_without_any_section_says_to_add_one() {
    assert_eq!(
        messages(SPEC),
        ["TenantQuota at `resilient.ratelimiter.tenant`: key `backend` is \"redis\", and the configuration has no `[resilient.redis]` section: add one with the server's `url` (the registry connects once for every spec that uses it)"]
    );
}
