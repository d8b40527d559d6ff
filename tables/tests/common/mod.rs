//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

pub const FIXTURES: [&str; 12] = [
    "plain",
    "deletes",
    "snappy",
    "zstd",
    "binary",
    "binary_snappy",
    "binary_zstd",
    "hash64",
    "empty",
    "single",
    "full3",
    "incremental",
];

pub fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/sparkey")
}

pub fn fixture(name: &str) -> PathBuf {
    fixture_dir().join(name)
}

/// Undoes the fixtures' escaping: `\xNN` for every byte outside 0x21..=0x7E
/// and for the backslash.
pub fn unescape(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'\\' {
            assert_eq!(s[i + 1], b'x', "escape at {i}");
            let hex = std::str::from_utf8(&s[i + 2..i + 4]).unwrap();
            out.push(u8::from_str_radix(hex, 16).unwrap());
            i += 4;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    out
}

/// The live pairs a fixture's .tsv lists, in order.
pub fn expected(name: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    let text = std::fs::read(fixture(name).with_extension("tsv")).unwrap();
    text.split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| {
            let tab = l.iter().position(|&b| b == b'\t').expect("a TAB");
            (unescape(&l[..tab]), unescape(&l[tab + 1..]))
        })
        .collect()
}

/// Copies a fixture's files into `dir`, returning the new base path.
pub fn copy_fixture(name: &str, dir: &Path) -> PathBuf {
    for ext in ["spl", "spi"] {
        std::fs::copy(
            fixture(name).with_extension(ext),
            dir.join(format!("{name}.{ext}")),
        )
        .unwrap();
    }
    dir.join(name)
}
