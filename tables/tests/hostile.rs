//! Damaged and hostile files: open, get, iterate and verify return errors
//! or problems, never panic; with a sidecar, verify notices every flipped byte.

mod common;

use common::*;
use kivi_tables::{verify, write_sidecar, CheckKind, Table};
use proptest::prelude::*;
use std::path::Path;

/// Everything a reader may do with a table; must not panic.
fn exercise(base: &Path) {
    if let Ok(t) = Table::open(base) {
        for k in [&b"key_1"[..], b"key_500", b"", b"\x00", b"nope"] {
            let _ = t.get(k);
        }
        let mut it = t.iter();
        let mut n = 0;
        while let Ok(Some(_)) = it.next() {
            n += 1;
            if n > 100_000 {
                panic!("iteration does not end");
            }
        }
    }
    let _ = verify(base);
}

fn positions(len: usize, count: usize) -> Vec<usize> {
    let step = (len / count).max(1);
    (0..len)
        .step_by(step)
        .chain([len.saturating_sub(1)])
        .collect()
}

#[test]
fn truncated_and_flipped_fixtures_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    for name in FIXTURES {
        let base = copy_fixture(name, dir.path());
        for ext in ["spl", "spi"] {
            let path = base.with_extension(ext);
            let orig = std::fs::read(&path).unwrap();
            for cut in positions(orig.len(), 25) {
                std::fs::write(&path, &orig[..cut]).unwrap();
                exercise(&base);
            }
            for at in positions(orig.len(), 40) {
                let mut b = orig.clone();
                b[at] ^= 0x5a;
                std::fs::write(&path, &b).unwrap();
                exercise(&base);
            }
            std::fs::write(&path, &orig).unwrap();
        }
    }
}

#[test]
fn with_a_sidecar_verify_reports_every_flipped_byte() {
    let dir = tempfile::tempdir().unwrap();
    for name in [
        "plain",
        "snappy",
        "binary_zstd",
        "single",
        "empty",
        "deletes",
    ] {
        let base = copy_fixture(name, dir.path());
        write_sidecar(&base).unwrap();
        let r = verify(&base);
        assert_eq!(r.kind, CheckKind::Checksummed, "{name}");
        assert!(r.is_ok(), "{name}: {:?}", r.problems);
        let side = dir.path().join(format!("{name}.kvsum"));
        for path in [base.with_extension("spl"), base.with_extension("spi"), side] {
            let orig = std::fs::read(&path).unwrap();
            for at in positions(orig.len(), 50) {
                let mut b = orig.clone();
                b[at] ^= 0x01;
                std::fs::write(&path, &b).unwrap();
                let r = verify(&base);
                assert!(
                    !r.is_ok(),
                    "{name}: flip at {at} of {} not reported",
                    path.display()
                );
            }
            std::fs::write(&path, &orig).unwrap();
        }
    }
}

#[test]
fn without_a_sidecar_a_flipped_value_byte_goes_unnoticed_by_design() {
    // The format has no checksums: this is what the sidecar is for.
    let dir = tempfile::tempdir().unwrap();
    let base = copy_fixture("plain", dir.path());
    let path = base.with_extension("spl");
    let mut b = std::fs::read(&path).unwrap();
    let last = b.len() - 1; // the last byte of the last value
    b[last] ^= 0x01;
    std::fs::write(&path, &b).unwrap();
    let r = verify(&base);
    assert_eq!(r.kind, CheckKind::Structural);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(log in prop::collection::vec(any::<u8>(), 0..400), index in prop::collection::vec(any::<u8>(), 0..400), keep_headers: bool) {
        let dir = tempfile::tempdir().unwrap();
        let base = copy_fixture("single", dir.path());
        let (mut l, mut i) = (log, index);
        if keep_headers {
            // Valid headers over arbitrary bodies get further into the code.
            let lh = std::fs::read(fixture("single").with_extension("spl")).unwrap();
            let ih = std::fs::read(fixture("single").with_extension("spi")).unwrap();
            let n = l.len().min(84);
            l[..n].copy_from_slice(&lh[..n]);
            let n = i.len().min(112);
            i[..n].copy_from_slice(&ih[..n]);
        }
        std::fs::write(base.with_extension("spl"), &l).unwrap();
        std::fs::write(base.with_extension("spi"), &i).unwrap();
        exercise(&base);
    }
}
