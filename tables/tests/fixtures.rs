//! sparkey's own files: read back exactly as their .tsv says, and every
//! index rebuilt from its log byte for byte (in memory and within a tiny
//! memory limit).

mod common;

use common::*;
use kivi_tables::{build_index, verify, CheckKind, HashSize, IndexOptions, Table, LOG_HEADER_LEN};

#[test]
fn every_fixture_reads_back_as_its_tsv() {
    for name in FIXTURES {
        let t = Table::open(fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let want = expected(name);
        let got = t.to_vec().unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(got.len(), want.len(), "{name}: live pairs");
        assert!(got == want, "{name}: pairs differ from the .tsv");
        assert_eq!(t.len(), want.len() as u64, "{name}");
        for (k, v) in &want {
            let got = t
                .get(k)
                .unwrap()
                .unwrap_or_else(|| panic!("{name}: key {k:?} missing"));
            assert_eq!(got.as_ref(), v.as_slice(), "{name}: value of {k:?}");
        }
        for absent in [&b"key_1000000"[..], b"nope", b"\x00\x00\x00", b"key_"] {
            assert!(t.get(absent).unwrap().is_none(), "{name}: {absent:?}");
        }
    }
}

#[test]
fn deleted_keys_are_absent() {
    let t = Table::open(fixture("deletes")).unwrap();
    assert!(t.get(b"key_3").unwrap().is_none());
    assert_eq!(t.get(b"key_15").unwrap().unwrap().as_ref(), b"newvalue_15");
    let t = Table::open(fixture("incremental")).unwrap();
    assert!(t.get(b"key_200").unwrap().is_none());
    assert_eq!(t.get(b"key_5").unwrap().unwrap().as_ref(), b"v2_5");
}

#[test]
fn every_fixture_verifies_structurally() {
    for name in FIXTURES {
        let r = verify(&fixture(name));
        assert_eq!(r.kind, CheckKind::Structural, "{name}");
        assert!(r.is_ok(), "{name}: {:?}", r.problems);
    }
}

fn options_like(t: &Table, memory_limit: u64) -> IndexOptions {
    let ih = t.index_header();
    IndexOptions {
        hash_size: (ih.hash_size == HashSize::Eight).then_some(HashSize::Eight),
        seed: Some(ih.hash_seed),
        memory_limit,
        ..IndexOptions::default()
    }
}

#[test]
fn every_fresh_index_rebuilds_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    for name in FIXTURES.iter().filter(|n| **n != "incremental") {
        let t = Table::open(fixture(name)).unwrap();
        let want = std::fs::read(fixture(name).with_extension("spi")).unwrap();
        let base = copy_fixture(name, dir.path());
        // In memory, then region by region with a limit of a few slots.
        for limit in [u64::MAX, 64, 512, 4096] {
            let out = dir.path().join(format!("{name}-{limit}.spi"));
            let report =
                build_index(&base.with_extension("spl"), &out, &options_like(&t, limit)).unwrap();
            let got = std::fs::read(&out).unwrap();
            assert!(
                got == want,
                "{name} (limit {limit}, {} regions): index differs",
                report.regions
            );
            if limit == 64 && t.index_header().hash_capacity > 8 {
                assert!(
                    report.regions > 1 && !report.fell_back,
                    "{name}: {report:?}"
                );
            }
        }
    }
}

/// The log offset just past the first `n` entries (uncompressed log).
fn offset_after(log: &[u8], n: usize) -> u64 {
    let mut pos = LOG_HEADER_LEN;
    for _ in 0..n {
        let (a, l1) = kivi_tables::vlq::decode(&log[pos..]).unwrap();
        let (b, l2) = kivi_tables::vlq::decode(&log[pos + l1..]).unwrap();
        let payload = if a == 0 { b } else { a - 1 + b };
        pos += l1 + l2 + payload as usize;
    }
    pos as u64
}

#[test]
fn the_incremental_index_rebuilds_byte_for_byte() {
    // The fixture's first index covered the first 1,200 puts; rebuild it
    // from a copy of the log whose header says so, then build again
    // incrementally over the whole log.
    let dir = tempfile::tempdir().unwrap();
    let t = Table::open(fixture("incremental")).unwrap();
    let log = std::fs::read(fixture("incremental").with_extension("spl")).unwrap();
    let end = offset_after(&log, 1200);
    let mut old_log = log.clone();
    old_log[16..24].copy_from_slice(&1200u64.to_le_bytes());
    old_log[24..32].copy_from_slice(&0u64.to_le_bytes());
    old_log[32..40].copy_from_slice(&end.to_le_bytes());
    old_log[40..48].copy_from_slice(&7u64.to_le_bytes()); // key_199
    old_log[48..56].copy_from_slice(&9u64.to_le_bytes()); // value_999
    let old_spl = dir.path().join("old.spl");
    std::fs::write(&old_spl, &old_log).unwrap();
    let want = std::fs::read(fixture("incremental").with_extension("spi")).unwrap();
    for limit in [u64::MAX, 64, 1000] {
        let spi = dir.path().join(format!("inc-{limit}.spi"));
        let first = build_index(&old_spl, &spi, &options_like(&t, limit)).unwrap();
        assert_eq!(first.header.hash_capacity, 1561);
        let spl = dir.path().join("inc.spl");
        std::fs::write(&spl, &log).unwrap();
        let opts = IndexOptions {
            seed: None,
            incremental: true,
            memory_limit: limit,
            ..IndexOptions::default()
        };
        let report = build_index(&spl, &spi, &opts).unwrap();
        assert!(report.incremental, "{report:?}");
        let got = std::fs::read(&spi).unwrap();
        assert!(
            got == want,
            "incremental (limit {limit}) differs: {:?} vs {:?}",
            report.header,
            t.index_header()
        );
        // Nothing new in the log: nothing to do.
        assert!(build_index(&spl, &spi, &opts).unwrap().unchanged);
    }
}
