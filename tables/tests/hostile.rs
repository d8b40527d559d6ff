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

/// An uncompressed table's index slot redirected at a DELETE entry, into
/// the header, past the data or into the middle of an entry: the get of
/// that key is a corruption error, never another key's value, never
/// "absent" and never a panic.
#[test]
fn a_slot_pointing_anywhere_but_a_put_is_an_error_not_data() {
    use kivi_tables::{TableWriter, WriterOptions, INDEX_HEADER_LEN};
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("t");
    let mut w = TableWriter::create(&base, WriterOptions::default()).unwrap();
    w.put(b"a", b"alpha").unwrap(); // at offset 84, 8 bytes
    w.put(b"long", &[7u8; 300]).unwrap(); // at 92; a 2-byte VLQ value length
    w.delete(b"gone").unwrap(); // at 92 + 1 + 2 + 4 + 300 = 399
    w.finish().unwrap();
    let spi = base.with_extension("spi");
    let orig = std::fs::read(&spi).unwrap();
    {
        let t = Table::open(&base).unwrap();
        assert_eq!(
            t.index_header().hash_size.bytes(),
            4,
            "small tables hash to 4 bytes"
        );
        assert_eq!(t.get(b"a").unwrap().as_deref(), Some(&b"alpha"[..]));
        assert_eq!(t.get(b"long").unwrap().as_deref(), Some(&[7u8; 300][..]));
    }
    // The slot of "a": 4-byte hash, then its 4-byte address 84.
    let slot_of_a = (INDEX_HEADER_LEN..orig.len())
        .step_by(8)
        .find(|&at| orig[at + 4..at + 8] == 84u32.to_le_bytes())
        .expect("a's slot");
    let log_len = std::fs::metadata(base.with_extension("spl")).unwrap().len() as u32;
    for (addr, what) in [
        (399u32, "DELETE"),
        (10, "outside"),
        (log_len + 5, "outside"),
        (log_len - 1, "corrupt"),
    ] {
        let mut b = orig.clone();
        b[slot_of_a + 4..slot_of_a + 8].copy_from_slice(&addr.to_le_bytes());
        std::fs::write(&spi, &b).unwrap();
        let t = Table::open(&base).unwrap();
        let err = t.get(b"a").expect_err(what).to_string();
        assert!(err.contains(what), "address {addr}: {err}");
        let many = t.get_many(&[&b"a"[..]]).err().map(|e| e.to_string());
        assert_eq!(
            many.as_deref(),
            Some(err.as_str()),
            "get_many agrees with get at {addr}"
        );
    }
    // Into the middle of the long value: bytes of 7s parse as a PUT whose
    // key is not "a" and does not hash to a's slot: an error, not an
    // answer (neither those bytes nor "absent").
    let mut b = orig.clone();
    b[slot_of_a + 4..slot_of_a + 8].copy_from_slice(&200u32.to_le_bytes());
    std::fs::write(&spi, &b).unwrap();
    let t = Table::open(&base).unwrap();
    let err = t.get(b"a").expect_err("mid-entry").to_string();
    assert!(err.contains("does not hash"), "{err}");
}
