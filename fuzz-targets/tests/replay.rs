//! Replays every input of every fuzz target's corpus (`fuzz/corpus/<target>/`,
//! real inputs) and every crash input kept as a regression test
//! (`fuzz/regressions/<target>/`) through the target: none may panic. This
//! is how `cargo test` runs the fuzz targets without a fuzzer.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

/// The files of `dir`, sorted; none if it does not exist.
fn inputs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

#[test]
fn every_corpus_and_regression_input_runs_clean() {
    let mut failed = Vec::new();
    let mut ran = 0;
    for &(name, target) in kivi_fuzz_targets::TARGETS {
        let corpus = inputs(&fuzz_dir().join("corpus").join(name));
        assert!(!corpus.is_empty(), "fuzz/corpus/{name} holds no input");
        let regressions = inputs(&fuzz_dir().join("regressions").join(name));
        for file in corpus.iter().chain(&regressions) {
            let data = std::fs::read(file).expect("a corpus file");
            ran += 1;
            if catch_unwind(AssertUnwindSafe(|| target(&data))).is_err() {
                failed.push(format!("{name}: {}", file.display()));
            }
        }
    }
    assert!(
        failed.is_empty(),
        "inputs that fail:\n{}",
        failed.join("\n")
    );
    println!("{ran} inputs replayed");
}

/// Every target has its libFuzzer entry point in fuzz/fuzz_targets/, and
/// every entry point is a target here.
#[test]
fn each_target_has_an_entry_point() {
    let mut found: Vec<String> = inputs(&fuzz_dir().join("fuzz_targets"))
        .iter()
        .filter_map(|p| Some(p.file_stem()?.to_str()?.to_string()))
        .collect();
    found.sort();
    let mut names: Vec<String> = kivi_fuzz_targets::TARGETS
        .iter()
        .map(|(n, _)| n.to_string())
        .collect();
    names.sort();
    assert_eq!(found, names);
}
