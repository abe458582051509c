//! The README's first command runs the main example and shows what it
//! prints: the two must not drift apart.

use std::error::Error;

const OPENING: &str = "It prints\n\n```text\n";

#[test]
fn petstore_prints_what_readme_shows() -> Result<(), Box<dyn Error>> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))?;
    let start = readme
        .find(OPENING)
        .ok_or("README shows the example's output after 'It prints'")?
        + OPENING.len();
    let end = start + readme[start..].find("```").ok_or("the block ends")?;
    let shown = &readme[start..end];

    let output = std::process::Command::new(env!("CARGO_BIN_EXE_petstore")).output()?;
    assert!(output.status.success(), "{output:?}");
    let printed = String::from_utf8(output.stdout)?;
    assert_eq!(printed.trim_end(), shown.trim_end());
    Ok(())
}
