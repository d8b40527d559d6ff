//! The on-disk format: a store written by this version, committed under
//! `tests/data/format-v<N>/` (N = `kivi_log::FORMAT_VERSION`, which the
//! store's `KIVI` file and every segment header carry), must open and read
//! back exactly what wrote it, and pass `check`. A change that reads the
//! committed bytes differently fails here; a change of the format must bump
//! the version and add a fixture for it (the last test fails until it does),
//! keeping the old fixture to test whatever upgrade path there is.
//!
//! The fixture holds both paths a store is read by: most pairs are in a
//! checkpoint (the tree in a page segment), and the later writes only in the
//! commit log after it, replayed at open. It has deletes (of pairs in the
//! checkpoint and of pairs written after it), batches, binary and long keys,
//! empty values, values inline and out of line (over 1 KiB), and values over
//! 4 KiB (a default page). From format 4 on, a second checkpoint writes the
//! leaves changed since the first as delta pages over their pages. From
//! format 5 on, values have deadlines, in every place a value is written
//! (leaf pages, delta pages, the commit log), some long past (those keys
//! read as absent) and the rest in the year 2100.
//!
//! To write the fixture for the current version (only when the format
//! changed, into a new directory; never rewrite an existing one):
//!
//! ```text
//! cargo test -p kivi-db --test format -- --ignored --exact write_the_format_fixture
//! ```

mod common;

use common::{assert_healthy, dump, mix, Model};
use kivi::{Db, Options, WriteBatch};
use std::path::{Path, PathBuf};

/// The fixture of format `version`.
fn fixture_of(version: u32) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(format!("format-v{version}"))
}

/// The fixture of the format this build writes.
fn fixture_dir() -> PathBuf {
    fixture_of(kivi_log::FORMAT_VERSION)
}

/// One step of the fixture's history.
enum Step {
    Put(Vec<u8>, Vec<u8>),
    /// A put with a deadline (milliseconds since the Unix epoch).
    PutUntil(Vec<u8>, Vec<u8>, u64),
    Delete(Vec<u8>),
    Batch(Vec<(Vec<u8>, Option<Vec<u8>>)>),
    Checkpoint,
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:04}").into_bytes()
}

/// The value of `key(i)` as written in `round`: sizes from empty to over
/// 4 KiB, bytes derived from both.
fn value(i: u32, round: u32) -> Vec<u8> {
    let len = match i {
        150 => 5000,
        151 => 9000,
        _ if i.is_multiple_of(25) => 1500 + i as usize,
        _ => [0, 1, 7, 33, 120, 260][(i % 6) as usize],
    };
    let mut x = mix(u64::from(i) << 8 | u64::from(round));
    (0..len)
        .map(|_| {
            x = mix(x);
            x as u8
        })
        .collect()
}

/// What the writer of format `version`'s fixture did, in order. Never
/// change this for an existing fixture: the test checks the fixture
/// against it.
fn steps(version: u32) -> Vec<Step> {
    use Step::*;
    let mut s = Vec::new();
    // Before the checkpoint.
    for i in 0..300 {
        s.push(Put(key(i), value(i, 1)));
    }
    for i in (0..300).step_by(7) {
        s.push(Delete(key(i)));
    }
    s.push(Put(b"\x00binary\xff\x01key".to_vec(), b"\xff\x00".to_vec()));
    s.push(Put(vec![b'L'; 1000], value(1000, 1)));
    s.push(Batch(
        (0..40)
            .map(|j| {
                if j % 4 == 3 {
                    (key(j * 3 + 1), None)
                } else {
                    (format!("batch1/{j:02}").into_bytes(), Some(value(j, 10)))
                }
            })
            .collect(),
    ));
    if version >= 5 {
        // Deadlines in the first checkpoint's leaves.
        for i in (2..300).step_by(9) {
            s.push(PutUntil(key(i), value(i, 6), deadline(i)));
        }
    }
    s.push(Checkpoint);
    if version >= 4 {
        // Format 4: leaves changed over their pages (the writer's cache is
        // too small to keep them) go to a second checkpoint as delta
        // pages: puts, a value out of line, deletes.
        for i in (0..300).step_by(13) {
            s.push(Put(key(i), value(i, 5)));
        }
        s.push(Put(key(101), value(150, 5)));
        for i in (3..300).step_by(17) {
            s.push(Delete(key(i)));
        }
        if version >= 5 {
            // Deadlines in delta pages, and one dropped by a plain put.
            for i in (4..300).step_by(19) {
                s.push(PutUntil(key(i), value(i, 7), deadline(i)));
            }
            s.push(PutUntil(key(150), value(150, 7), deadline(150)));
            s.push(Put(key(2), value(2, 7)));
        }
        s.push(Checkpoint);
    }
    // After it: only in the commit log.
    for i in (0..300).step_by(5) {
        s.push(Put(key(i), value(i, 2)));
    }
    for i in (0..300).step_by(11) {
        s.push(Delete(key(i)));
    }
    for i in 300..340 {
        s.push(Put(key(i), value(i, 2)));
    }
    if version >= 5 {
        // Deadlines only in the commit log.
        for i in (6..340).step_by(23) {
            s.push(PutUntil(key(i), value(i, 8), deadline(i)));
        }
    }
    s.push(Delete(b"never-written".to_vec()));
    s.push(Delete(b"\x00binary\xff\x01key".to_vec()));
    s.push(Put(key(151), value(151, 3)));
    s.push(Batch(vec![
        (b"batch2/a".to_vec(), Some(value(2000, 4))),
        (b"batch2/big".to_vec(), Some(value(150, 4))),
        (b"batch2/empty".to_vec(), Some(Vec::new())),
        (key(14), Some(value(14, 4))),
        (key(2), None),
        (b"batch1/00".to_vec(), None),
    ]));
    s
}

