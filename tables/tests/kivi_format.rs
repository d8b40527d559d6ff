//! Tables written by this version, committed under `testdata/kivi/v1/`:
//! sparkey's files as kivi's `TableWriter` writes them, with kivi's own
//! checksum sidecar (`BASE.kvsum`, version 1). They must read back exactly
//! what wrote them and pass `verify` with every checksum (the sparkey
//! fixtures in `testdata/sparkey/`, written by sparkey itself, have no
//! sidecar). A change that reads these bytes differently, or a new sidecar
//! version (which the reader refuses in an old file), fails here: a new
//! version needs a new fixture directory, the old one kept.
//!
//! To write the fixture (only into a new directory):
//!
//! ```text
//! cargo test -p kivi-tables --test kivi_format -- --ignored --exact write_the_kivi_table_fixture
//! ```

use kivi_tables::{
    sidecar_path, verify, CheckKind, Compression, IndexOptions, Table, TableWriter, WriterOptions,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The sidecar version the fixture was written with (its bytes 4..8).
const SIDECAR_VERSION: u32 = 1;

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("testdata/kivi/v{SIDECAR_VERSION}"))
}

/// The tables of the fixture and how each was written.
fn tables() -> [(&'static str, Compression, u32); 2] {
    [
        ("plain", Compression::None, 0),
        ("zstd", Compression::Zstd, 4096),
    ]
}

fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn value(i: u32, round: u32) -> Vec<u8> {
    let len = match i {
        100 => 5000,
        _ if i.is_multiple_of(40) => 1200,
        _ => [0, 1, 9, 70, 300][(i % 5) as usize],
    };
    let mut x = mix(u64::from(i) << 8 | u64::from(round));
    (0..len)
        .map(|_| {
            x = mix(x);
            x as u8
        })
        .collect()
}

/// The writes, in order: `None` deletes. Never change this for an existing
/// fixture.
fn writes() -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let key = |i: u32| format!("key{i:04}").into_bytes();
    let mut w: Vec<_> = (0..300).map(|i| (key(i), Some(value(i, 1)))).collect();
    w.extend((0..300).step_by(7).map(|i| (key(i), None)));
    w.extend((0..300).step_by(10).map(|i| (key(i), Some(value(i, 2)))));
    w.push((b"\x00binary\xffkey".to_vec(), Some(b"\x00\xff".to_vec())));
    w.push((b"never-written".to_vec(), None));
    w
}

fn expected() -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut m = BTreeMap::new();
    for (k, v) in writes() {
        match v {
            Some(v) => m.insert(k, v),
            None => m.remove(&k),
        };
    }
    m
}

#[test]
fn the_committed_tables_read_back_exactly_and_verify_with_checksums() {
    let want = expected();
    for (name, compression, _) in tables() {
        let base = fixture_dir().join(name);
        let sidecar = std::fs::read(sidecar_path(&base))
            .unwrap_or_else(|e| panic!("{name}: no sidecar in the fixture: {e}"));
        assert_eq!(
            sidecar[4..8],
            SIDECAR_VERSION.to_le_bytes(),
            "{name}: sidecar version"
        );
        let r = verify(&base);
        assert_eq!(r.kind, CheckKind::Checksummed, "{name}: {:?}", r.problems);
        assert!(r.is_ok(), "{name}: {:?}", r.problems);
        let t = Table::open(&base).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(t.log_header().compression, compression, "{name}");
        let got: BTreeMap<Vec<u8>, Vec<u8>> = t.to_vec().unwrap().into_iter().collect();
        assert!(
            got == want,
            "{name}: {} pairs, expected {}",
            got.len(),
            want.len()
        );
        assert_eq!(t.len(), want.len() as u64, "{name}");
        for (k, v) in &want {
            let got = t.get(k).unwrap();
            assert_eq!(got.as_deref(), Some(v.as_slice()), "{name}: {k:?}");
        }
        for (k, v) in writes() {
            if v.is_none() && !want.contains_key(&k) {
                assert_eq!(t.get(&k).unwrap(), None, "{name}: {k:?} was deleted");
            }
        }
    }
}

#[test]
#[ignore = "writes the committed fixture; run by hand for a new version"]
fn write_the_kivi_table_fixture() {
    let dir = fixture_dir();
    assert!(!dir.exists(), "{} exists: never rewritten", dir.display());
    std::fs::create_dir_all(&dir).unwrap();
    for (name, compression, block_size) in tables() {
        let mut w = TableWriter::create(
            dir.join(name),
            WriterOptions {
                compression,
                block_size: if block_size == 0 {
                    WriterOptions::default().block_size
                } else {
                    block_size
                },
                index: IndexOptions {
                    seed: Some(0x6b69_7669),
                    ..IndexOptions::default()
                },
                sidecar: true,
            },
        )
        .unwrap();
        for (k, v) in writes() {
            match v {
                Some(v) => w.put(&k, &v).unwrap(),
                None => w.delete(&k).unwrap(),
            }
        }
        w.finish().unwrap();
    }
}
