//! The `blocking_ledger` example: 80 lookups from 8 threads through a block
//! limit of 2, a retry and a breaker, all on blocking fns. While the ledger
//! is up, each of the 27 accounts whose first query fails is retried once
//! (80 + 27 queries), never more than 2 at once; once it is down, the
//! breaker opens and the fallback answers every lookup.

use std::error::Error;

#[test]
fn the_ledger_is_queried_two_at_a_time_and_the_breaker_opens_when_it_goes_down(
) -> Result<(), Box<dyn Error>> {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_blocking_ledger")).output()?;
    assert!(output.status.success(), "{output:?}");
    let printed = String::from_utf8(output.stdout)?;
    assert_eq!(
        printed,
        "ledger up: 80 lookups on 8 threads, 80 answered by the ledger in 107 queries, at most 2 at once\n\
         ledger down: 0 answered by the ledger, 80 by the fallback, breaker Open\n"
    );
    Ok(())
}