/// Format 5's deadlines: one key in four long past (2001), the others in
/// the year 2100.
fn deadline(i: u32) -> u64 {
    if i.is_multiple_of(4) {
        1_000_000_000_000 + u64::from(i)
    } else {
        4_102_444_800_000 + u64::from(i)
    }
}

/// The deadline each key holds after `steps(version)` (absent: none).
fn expected_deadlines(version: u32) -> std::collections::BTreeMap<Vec<u8>, u64> {
    let mut m = std::collections::BTreeMap::new();
    for step in steps(version) {
        match step {
            Step::PutUntil(k, _, d) => {
                m.insert(k, d);
            }
            Step::Put(k, _) | Step::Delete(k) => {
                m.remove(&k);
            }
            Step::Batch(ops) => {
                for (k, _) in ops {
                    m.remove(&k);
                }
            }
            Step::Checkpoint => {}
        }
    }
    m
}

/// The pairs the store holds after `steps(version)`, expired ones left out.
fn expected(version: u32) -> Model {
    let mut m = Model::new();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    for step in steps(version) {
        match step {
            Step::Put(k, v) => {
                m.insert(k, v);
            }
            Step::PutUntil(k, v, d) => {
                if now <= d {
                    m.insert(k, v);
                } else {
                    m.remove(&k);
                }
            }
            Step::Delete(k) => {
                m.remove(&k);
            }
            Step::Batch(ops) => {
                for (k, v) in ops {
                    match v {
                        Some(v) => m.insert(k, v),
                        None => m.remove(&k),
                    };
                }
            }
            Step::Checkpoint => {}
        }
    }
    m
}

