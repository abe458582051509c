//! A setting that none of the annotated fns using its spec can make act is
//! logged at WARN when the registry is built and reloaded, naming the key,
//! why it does nothing, and the fns: `keys` on a spec no fn uses with
//! `key = ..`, `idle` on a timeout no stream fn uses, `outcome_rate` on a
//! chaos spec no `#[chaos]` gives an `outcome`. The same settings where a
//! fn makes them act log nothing.

#![allow(clippy::expect_used, clippy::unwrap_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::capture::Capture;
use support::*;

use futures_util::stream;
use resilient_core::settings::Value;
use resilient_core::stream::Stream;
use resilient_core::{
    chaos, circuit_breakable, timeout, ChaosSpec, CircuitBreakerSpec, Error, Registry, Spec,
    TimeoutSpec,
};
use tracing::Level;

#[derive(Debug, thiserror::Error)]
enum TestError {
    #[error(transparent)]
    Resilience(#[from] Error),
}

#[derive(CircuitBreakerSpec)]
#[spec("no_effect.unkeyed")]
struct Unkeyed;

#[derive(CircuitBreakerSpec)]
#[spec("no_effect.keyed")]
struct Keyed;

#[circuit_breakable(Unkeyed)]
async fn unkeyed() -> Result<u32, TestError> {
    Ok(1)
}

#[circuit_breakable(Keyed, key = host)]
async fn keyed(host: &str) -> Result<u32, TestError> {
    let _ = host;
    Ok(1)
}

// A second fn of the keyed spec without a key: one keyed use is enough.
#[circuit_breakable(Keyed)]
async fn keyed_too() -> Result<u32, TestError> {
    Ok(1)
}

#[derive(TimeoutSpec)]
#[spec("no_effect.single")]
struct Single;

#[derive(TimeoutSpec)]
#[spec("no_effect.streamed")]
struct Streamed;

#[timeout(Single)]
async fn single() -> Result<u32, TestError> {
    Ok(1)
}

#[timeout(Single)]
async fn single_too() -> Result<u32, TestError> {
    Ok(1)
}

#[timeout(Streamed)]
fn streamed() -> impl Stream<Item = Result<u32, TestError>> {
    stream::iter([Ok(1)])
}

#[derive(ChaosSpec)]
#[spec("no_effect.plain_chaos")]
struct PlainChaos;

#[derive(ChaosSpec)]
#[spec("no_effect.replacing")]
struct ReplacingChaos;

#[chaos(PlainChaos)]
async fn plain_chaos() -> Result<u32, TestError> {
    Ok(1)
}

fn unavailable() -> Result<u32, TestError> {
    Ok(503)
}

#[chaos(ReplacingChaos, outcome = unavailable)]
async fn replacing() -> Result<u32, TestError> {
    Ok(1)
}

/// The WARN lines of building a registry of spec `S` alone from `section`.
fn warnings<S: Spec>(section: Value) -> Vec<String> {
    let capture = Capture::default();
    let _subscriber = tracing::subscriber::set_default(capture.clone());
    let registry = registry::<S>(section);
    drop(registry);
    capture
        .at("resilient::registry", Level::WARN)
        .into_iter()
        .map(|l| l.message)
        .collect()
}

fn breaker(keys: bool) -> Value {
    let section = breaker_section(50, 4, "30s", 10);
    if keys {
        with(section, "keys", table([("max", int(100))]))
    } else {
        section
    }
}

#[test]
fn keys_on_a_spec_no_fn_uses_with_a_key_is_a_warning() {
    assert_eq!(
        warnings::<Unkeyed>(breaker(true)),
        ["`no_effect.unkeyed.keys` has no effect: it bounds the instances of a keyed use, and none of the annotated fns that use the spec gives `key = ..`: add `key = ..` to the attribute of the fn that needs one instance per key, or remove `keys`, unless a handle's `for_key` or a `StackLayer`'s `.keyed::<S, _>(..)` keys the spec (they read it too, and this check does not see them) (`Unkeyed` is used by `no_effect::unkeyed`)"]
    );
    assert_eq!(warnings::<Unkeyed>(breaker(false)), Vec::<String>::new());
    assert_eq!(warnings::<Keyed>(breaker(true)), Vec::<String>::new());
}

#[test]
fn idle_on_a_timeout_no_stream_fn_uses_is_a_warning() {
    let section = table([("duration", s("1s")), ("idle", s("100ms"))]);
    assert_eq!(
        warnings::<Single>(section.clone()),
        ["`no_effect.single.idle` has no effect: it limits the wait between a stream's items, and every annotated fn that uses the spec returns a single value: remove `idle`, or use the spec on a fn that returns a stream (`Single` is used by `no_effect::single`, `no_effect::single_too`)"]
    );
    assert_eq!(warnings::<Streamed>(section), Vec::<String>::new());
    assert_eq!(
        warnings::<Single>(table([("duration", s("1s"))])),
        Vec::<String>::new()
    );
}

#[test]
fn an_outcome_rate_no_chaos_attribute_gives_an_outcome_for_is_a_warning() {
    let section = table([("enabled", boolean(true)), ("outcome_rate", float(0.5))]);
    assert_eq!(
        warnings::<PlainChaos>(section.clone()),
        ["`no_effect.plain_chaos.outcome_rate` has no effect: it replaces a call's outcome with the fn named by `#[chaos(.., outcome = ..)]`, and no annotated fn that uses the spec names one: add `outcome = ..` to its `#[chaos]`, or remove `outcome_rate` (`PlainChaos` is used by `no_effect::plain_chaos`)"]
    );
    assert_eq!(warnings::<ReplacingChaos>(section), Vec::<String>::new());
}

#[test]
fn a_reload_that_adds_a_setting_with_no_effect_warns_of_it() {
    let registry = registry::<Unkeyed>(breaker(false));
    let capture = Capture::default();
    let _subscriber = tracing::subscriber::set_default(capture.clone());
    registry
        .reload(&root(vec![("no_effect.unkeyed", breaker(true))]))
        .expect("applied");
    let warned = capture.at("resilient::registry", Level::WARN);
    assert_eq!(warned.len(), 1, "{warned:#?}");
    assert!(warned[0]
        .message
        .starts_with("`no_effect.unkeyed.keys` has no effect"));
}

#[tokio::test]
async fn the_fns_run_as_annotated() {
    // Each fn above runs under its spec: the records change nothing of a call.
    let r = Registry::builder()
        .spec::<Unkeyed>()
        .spec::<Keyed>()
        .spec::<Single>()
        .spec::<Streamed>()
        .spec::<PlainChaos>()
        .spec::<ReplacingChaos>()
        .build(&root(vec![
            ("no_effect.unkeyed", breaker(false)),
            ("no_effect.keyed", breaker(true)),
            ("no_effect.single", table([("duration", s("1s"))])),
            ("no_effect.streamed", table([("duration", s("1s"))])),
            ("no_effect.plain_chaos", table([])),
            ("no_effect.replacing", table([])),
        ]))
        .expect("valid");
    r.scope(async {
        use futures_util::StreamExt;
        assert_eq!(unkeyed().await.unwrap(), 1);
        assert_eq!(keyed("a").await.unwrap(), 1);
        assert_eq!(keyed_too().await.unwrap(), 1);
        assert_eq!(single().await.unwrap(), 1);
        assert_eq!(single_too().await.unwrap(), 1);
        assert_eq!(std::pin::pin!(streamed()).next().await.unwrap().unwrap(), 1);
        assert_eq!(plain_chaos().await.unwrap(), 1);
        assert_eq!(replacing().await.unwrap(), 1);
    })
    .await;
}
