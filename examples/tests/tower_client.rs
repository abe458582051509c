//! The `tower_client` example prints what its layered client saw: two
//! retries then an answer (3 server hits), then a request tried three
//! times that opens the breaker, then one refused without a call, by the
//! stack and by the annotated fn of the same breaker spec (6 hits in all).

use std::error::Error;

#[test]
fn the_stack_and_the_fn_share_one_breaker() -> Result<(), Box<dyn Error>> {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_tower_client")).output()?;
    assert!(output.status.success(), "{output:?}");
    let printed = String::from_utf8(output.stdout)?;
    assert_eq!(
        printed,
        "server hits: 3\n\
         result: 200 {\"id\": 7, \"name\": \"lamp\"}\n\
         item 8: `CatalogRetry` gave up after 3 calls (attempts exhausted)\n\
         item 9: `CatalogBreaker` is open: call not permitted\n\
         server hits: 6\n\
         breaker: Open\n\
         fn: `CatalogBreaker` is open: call not permitted\n\
         server hits: 6\n"
    );
    Ok(())
}
