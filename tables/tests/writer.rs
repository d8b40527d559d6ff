//! kivi-written tables: round trips against a model, sparkey's block cut
//! rules, rewrite, and the bounded-memory build equal to the in-memory one.

mod common;

use common::*;
use kivi_tables::{
    build_index, rewrite, verify, CheckKind, Compression, IndexOptions, Table, TableWriter,
    WriterOptions,
};
use proptest::prelude::*;
use std::collections::BTreeMap;

#[derive(Debug, Clone)]
enum Op {
    Put(Vec<u8>, Vec<u8>),
    Del(Vec<u8>),
}

fn op() -> impl Strategy<Value = Op> {
    // A small key space, so keys are overwritten and deleted often.
    let key = prop_oneof![
        prop::collection::vec(0u8..4, 0..3),
        prop::collection::vec(any::<u8>(), 0..12),
    ];
    prop_oneof![
        4 => (key.clone(), prop::collection::vec(any::<u8>(), 0..300)).prop_map(|(k, v)| Op::Put(k, v)),
        1 => key.prop_map(Op::Del),
    ]
}

fn compression() -> impl Strategy<Value = Compression> {
    prop_oneof![
        Just(Compression::None),
        Just(Compression::Snappy),
        Just(Compression::Zstd)
    ]
}

fn write(
    base: &std::path::Path,
    ops: &[Op],
    c: Compression,
    block: u32,
) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let opts = WriterOptions {
        compression: c,
        block_size: block,
        ..WriterOptions::default()
    };
    let mut w = TableWriter::create(base, opts).unwrap();
    let mut model = BTreeMap::new();
    for op in ops {
        match op {
            Op::Put(k, v) => {
                w.put(k, v).unwrap();
                model.insert(k.clone(), v.clone());
            }
            Op::Del(k) => {
                w.delete(k).unwrap();
                model.remove(k);
            }
        }
    }
    w.finish().unwrap();
    model
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn tables_round_trip_against_a_model(ops in prop::collection::vec(op(), 0..120), c in compression(), block in 10u32..200) {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("t");
        let model = write(&base, &ops, c, block);
        let t = Table::open(&base).unwrap();
        prop_assert_eq!(t.len(), model.len() as u64);
        for (k, v) in &model {
            let got = t.get(k).unwrap();
            prop_assert_eq!(got.as_deref(), Some(v.as_slice()));
        }
        for op in &ops {
            if let Op::Del(k) = op {
                if !model.contains_key(k) {
                    prop_assert!(t.get(k).unwrap().is_none());
                }
            }
        }
        // get_many answers as get does, for present, deleted and absent keys.
        let mut asked: Vec<Vec<u8>> = ops.iter().map(|op| match op {
            Op::Put(k, _) | Op::Del(k) => k.clone(),
        }).collect();
        asked.push(b"never-written".to_vec());
        let many = t.get_many(&asked).unwrap();
        prop_assert_eq!(many.len(), asked.len());
        for (k, got) in asked.iter().zip(&many) {
            prop_assert_eq!(got.as_deref(), model.get(k).map(|v| v.as_slice()));
        }
        let mut live: Vec<_> = t.to_vec().unwrap();
        live.sort();
        let want: Vec<_> = model.clone().into_iter().collect();
        prop_assert_eq!(live, want);
        let r = verify(&base);
        prop_assert_eq!(r.kind, CheckKind::Checksummed);
        prop_assert!(r.is_ok(), "{:?}", r.problems);

        // rewrite keeps only live pairs: deleted keys stay deleted.
        let copy = dir.path().join("copy");
        rewrite(&base, &copy, WriterOptions::default(), |_| {}).unwrap();
        let t2 = Table::open(&copy).unwrap();
        prop_assert_eq!(t2.log_header().num_deletes, 0);
        prop_assert_eq!(t2.log_header().num_puts, model.len() as u64);
        prop_assert_eq!(t2.to_vec().unwrap(), t.to_vec().unwrap());
    }

    #[test]
    fn the_bounded_build_equals_the_in_memory_build(ops in prop::collection::vec(op(), 1..400), limit in 32u64..400, c in compression()) {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("t");
        write(&base, &ops, c, 64);
        let spl = base.with_extension("spl");
        let opts = |memory_limit| IndexOptions { seed: Some(7), memory_limit, ..IndexOptions::default() };
        let mem = dir.path().join("mem.spi");
        let small = dir.path().join("small.spi");
        let a = build_index(&spl, &mem, &opts(u64::MAX)).unwrap();
        let b = build_index(&spl, &small, &opts(limit)).unwrap();
        prop_assert_eq!(a.regions, 1);
        prop_assert!(std::fs::read(&mem).unwrap() == std::fs::read(&small).unwrap(), "differ: {:?}", b);
    }
}

