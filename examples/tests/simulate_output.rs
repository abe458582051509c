//! The guide's simulate chapter shows what `cargo run -p examples --bin simulate` prints: the
//! two must not drift apart, and the pet store's breaker opens inside the outage.

use std::error::Error;

const OPENING: &str = "prints the pet store's:\n\n```text\n";

#[test]
fn simulate_prints_what_the_guide_shows() -> Result<(), Box<dyn Error>> {
    let guide = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../resilient-core/guide/simulate.md"
    ))?;
    let start = guide
        .find(OPENING)
        .ok_or("the simulate chapter shows the report after 'prints the pet store's:'")?
        + OPENING.len();
    let end = start + guide[start..].find("```").ok_or("the block ends")?;
    let shown = &guide[start..end];

    let output = std::process::Command::new(env!("CARGO_BIN_EXE_simulate")).output()?;
    assert!(output.status.success(), "{output:?}");
    let printed = String::from_utf8(output.stdout)?;
    assert_eq!(printed.trim_end(), shown.trim_end());
    assert!(printed.contains("30.316s  PetBreaker: closed -> open\n"));
    Ok(())
}

#[test]
fn simulate_prints_json_with_the_same_figures() -> Result<(), Box<dyn Error>> {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_simulate"))
        .arg("--json")
        .output()?;
    assert!(output.status.success(), "{output:?}");
    let json: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    assert_eq!(json["requests"], 6000);
    assert_eq!(json["calls"], 3950);
    assert_eq!(json["transitions"][0]["at"], "30s 316ms");
    assert_eq!(json["transitions"][0]["to"], "open");
    Ok(())
}
