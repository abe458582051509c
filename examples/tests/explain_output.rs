//! The guide's explain chapter shows what `cargo run -p examples --bin explain` prints: the two
//! must not drift apart, and the pet store's lookup reads as 3 calls.

use std::error::Error;

const OPENING: &str = "prints the pet store's:\n\n```text\n";

#[test]
fn explain_prints_what_the_guide_shows() -> Result<(), Box<dyn Error>> {
    let readme = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../resilient-core/guide/explain.md"
    ))?;
    let start = readme
        .find(OPENING)
        .ok_or("the explain chapter shows the explanation after 'prints the pet store's:'")?
        + OPENING.len();
    let end = start + readme[start..].find("```").ok_or("the block ends")?;
    let shown = &readme[start..end];

    let output = std::process::Command::new(env!("CARGO_BIN_EXE_explain")).output()?;
    assert!(output.status.success(), "{output:?}");
    let printed = String::from_utf8(output.stdout)?;
    assert_eq!(printed.trim_end(), shown.trim_end());
    assert!(printed.contains("fn examples::petstore::lookup (async)\n  #[circuit_breakable(PetBreaker)]\n  #[retryable(PetRetry)]\n  #[timeout(PetTimeout)]\n  calls to the dependency per call: at most 3 (a retry budget permitting)\n  longest before an answer: 6.4s\n"));
    Ok(())
}

#[test]
fn explain_prints_json_with_the_same_figures() -> Result<(), Box<dyn Error>> {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_explain"))
        .arg("--json")
        .output()?;
    assert!(output.status.success(), "{output:?}");
    let json: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    let lookup = json["fns"]
        .as_array()
        .and_then(|fns| {
            fns.iter()
                .find(|f| f["function"] == "examples::petstore::lookup")
        })
        .ok_or("lookup is explained")?;
    assert_eq!(lookup["max_calls"], 3);
    assert_eq!(lookup["worst_case"]["type"], "bounded");
    assert_eq!(lookup["worst_case"]["at_most"], "6s 400ms");
    Ok(())
}
