//! `resilient_config::init`: every spec linked into the binary validated,
//! then installed once for the process. A test binary of its own: while a
//! test registry is alive on another thread (the `registry.scope(..)` of
//! the validation tests), a call outside any scope is told of it instead of
//! reading the installed registry, so this test once failed beside them.

mod support;
use support::*;

use std::error::Error;

use resilient_config::ConfigError;
use resilient_core::RetrySpec;

/// A spec with a section in both configurations.
#[derive(RetrySpec)]
#[spec("resilient.retry.pet")]
pub struct PetRetry;

/// A second spec with a section in both.
#[derive(RetrySpec)]
#[spec("resilient.retry.order")]
pub struct OrderRetry;

/// A spec without a section in the first configuration.
#[derive(RetrySpec)]
#[spec("resilient.retry.stock")]
pub struct StockRetry;

#[test]
fn init_validates_every_linked_spec_and_installs_once() -> TestResult {
    // Without a builder, every spec linked into this binary is validated.
    let partial = r#"
        [resilient.retry.pet]
        delay = "100ms"
        attempts = 2

        [resilient.retry.order]
        delay = "100ms"
        attempts = 2
    "#;
    let Err(err) = resilient_config::init(&config(partial)) else {
        panic!("init must reject a configuration without StockRetry's section");
    };
    check(
        only(&err),
        "StockRetry",
        "resilient.retry.stock",
        "",
        "has no section",
        None,
    );

    // Valid sections for every spec declared in this file.
    let valid = format!("{partial}\n[resilient.retry.stock]\ndelay = \"1s\"\nattempts = 7\n");
    resilient_config::init(&config(&valid))?;

    // The installed registry answers outside any scope.
    assert_eq!(PetRetry::get()?.settings(), &minimal());
    assert_eq!(StockRetry::get()?.settings().attempts, 7);

    // A second init is refused, with no problems listed.
    let Err(err) = resilient_config::init(&config(&valid)) else {
        panic!("a second init must fail");
    };
    assert!(matches!(err, ConfigError::AlreadyInstalled(_)), "{err:?}");
    assert!(err.problems().is_empty());
    assert!(err.to_string().contains("already installed"), "{err}");
    assert!(err.source().is_some());
    Ok(())
}
