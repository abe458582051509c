//! The README's first command runs the main example and shows what it
//! prints: the two must not drift apart.

#[test]
fn petstore_prints_what_readme_shows() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README.md beside the workspace");
    let start = readme
        .find("It prints\n\n```text\n")
        .map(|i| i + "It prints\n\n```text\n".len())
        .expect("README shows the example's output after 'It prints'");
    let end = start + readme[start..].find("```").expect("the block ends");
    let shown = &readme[start..end];

    let output = std::process::Command::new(env!("CARGO_BIN_EXE_petstore"))
        .output()
        .expect("the example runs");
    assert!(output.status.success(), "{output:?}");
    let printed = String::from_utf8(output.stdout).expect("UTF-8 output");
    assert_eq!(printed.trim_end(), shown.trim_end());
}
