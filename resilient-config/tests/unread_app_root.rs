//! Spec paths in a table of the application's own: its first level stays
//! the application's, and below the tables that lead to spec sections every
//! table must lead on. The one spec below is all there is in this binary.

mod support;
use support::*;

use resilient_core::{Registry, RetrySpec};

/// A retry spec under the application's table.
#[derive(RetrySpec)]
#[spec("app.resilience.retry.pet")]
pub struct PetRetry;

const VALID: &str = "[app]\nport = 8080\nname = \"petstore\"\n\n[app.db]\nurl = \"postgres://db\"\n\n[app.resilience.retry.pet]\ndelay = \"1s\"\nattempts = 2\n";

#[test]
fn the_applications_own_keys_beside_the_specs_table_are_not_looked_at() {
    assert!(resilient_config::build(Registry::builder(), &config(VALID)).is_ok());
}

#[test]
fn a_typo_below_the_table_that_leads_to_a_spec_is_reported() {
    let err = build_err(
        Registry::builder(),
        &format!("{VALID}\n[app.resilience.retyr.pet]\nattempts = 5\n"),
    );
    let problem = only(&err);
    assert_eq!(problem.path, "app");
    assert_eq!(problem.key, "resilience.retyr.pet");
    assert_eq!(
        problem.to_string(),
        "`app.resilience.retyr.pet` is read by no spec; did you mean `app.resilience.retry.pet` (the section of `PetRetry`)? A spec reads its section only at the path in its `#[spec(..)]`, so this has no effect"
    );
}
