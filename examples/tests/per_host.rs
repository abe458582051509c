//! The `per_host` example prints the calls that reached each host and each
//! host's breaker: only the dead host's opened, after 4 calls reached it.

use std::error::Error;

#[test]
fn only_the_dead_host_s_breaker_opens() -> Result<(), Box<dyn Error>> {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_per_host")).output()?;
    assert!(output.status.success(), "{output:?}");
    let printed = String::from_utf8(output.stdout)?;
    assert_eq!(
        printed,
        "a.example: reached 10, served 10, failed 0, rejected 0\n\
         b.example: reached 10, served 10, failed 0, rejected 0\n\
         c.example: reached 4, served 0, failed 4, rejected 6\n\
         HostBreaker: 3 keys\n  \
         a.example: closed\n  \
         b.example: closed\n  \
         c.example: open\n"
    );
    Ok(())
}