/// The options the fixture is written with: no checkpoint but those it
/// asks for (and none when it is closed: the backlog is small), and the
/// smallest cache allowed, too small to keep the written leaves (1 KiB
/// pages) in memory, so that leaves changed after a checkpoint name their
/// pages as their bases.
fn opts() -> Options {
    Options {
        checkpoint_bytes: 1 << 30,
        cache_bytes: 64 << 10,
        page_size: 1024,
        ..Options::default()
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    let entries =
        std::fs::read_dir(from).unwrap_or_else(|e| panic!("no fixture at {}: {e}", from.display()));
    for e in entries {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

#[test]
fn the_committed_store_of_this_format_reads_back_exactly() {
    reads_back_exactly(kivi_log::FORMAT_VERSION);
}

/// Every older format this build reads opens, reads back, takes writes (in
/// this build's format, which its identity then names) and reopens.
#[test]
fn the_committed_stores_of_older_formats_read_back_and_upgrade() {
    for version in kivi_log::OLDEST_FORMAT_READ..kivi_log::FORMAT_VERSION {
        reads_back_exactly(version);
    }
}

fn reads_back_exactly(version: u32) {
    let fixture = fixture_of(version);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    copy_dir(&fixture, &dir);
    let db = Db::open(&dir, Options::default())
        .unwrap_or_else(|e| panic!("opening a copy of {}: {e}", fixture.display()));
    let stats = db.stats().unwrap();
    assert!(
        stats.damage_at_open.is_empty() && stats.torn_tail.is_none(),
        "the fixture opened with damage: {:?}, torn tail {:?}",
        stats.damage_at_open,
        stats.torn_tail
    );
    // Both paths: a checkpoint's tree, and commits replayed after it.
    assert!(
        stats.checkpoint_tree_bytes > 0,
        "no checkpoint in the fixture"
    );
    assert!(
        stats.replayed_at_open > 0,
        "nothing replayed from the commit log"
    );
    let want = expected(version);
    let deadlines = expected_deadlines(version);
    for (k, v) in &want {
        let got = db.get_with_deadline(k).unwrap();
        assert!(
            got.as_ref().is_some_and(|(g, _)| g == v),
            "{}: got {:?}, expected {} bytes",
            common::show(k),
            got.map(|g| g.0.len()),
            v.len()
        );
        let deadline = got.and_then(|(_, d)| d).map(kivi::Deadline::unix_millis);
        assert_eq!(
            deadline,
            deadlines.get(k).copied(),
            "{}'s deadline",
            common::show(k)
        );
    }
    if version >= 5 {
        assert!(
            deadlines.keys().any(|k| !want.contains_key(k)),
            "some keys of the fixture have expired"
        );
    }
    for step in steps(version) {
        if let Step::Delete(k) = step {
            if !want.contains_key(&k) {
                assert_eq!(
                    db.get(&k).unwrap(),
                    None,
                    "{} was deleted",
                    common::show(&k)
                );
            }
        }
    }
    let got = dump(&db);
    assert!(
        got == want,
        "a scan finds {} pairs, expected {}",
        got.len(),
        want.len()
    );
    // The fixture's expired keys are reclaimed in the background after the
    // open; then `check`, which counts the entries stored, finds the rest.
    let expired = deadlines.keys().filter(|k| !want.contains_key(*k)).count() as u64;
    let waited = std::time::Instant::now();
    while db.stats().unwrap().expired_reclaimed < expired {
        assert!(
            waited.elapsed().as_secs() < 60,
            "expired keys not reclaimed"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(db.stats().unwrap().expired_reclaimed, expired);
    assert_healthy(&db, want.len());
    // It takes writes, and reopens with them.
    db.put(b"after", b"the fixture").unwrap();
    db.checkpoint().unwrap();
    db.close().unwrap();
    let identity = std::fs::read_to_string(dir.join("KIVI")).unwrap();
    assert!(
        identity.contains(&format!("\nformat {}\n", kivi_log::FORMAT_VERSION)),
        "a store of format {version} written to by this build says {identity:?}"
    );
    let db = Db::open(&dir, Options::default()).unwrap();
    assert_eq!(
        db.get(b"after").unwrap().as_deref(),
        Some(&b"the fixture"[..])
    );
    assert_healthy(&db, want.len() + 1);
}

/// A new format version needs its fixture: `FORMAT_VERSION` changed without
/// one, the test above would have nothing to read.
#[test]
fn the_format_version_has_a_fixture() {
    let dir = fixture_dir();
    assert!(
        dir.join("KIVI").is_file(),
        "no fixture for format {} at {}: write one (see the top of tests/format.rs)",
        kivi_log::FORMAT_VERSION,
        dir.display()
    );
    let identity = std::fs::read_to_string(dir.join("KIVI")).unwrap();
    assert!(
        identity.contains(&format!("\nformat {}\n", kivi_log::FORMAT_VERSION)),
        "the fixture in {} is of another format: {identity:?}",
        dir.display()
    );
}

/// Writes the fixture of the current format (see the top of this file).
#[test]
#[ignore = "writes the committed fixture; run by hand when the format changes"]
fn write_the_format_fixture() {
    let dir = fixture_dir();
    assert!(
        !dir.exists(),
        "{} exists: a fixture is never rewritten (delete it by hand if you must)",
        dir.display()
    );
    let version = kivi_log::FORMAT_VERSION;
    let db = Db::open(&dir, opts()).unwrap();
    for step in steps(version) {
        match step {
            Step::Put(k, v) => db.put(&k, &v).unwrap(),
            Step::PutUntil(k, v, d) => db
                .put_with_deadline(&k, &v, Some(kivi::Deadline::from_unix_millis(d)))
                .unwrap(),
            Step::Delete(k) => {
                db.delete(&k).unwrap();
            }
            Step::Batch(ops) => {
                let mut b = WriteBatch::new();
                for (k, v) in ops {
                    match v {
                        Some(v) => b.put(k, v).unwrap(),
                        None => b.delete(k).unwrap(),
                    };
                }
                db.write(b).unwrap();
            }
            Step::Checkpoint => db.checkpoint().unwrap(),
        }
    }
    let stats = db.stats().unwrap();
    let asked = steps(version)
        .iter()
        .filter(|s| matches!(s, Step::Checkpoint))
        .count();
    assert_eq!(stats.checkpoints, asked as u64, "the checkpoints asked for");
    if version >= 4 {
        assert!(stats.delta_pages > 0, "no delta pages in the fixture");
    }
    db.close().unwrap();
    // What the writer left: every key, with the last part only in the log.
    let db = Db::open(
        &dir,
        Options {
            read_only: true,
            ..Options::default()
        },
    )
    .unwrap();
    assert!(db.stats().unwrap().replayed_at_open > 0);
    assert!(dump(&db) == expected(version));
}
