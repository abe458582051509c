//! The README's first command runs the main example; the guide's getting
//! started shows all it prints, and README its first lines: neither must
//! drift from what it prints.

use std::error::Error;

const OPENING: &str = "It prints\n\n```text\n";
const README_OPENING: &str = "It prints, first:\n\n```text\n";

/// The text block after `opening` in `text`.
fn block_after<'a>(text: &'a str, opening: &str) -> Result<&'a str, Box<dyn Error>> {
    let start = text
        .find(opening)
        .ok_or_else(|| format!("no output block after {opening:?}"))?
        + opening.len();
    let end = start + text[start..].find("```").ok_or("the block ends")?;
    Ok(&text[start..end])
}

#[test]
fn petstore_prints_what_the_guide_and_readme_show() -> Result<(), Box<dyn Error>> {
    let guide = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../resilient-core/guide/getting_started.md"
    ))?;
    let shown = block_after(&guide, OPENING)?;
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))?;
    let excerpt = block_after(&readme, README_OPENING)?;

    let output = std::process::Command::new(env!("CARGO_BIN_EXE_petstore")).output()?;
    assert!(output.status.success(), "{output:?}");
    let printed = String::from_utf8(output.stdout)?;
    assert_eq!(printed.trim_end(), shown.trim_end());
    // README's excerpt: the first lines, whole.
    assert!(excerpt.lines().count() >= 3, "{excerpt}");
    assert!(printed.starts_with(excerpt), "README's excerpt:\n{excerpt}");
    Ok(())
}
