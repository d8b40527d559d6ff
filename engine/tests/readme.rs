//! The Rust example of the README (the repository's, under "Embedded use")
//! and of engine/README.md (the crate's page on crates.io) is the crate
//! documentation's first example, which runs as a doc test: so the example
//! users read compiles and does what it says.

use std::path::Path;

/// The lines of the first ```rust block at or after `from` in `text`.
fn rust_block(text: &str, from: &str) -> Vec<String> {
    let at = text.find(from).unwrap_or_else(|| panic!("no {from:?}"));
    let rest = &text[at..];
    let start = rest.find("```rust\n").expect("a ```rust block") + "```rust\n".len();
    let end = rest[start..].find("```\n").expect("the block's end");
    rest[start..start + end]
        .lines()
        .map(str::to_string)
        .collect()
}

/// The lines of the crate doc's first example, without its hidden lines.
fn crate_doc_example(lib_rs: &str) -> Vec<String> {
    let lines: Vec<&str> = lib_rs
        .lines()
        .take_while(|l| l.starts_with("//!"))
        .map(|l| {
            l.strip_prefix("//! ")
                .unwrap_or(l.trim_start_matches("//!"))
        })
        .collect();
    let start = lines.iter().position(|l| *l == "```").expect("an example") + 1;
    let len = lines[start..]
        .iter()
        .position(|l| *l == "```")
        .expect("its end");
    lines[start..start + len]
        .iter()
        .filter(|l| !(l.starts_with("# ") || **l == "#"))
        .map(|l| l.to_string())
        .collect()
}

#[test]
fn readme_examples_are_the_crate_doc_example() {
    let engine = Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |p: &Path| std::fs::read_to_string(p).unwrap();
    let doc = crate_doc_example(&read(&engine.join("src/lib.rs")));
    assert!(doc.len() > 5, "{doc:?}");
    let root = read(&engine.join("../README.md"));
    assert_eq!(rust_block(&root, "## Embedded use"), doc, "README.md");
    let crate_page = read(&engine.join("README.md"));
    assert_eq!(
        rust_block(&crate_page, "cargo add kivi-db"),
        doc,
        "engine/README.md"
    );
}