#[test]
fn the_bounded_build_uses_many_regions_and_wraps() {
    // Many regions of 2 slots (8 bytes each, a 32-byte limit): walks cross
    // boundaries and wrap round.
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("t");
    let ops: Vec<Op> = (0..3000u32)
        .map(|i| match i % 7 {
            3 => Op::Del(format!("k{}", i % 500).into_bytes()),
            _ => Op::Put(
                format!("k{}", i % 900).into_bytes(),
                i.to_le_bytes().to_vec(),
            ),
        })
        .collect();
    write(&base, &ops, Compression::None, 0);
    let spl = base.with_extension("spl");
    let mut want = None;
    for limit in [u64::MAX, 32, 1000] {
        let out = dir.path().join(format!("{limit}.spi"));
        let r = build_index(
            &spl,
            &out,
            &IndexOptions {
                seed: Some(1),
                memory_limit: limit,
                ..IndexOptions::default()
            },
        )
        .unwrap();
        assert!(!r.fell_back);
        if limit == 32 {
            assert!(r.regions > 1000, "{r:?}");
        }
        let got = std::fs::read(&out).unwrap();
        match &want {
            None => want = Some(got),
            Some(w) => assert!(*w == got, "limit {limit} differs"),
        }
    }
}

#[test]
fn compressed_blocks_are_cut_as_sparkey_cuts_them() {
    // Same puts, same block size: the same number of blocks and the same
    // most entries a block as sparkey's own files.
    let dir = tempfile::tempdir().unwrap();
    for (name, c, block) in [
        ("snappy", Compression::Snappy, 4096),
        ("zstd", Compression::Zstd, 4096),
        ("binary_snappy", Compression::Snappy, 128),
        ("binary_zstd", Compression::Zstd, 128),
    ] {
        let ops: Vec<Op> = expected(name)
            .into_iter()
            .map(|(k, v)| Op::Put(k, v))
            .collect();
        let base = dir.path().join(name);
        write(&base, &ops, c, block);
        let ours = Table::open(&base).unwrap();
        let theirs = Table::open(fixture(name)).unwrap();
        let (a, b) = (ours.log_header(), theirs.log_header());
        assert_eq!(a.max_entries_per_block, b.max_entries_per_block, "{name}");
        assert_eq!(
            (a.num_puts, a.put_size, a.max_key_len, a.max_value_len),
            (b.num_puts, b.put_size, b.max_key_len, b.max_value_len),
            "{name}"
        );
        assert_eq!(
            ours.index_header().entry_block_bits,
            theirs.index_header().entry_block_bits,
            "{name}"
        );
        assert_eq!(
            verify(&base).blocks,
            verify(&fixture(name)).blocks,
            "{name}: blocks"
        );
    }
}

#[test]
fn uncompressed_logs_match_sparkey_byte_for_byte() {
    // Same puts and file identifier: the same log bytes (spec §1.2 example too).
    let dir = tempfile::tempdir().unwrap();
    for name in ["plain", "binary", "single", "empty"] {
        let ops: Vec<Op> = expected(name)
            .into_iter()
            .map(|(k, v)| Op::Put(k, v))
            .collect();
        let base = dir.path().join(name);
        write(&base, &ops, Compression::None, 0);
        let mut ours = std::fs::read(base.with_extension("spl")).unwrap();
        let theirs = std::fs::read(fixture(name).with_extension("spl")).unwrap();
        ours[12..16].copy_from_slice(&theirs[12..16]);
        assert!(ours == theirs, "{name}");
    }
    let base = dir.path().join("example");
    write(
        &base,
        &[
            Op::Put(b"a".to_vec(), b"1".to_vec()),
            Op::Put(b"bb".to_vec(), b"22".to_vec()),
            Op::Put(b"a".to_vec(), b"333".to_vec()),
        ],
        Compression::None,
        0,
    );
    let log = std::fs::read(base.with_extension("spl")).unwrap();
    assert_eq!(&log[84..], b"\x02\x01a1\x03\x02bb22\x02\x03a333");
    assert_eq!(log.len(), 100);
}

#[test]
fn limits_and_bad_arguments_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let bad = WriterOptions {
        compression: Compression::Snappy,
        block_size: 5,
        ..WriterOptions::default()
    };
    assert!(matches!(
        TableWriter::create(dir.path().join("x"), bad),
        Err(kivi_tables::Error::InvalidArgument(_))
    ));
    let mut w = TableWriter::create(dir.path().join("y"), WriterOptions::default()).unwrap();
    let big = vec![0u8; (kivi_tables::limits::MAX_KEY_LEN + 1) as usize];
    assert!(matches!(
        w.put(&big, b""),
        Err(kivi_tables::Error::TooLarge { .. })
    ));
    drop(w);
    // A dropped writer leaves nothing behind.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
