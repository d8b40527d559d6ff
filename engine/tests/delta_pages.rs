//! Delta pages: a changed leaf whose base is a page on disk (the cache could
//! not keep it) is checkpointed as its changes over that page, not whole.
//! These tests make a tree many times the cache, change it at random
//! (puts, deletes, values in and out of line) until leaves are rebuilt from
//! full deltas, and check after every checkpoint, and after reopening, that
//! the store reads back exactly what a model holds and that `check` (which
//! reads every delta page and its base from disk) finds nothing wrong.

mod common;

use common::{assert_healthy, dump, mix, Model};
use kivi::{Db, Options, WriteBatch};

fn key(i: u64) -> Vec<u8> {
    format!("user:{i:08}").into_bytes()
}

fn value(i: u64, round: u64) -> Vec<u8> {
    let x = mix(i << 16 | round);
    // Mostly small; one in 50 out of line (over 1 KiB).
    let len = if x.is_multiple_of(50) {
        1500 + (x >> 8) as usize % 2000
    } else {
        (x >> 8) as usize % 60
    };
    (0..len).map(|j| (x >> (j % 56)) as u8).collect()
}

fn opts() -> Options {
    Options {
        // A tree of ~1.5 MiB over a cache of 128 KiB: changed leaves name
        // their base by page.
        cache_bytes: 128 << 10,
        // Only the test's checkpoints.
        checkpoint_bytes: 1 << 40,
        ..Options::default()
    }
}

#[test]
fn changed_leaves_over_pages_are_written_as_deltas_and_read_back_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let n = 20_000u64;
    let mut model = Model::new();
    let db = Db::open(&dir, opts()).unwrap();
    for chunk in 0..n / 1000 {
        let mut b = WriteBatch::new();
        for i in chunk * 1000..(chunk + 1) * 1000 {
            let v = value(i, 0);
            b.put(key(i), v.clone()).unwrap();
            model.insert(key(i), v);
        }
        db.write(b).unwrap();
    }
    db.checkpoint().unwrap();
    let mut x = 7u64;
    for round in 1..=60u64 {
        let mut b = WriteBatch::new();
        let mut touched = std::collections::BTreeSet::new();
        for _ in 0..150 {
            x = mix(x);
            let i = x % n;
            if !touched.insert(i) {
                continue;
            }
            if x.is_multiple_of(7) {
                b.delete(key(i)).unwrap();
                model.remove(&key(i));
            } else {
                let v = value(i, round);
                b.put(key(i), v.clone()).unwrap();
                model.insert(key(i), v);
            }
        }
        db.write(b).unwrap();
        db.checkpoint().unwrap();
        if round % 20 == 0 {
            assert!(
                dump(&db) == model,
                "round {round}: a scan differs from the model"
            );
            assert_healthy(&db, model.len());
        }
    }
    let stats = db.stats().unwrap();
    assert!(
        stats.delta_pages > 1000,
        "checkpoints wrote {} delta pages",
        stats.delta_pages
    );
    for (k, v) in model.iter().step_by(37) {
        assert_eq!(db.get(k).unwrap().as_deref(), Some(v.as_slice()));
    }
    db.close().unwrap();
    let db = Db::open(&dir, opts()).unwrap();
    assert!(
        dump(&db) == model,
        "after reopening, a scan differs from the model"
    );
    for i in (0..n).step_by(11) {
        assert_eq!(db.get(&key(i)).unwrap(), model.get(&key(i)).cloned());
    }
    assert_healthy(&db, model.len());
    // Compaction rewrites every leaf whole, deltas and all.
    db.compact().unwrap();
    assert!(
        dump(&db) == model,
        "after compaction, a scan differs from the model"
    );
    assert_healthy(&db, model.len());
}
