//! The crates read from the bottom up: no module imports one above it, so
//! there is no import circle, and the registry, the telemetry and the
//! settings reader name no mechanism (a new mechanism touches its own
//! folder, its derive and one line of registration).
//!
//! Each source file's `crate::` paths are read as text; a path names the
//! module it starts with.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

/// Every `crate::module` a file names, by module.
fn named_modules(source: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in source.lines() {
        let line = line.trim_start();
        if line.starts_with("//") {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            let after = &rest[at + "crate::".len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            // `crate::{a, b}`: each name in the braces.
            if name.is_empty() && after.starts_with('{') {
                let inside = after[1..].split('}').next().unwrap_or("");
                for part in inside.split(',') {
                    let module: String = part
                        .trim()
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    if !module.is_empty() {
                        out.push(module);
                    }
                }
            } else if !name.is_empty() {
                out.push(name);
            }
            rest = after;
        }
    }
    out
}

/// Each `.rs` file under `dir`, with the module it belongs to: its first
/// path segment below `src` (`retry` for `retry/budget.rs`).
fn files(dir: &Path) -> BTreeMap<String, (String, String)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = fs::read_dir(&d) else {
            panic!("cannot read {}", d.display());
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let relative = path.strip_prefix(dir).unwrap_or(&path);
                let first = relative
                    .components()
                    .next()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .unwrap_or_default();
                let module = first.trim_end_matches(".rs").to_owned();
                let text = fs::read_to_string(&path).unwrap_or_default();
                out.insert(relative.display().to_string(), (module, text));
            }
        }
    }
    out
}

/// Checks that each file of `crate_dir` names only modules below its own
/// (or its own), by `layers`: a module's layer, lowest first.
fn check(crate_dir: &str, layers: &[(&str, u8)]) {
    let layer = |m: &str| layers.iter().find(|(n, _)| *n == m).map(|(_, l)| *l);
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(crate_dir)
        .join("src");
    let mut wrong = Vec::new();
    for (file, (module, text)) in files(&dir) {
        let Some(mine) = layer(&module) else {
            wrong.push(format!(
                "{file}: module `{module}` has no layer in this test"
            ));
            continue;
        };
        for named in named_modules(&text) {
            if named == module {
                continue;
            }
            match layer(&named) {
                Some(theirs) if theirs < mine => {}
                Some(theirs) => wrong.push(format!(
                    "{file} (layer {mine}) names `crate::{named}` (layer {theirs})"
                )),
                // Not a module: an item of the crate root (a macro).
                None => {}
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layers:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn resilient_core_reads_from_the_bottom_up() {
    check(
        "resilient-core",
        &[
            // The user guide: chapters of documentation in empty modules,
            // which name nothing, so that any module's docs may link to it.
            ("guide", 0),
            // The vocabulary: what a failure is, and what a spec's kind is.
            ("error", 0),
            ("spec", 0),
            // Reading settings, and the outcome of one call in a chain.
            ("settings", 1),
            // A value replaced while calls read it (settings, a ring of
            // recent events), with no lock on the reading side.
            ("versions", 1),
            ("outcome", 1),
            ("http", 1),
            ("grpc", 1),
            // What every mechanism shares, and the registry that knows none.
            ("telemetry", 2),
            // Keys, as calls give them and the `keys` table bounds them.
            ("keyed", 2),
            ("blocking", 2),
            ("registry", 3),
            // The mechanisms.
            ("circuit_breaker", 4),
            ("concurrency", 4),
            ("timeout", 4),
            ("chaos", 4),
            ("fallback", 4),
            // Shared backends: their own failures go through a breaker.
            ("backend", 5),
            // Retry keeps its budget's tokens in a backend when told to.
            ("retry", 6),
            // Hedging takes its budget from retry's bucket.
            ("hedging", 7),
            // The rate limiter answers calls as the concurrency limit does,
            // and keeps its permits in a backend when told to.
            ("rate_limiter", 6),
            // A place or a permit held as plain data between polls.
            ("gate", 7),
            // The layers of a stream, and tower's layers: each around a
            // mechanism's guard, kept as plain data beside its instance.
            ("stream", 8),
            ("layer", 8),
            // What generated code names, what a user's glob import brings
            // (the crate root's derives and attributes, the layers' traits),
            // and the crate root.
            ("private", 9),
            // Every spec and chain read as calls and waits, and the specs
            // checked against each other.
            ("explain", 9),
            ("__private", 9),
            ("prelude", 9),
            // What an operator reads and does over HTTP: every spec's state.
            ("admin", 9),
            // A stack run against a described dependency: the layers, the
            // registry's events, and explain's durations.
            ("simulate", 10),
            ("lib", 11),
        ],
    );
}

#[test]
fn resilient_macros_read_parse_model_expand() {
    check(
        "resilient-macros",
        &[
            ("diag", 0),
            ("model", 0),
            ("args", 1),
            ("spec_derive", 1),
            ("layer", 1),
            ("expand", 2),
            ("chain", 3),
            ("lib", 4),
        ],
    );
}
