//! The `shared_quota` example against a real redis-server (its URL in
//! RESILIENT_REDIS_URL, as `.ci/run` sets it): three replicas share the
//! quota of 10 (4 + 3 + 3 charged, 8 refused) and the budget of 5 retries
//! (2 + 2 + 1).

use std::error::Error;

#[test]
fn three_replicas_share_one_quota_and_one_budget() -> Result<(), Box<dyn Error>> {
    let required = ["CI", "RESILIENT_REDIS_REQUIRED"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|v| !v.is_empty() && v != "false"));
    let Ok(url) = std::env::var("RESILIENT_REDIS_URL") else {
        assert!(
            !required,
            "RESILIENT_REDIS_URL is not set, and CI needs this test"
        );
        println!("skipped: no Redis; set RESILIENT_REDIS_URL to a redis-server's URL");
        return Ok(());
    };
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_shared_quota"))
        .env("RESILIENT_REDIS_URL", url)
        .output()?;
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        String::from_utf8(output.stdout)?,
        "quota of 10 an hour, shared: replica 1 charged 4, replica 2 3, replica 3 3; 8 refused\n\
         budget of 5 retries, shared: replica 1 retried 2, replica 2 2, replica 3 1; 5 in all\n"
    );
    Ok(())
}
