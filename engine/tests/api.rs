//! The embedded API end to end on a local directory.

use kivi::{Db, Error, Options, WriteBatch, WriteOutcome};

fn open(dir: &std::path::Path) -> Db {
    Db::open(dir, Options::default()).unwrap()
}

#[test]
fn put_get_delete_survive_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    {
        let db = open(tmp.path());
        db.put(b"alpha", b"1").unwrap();
        db.put(b"beta", b"2").unwrap();
        db.delete(b"alpha").unwrap();
        assert_eq!(db.get(b"alpha").unwrap(), None);
        assert_eq!(db.get(b"beta").unwrap().as_deref(), Some(&b"2"[..]));
    }
    let db = open(tmp.path());
    assert_eq!(db.get(b"alpha").unwrap(), None);
    assert_eq!(db.get(b"beta").unwrap().as_deref(), Some(&b"2"[..]));
    assert_eq!(db.stats().unwrap().pairs, 1);
}

#[test]
fn ranges_in_both_directions() {
    let tmp = tempfile::tempdir().unwrap();
    let db = open(tmp.path());
    let mut b = WriteBatch::new();
    for i in 0..2000u32 {
        b.put(format!("k{i:05}").into_bytes(), i.to_string().into_bytes())
            .unwrap();
    }
    db.write(b).unwrap();
    fn keys(it: impl Iterator<Item = kivi::Result<(Vec<u8>, Vec<u8>)>>) -> Vec<String> {
        it.map(|p| String::from_utf8(p.unwrap().0).unwrap())
            .collect()
    }
    let fwd = keys(db.range(b"k00100".as_slice()..b"k00105".as_slice()));
    assert_eq!(fwd, ["k00100", "k00101", "k00102", "k00103", "k00104"]);
    let rev = keys(db.range(b"k00100".as_slice()..=b"k00103".as_slice()).rev());
    assert_eq!(rev, ["k00103", "k00102", "k00101", "k00100"]);
    assert_eq!(db.iter().count(), 2000);
    assert_eq!(db.iter().rev().count(), 2000);
    // Both ends at once meet without overlap.
    let mut it = db.range(b"k00010".as_slice()..b"k00014".as_slice());
    assert_eq!(it.next().unwrap().unwrap().0, b"k00010");
    assert_eq!(it.next_back().unwrap().unwrap().0, b"k00013");
    assert_eq!(it.next().unwrap().unwrap().0, b"k00011");
    assert_eq!(it.next_back().unwrap().unwrap().0, b"k00012");
    assert!(it.next().is_none() && it.next_back().is_none());
}

#[test]
fn snapshots_do_not_see_later_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let db = open(tmp.path());
    db.put(b"a", b"old").unwrap();
    let snap = db.snapshot();
    db.put(b"a", b"new").unwrap();
    db.put(b"b", b"x").unwrap();
    assert_eq!(snap.get(b"a").unwrap().as_deref(), Some(&b"old"[..]));
    assert_eq!(snap.get(b"b").unwrap(), None);
    assert_eq!(snap.iter().count(), 1);
    assert_eq!(db.get(b"a").unwrap().as_deref(), Some(&b"new"[..]));
}

#[test]
fn conditional_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let db = open(tmp.path());
    assert!(db.insert_if_absent(b"k", b"1").unwrap());
    assert!(!db.insert_if_absent(b"k", b"2").unwrap());
    assert!(db.update_if_present(b"k", b"3").unwrap());
    assert!(!db.update_if_present(b"absent", b"3").unwrap());
    assert!(!db.compare_and_swap(b"k", b"1", b"4").unwrap());
    assert!(db.compare_and_swap(b"k", b"3", b"4").unwrap());
    assert!(!db.compare_and_delete(b"k", b"3").unwrap());
    assert!(db.compare_and_delete(b"k", b"4").unwrap());
    assert_eq!(db.get(b"k").unwrap(), None);
}

#[test]
fn a_failed_condition_applies_nothing_of_its_batch() {
    let tmp = tempfile::tempdir().unwrap();
    let db = open(tmp.path());
    db.put(b"x", b"1").unwrap();
    let mut b = WriteBatch::new();
    b.put(b"y".to_vec(), b"2".to_vec()).unwrap();
    b.compare_and_swap(b"x".to_vec(), b"wrong".to_vec(), b"3".to_vec())
        .unwrap();
    assert_eq!(
        db.write(b).unwrap(),
        WriteOutcome::ConditionFailed { op: 1 }
    );
    assert_eq!(db.get(b"y").unwrap(), None);
    assert_eq!(db.get(b"x").unwrap().as_deref(), Some(&b"1"[..]));
    // Conditions see earlier operations of the same batch.
    let mut b = WriteBatch::new();
    b.put(b"z".to_vec(), b"a".to_vec()).unwrap();
    b.compare_and_swap(b"z".to_vec(), b"a".to_vec(), b"b".to_vec())
        .unwrap();
    assert_eq!(db.write(b).unwrap(), WriteOutcome::Applied);
    assert_eq!(db.get(b"z").unwrap().as_deref(), Some(&b"b"[..]));
}

#[test]
fn large_values_round_trip_and_survive_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let big: Vec<u8> = (0..5_000_000u32).map(|i| (i % 251) as u8).collect();
    {
        let db = open(tmp.path());
        db.put(b"big", &big).unwrap();
        db.put(b"small", b"s").unwrap();
        db.checkpoint().unwrap();
        assert_eq!(db.get(b"big").unwrap().unwrap(), big);
    }
    let db = open(tmp.path());
    assert_eq!(db.get(b"big").unwrap().unwrap(), big);
    let report = db.check().unwrap();
    assert!(report.is_healthy(), "{:?}", report.problems);
    assert_eq!(report.blobs, 1);
}

#[test]
fn bad_input_gets_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let db = open(tmp.path());
    db.put(b"keep", b"me").unwrap();
    assert!(matches!(
        db.put(&vec![0; 4097], b"v"),
        Err(Error::KeyTooLarge {
            len: 4097,
            max: 4096
        })
    ));
    assert!(matches!(
        db.put(b"k", &vec![0; (16 << 20) + 1]),
        Err(Error::ValueTooLarge { .. })
    ));
    db.put(&vec![7; 4096], &vec![1; 16 << 20]).unwrap();
    assert_eq!(db.get(b"keep").unwrap().as_deref(), Some(&b"me"[..]));
}

#[test]
fn a_directory_that_is_not_a_store_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("notes.txt"), b"hello").unwrap();
    let err = Db::open(tmp.path(), Options::default()).unwrap_err();
    assert!(matches!(err, Error::NotAStore { .. }), "{err}");
    assert!(err.to_string().contains("no KIVI file"), "{err}");
    let file = tmp.path().join("notes.txt");
    let err = Db::open(&file, Options::default()).unwrap_err();
    assert!(err.to_string().contains("is a file"), "{err}");
}

#[test]
fn check_passes_on_a_healthy_store() {
    let tmp = tempfile::tempdir().unwrap();
    let db = open(tmp.path());
    for round in 0..5u32 {
        let mut b = WriteBatch::new();
        for i in 0..3000u32 {
            let k = (i * 7919 + round) % 10_000;
            b.put(format!("key{k:06}").into_bytes(), vec![round as u8; 30])
                .unwrap();
        }
        db.write(b).unwrap();
        db.checkpoint().unwrap();
    }
    let r = db.check().unwrap();
    assert!(r.is_healthy(), "{:?}", r.problems);
    assert_eq!(r.pairs, db.stats().unwrap().pairs);
    assert!(r.pages > 10);
}

#[test]
fn zero_copy_scans_match_the_copying_iterator() {
    let tmp = tempfile::tempdir().unwrap();
    let db = open(tmp.path());
    let mut b = WriteBatch::new();
    for i in 0..3000u32 {
        let value = if i % 500 == 0 {
            vec![i as u8; 3000]
        } else {
            i.to_string().into_bytes()
        };
        b.put(format!("k{i:05}").into_bytes(), value).unwrap();
    }
    db.write(b).unwrap();
    db.checkpoint().unwrap();
    for (start, end) in [
        (b"k00000".as_slice(), b"k03000".as_slice()),
        (b"k00499", b"k01501"),
        (b"k02999", b"k02999"),
    ] {
        let want: Vec<(Vec<u8>, Vec<u8>)> = db.range(start..end).map(|p| p.unwrap()).collect();
        let mut got = Vec::new();
        let mut scan = db.scan(start..end);
        while let Some((k, v)) = scan.next().unwrap() {
            got.push((k.to_vec(), v.to_vec()));
        }
        assert_eq!(got, want, "forward {start:?}..{end:?}");
        let mut back = Vec::new();
        let mut scan = db.scan_rev(start..end);
        while let Some((k, v)) = scan.next().unwrap() {
            back.push((k.to_vec(), v.to_vec()));
        }
        back.reverse();
        assert_eq!(back, want, "backward {start:?}..{end:?}");
    }
    // Inclusive and exclusive bounds.
    let keys = |mut s: kivi::Scan| {
        let mut out = Vec::new();
        while let Some((k, _)) = s.next().unwrap() {
            out.push(String::from_utf8(k.to_vec()).unwrap());
        }
        out
    };
    assert_eq!(
        keys(db.scan(b"k00010".as_slice()..=b"k00012".as_slice())),
        ["k00010", "k00011", "k00012"]
    );
    assert_eq!(
        keys(db.scan_rev(b"k00010".as_slice()..=b"k00012".as_slice())),
        ["k00012", "k00011", "k00010"]
    );
    assert_eq!(
        keys(db.scan::<&[u8], _>((
            std::ops::Bound::Excluded(b"k02997".as_slice()),
            std::ops::Bound::Unbounded
        ))),
        ["k02998", "k02999"]
    );
}

#[test]
fn a_page_segment_gone_missing_is_reported_as_corruption() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = Options {
        segment_bytes: 64 << 10,
        ..Options::default()
    };
    {
        let db = Db::open(tmp.path(), opts.clone()).unwrap();
        let mut b = WriteBatch::new();
        for i in 0..5000u32 {
            b.put(format!("key{i:06}").into_bytes(), vec![i as u8; 60])
                .unwrap();
        }
        db.write(b).unwrap();
        db.checkpoint().unwrap();
    }
    // Each page segment is removed in turn from a copy of the store. Which
    // pages a segment holds depends on how the checkpoint laid them out, so
    // the test does not guess: every copy must open and answer correctly or
    // report corruption naming the missing segment (never a wrong or absent
    // value), and some copy must be missing a segment the tree needs.
    let page_segments: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .filter(|p| std::fs::read(p).unwrap()[9 + 8 + 4 + 16 + 8] == 2)
        .collect();
    assert!(page_segments.len() >= 2, "{page_segments:?}");
    let mut noticed = 0;
    for missing in &page_segments {
        let copy = tempfile::tempdir().unwrap();
        for e in std::fs::read_dir(tmp.path()).unwrap() {
            let from = e.unwrap().path();
            if from != *missing {
                std::fs::copy(&from, copy.path().join(from.file_name().unwrap())).unwrap();
            }
        }
        let missing_error = |err: &Error| {
            assert!(err.is_corruption(), "{}: {err}", missing.display());
            assert!(err.to_string().contains("does not exist"), "{err}");
        };
        let db = match Db::open(copy.path(), opts.clone()) {
            Ok(db) => db,
            Err(err) => {
                missing_error(&err);
                noticed += 1;
                continue;
            }
        };
        let mut failed = false;
        for i in 0..5000u32 {
            match db.get(format!("key{i:06}").as_bytes()) {
                Ok(v) => assert_eq!(v, Some(vec![i as u8; 60]), "key{i:06}"),
                Err(err) => {
                    missing_error(&err);
                    failed = true;
                }
            }
        }
        if failed {
            noticed += 1;
            assert!(!db.check().unwrap().is_healthy());
        }
    }
    assert!(noticed >= 1, "no page segment was needed by the tree");
}

/// Writes `rounds` batches into a simulated store, with a checkpoint after
/// `checkpoint_after` of them, and returns the store and the offsets of the
/// commit records in the first commit segment.
fn commits_around_a_checkpoint(
    checkpoint_after: u32,
    rounds: u32,
) -> (kivi_storage::SimStorage, Vec<(u64, usize)>) {
    use kivi::storage::Storage;
    use kivi_storage::SimStorage;
    let sim = SimStorage::new();
    let opts = Options {
        checkpoint_bytes: 1 << 30,
        ..Options::default()
    };
    let db = Db::open_with_storage(std::sync::Arc::new(sim.clone()), opts).unwrap();
    for round in 0..rounds {
        let mut b = WriteBatch::new();
        for i in 0..50u32 {
            b.put(
                format!("r{round:02}k{i:03}").into_bytes(),
                vec![round as u8; 30],
            )
            .unwrap();
        }
        db.write(b).unwrap();
        if round + 1 == checkpoint_after {
            db.checkpoint().unwrap();
        }
    }
    drop(db);
    // Commit records (type 2) of the oldest segment, found by walking its records.
    let first = sim.list_segments().unwrap()[0];
    let bytes = sim.segment_bytes(first).unwrap();
    let mut records = Vec::new();
    let mut at = 62usize;
    while at + 9 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
        if bytes[at + 8] == 2 {
            records.push((first, at));
        }
        at += 9 + len;
    }
    (sim, records)
}

#[test]
fn damage_a_checkpoint_covers_is_reported_and_the_store_still_opens() {
    use std::sync::Arc;
    let (sim, commits) = commits_around_a_checkpoint(6, 6);
    assert!(commits.len() >= 6, "{commits:?}");
    // Damage the second commit record: the checkpoint includes it.
    let (seg, at) = commits[1];
    sim.corrupt(seg, at + 20, b"XX");
    let db = Db::open_with_storage(Arc::new(sim.clone()), Options::default()).unwrap();
    for round in 0..6u32 {
        for i in 0..50u32 {
            let k = format!("r{round:02}k{i:03}").into_bytes();
            assert_eq!(db.get(&k).unwrap(), Some(vec![round as u8; 30]));
        }
    }
    let damage = db.stats().unwrap().damage_at_open;
    assert_eq!(damage.len(), 1, "{damage:?}");
    assert!(damage[0].contains(&format!("offset {at}")), "{damage:?}");
    assert!(
        !db.check().unwrap().is_healthy(),
        "check must report the damage too"
    );
}

#[test]
fn damage_to_a_commit_no_checkpoint_covers_still_refuses_to_open() {
    use std::sync::Arc;
    // Checkpoint after 3 batches; damage the 5th commit, which only the log holds.
    let (sim, commits) = commits_around_a_checkpoint(3, 6);
    let (seg, at) = commits[4];
    sim.corrupt(seg, at + 20, b"XX");
    let err = Db::open_with_storage(Arc::new(sim), Options::default()).unwrap_err();
    assert!(err.is_corruption(), "{err}");
    assert!(err.to_string().contains(&format!("offset {at}")), "{err}");
}

/// `write_each`: every batch decided on its own, in the order given, as if
/// written one after another, and all of them durable on return; more
/// batches than the commit queue holds at once (65,536) take the path
/// that settles queued ones before queuing more; several threads at once
/// each keep their own order.
#[test]
fn write_each_applies_batches_in_order_each_on_its_own() {
    let tmp = tempfile::tempdir().unwrap();
    let db = open(tmp.path());
    let one = |f: &dyn Fn(&mut WriteBatch)| {
        let mut b = WriteBatch::new();
        f(&mut b);
        b
    };
    let out = db.write_each(vec![
        one(&|b| {
            b.put(b"k".to_vec(), b"1".to_vec()).unwrap();
        }),
        // Sees the put before it, so it applies.
        one(&|b| {
            b.compare_and_swap(b"k".to_vec(), b"1".to_vec(), b"2".to_vec())
                .unwrap();
        }),
        // Sees "2", so it fails, and only it.
        one(&|b| {
            b.compare_and_swap(b"k".to_vec(), b"1".to_vec(), b"3".to_vec())
                .unwrap();
        }),
        WriteBatch::new(),
        one(&|b| {
            b.insert_if_absent(b"other".to_vec(), b"x".to_vec())
                .unwrap();
        }),
    ]);
    let out: Vec<_> = out.into_iter().map(|r| r.unwrap()).collect();
    assert_eq!(
        out,
        vec![
            WriteOutcome::Applied,
            WriteOutcome::Applied,
            WriteOutcome::ConditionFailed { op: 0 },
            WriteOutcome::Applied,
            WriteOutcome::Applied,
        ]
    );
    assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&b"2"[..]));

    // Past the queue's bound, from three threads at once: each thread's
    // increments of its own counter must apply in order, so each CAS from
    // i to i + 1 succeeds.
    const N: u32 = 70_000;
    std::thread::scope(|s| {
        for t in 0..3u8 {
            let db = &db;
            s.spawn(move || {
                let key = vec![b'c', t];
                let mut batches = vec![one(&|b| {
                    b.put(key.clone(), 0u32.to_be_bytes().to_vec()).unwrap();
                })];
                for i in 0..N {
                    batches.push(one(&|b| {
                        b.compare_and_swap(
                            key.clone(),
                            i.to_be_bytes().to_vec(),
                            (i + 1).to_be_bytes().to_vec(),
                        )
                        .unwrap();
                    }));
                }
                for (i, r) in db.write_each(batches).into_iter().enumerate() {
                    assert_eq!(r.unwrap(), WriteOutcome::Applied, "thread {t}, batch {i}");
                }
            });
        }
    });
    drop(db);
    let db = open(tmp.path());
    for t in 0..3u8 {
        assert_eq!(
            db.get(&[b'c', t]).unwrap().as_deref(),
            Some(&N.to_be_bytes()[..])
        );
    }
}

#[test]
fn scattered_writes_are_buffered_and_crowded_ones_go_to_the_tree() {
    let tmp = tempfile::tempdir().unwrap();
    let db = open(tmp.path());
    let key = |i: u32| format!("key{i:08}").into_bytes();
    let load = |from: u32, to: u32, value: &[u8]| {
        let mut b = WriteBatch::new();
        for i in from..to {
            b.put(key(i), value.to_vec()).unwrap();
        }
        db.write(b).unwrap();
    };
    // A load in key order goes to the tree.
    for c in 0..20 {
        load(c * 1000, (c + 1) * 1000, b"loaded");
    }
    let st = db.stats().unwrap();
    assert_eq!((st.buffered_keys, st.buffer_merges), (0, 0));
    // A rewrite of a run of neighbours does too: many keys per leaf.
    load(5000, 6000, b"rewritten");
    let st = db.stats().unwrap();
    assert_eq!((st.buffered_keys, st.buffer_merges), (0, 0));
    // Keys spread over the whole store, one per leaf, are buffered.
    let mut b = WriteBatch::new();
    for i in (0..20_000).step_by(997) {
        b.put(key(i), b"scattered".to_vec()).unwrap();
    }
    db.write(b).unwrap();
    let st = db.stats().unwrap();
    // Buffered, unless writes paused long enough (20 ms) for the
    // background to merge them already.
    assert!(
        (st.buffered_keys, st.buffer_merges) == (21, 0)
            || (st.buffered_keys, st.buffer_merges) == (0, 1),
        "{st:?}"
    );
    assert_eq!(st.pairs, 20_000);
    // Reads and scans see the buffered writes over the tree.
    assert_eq!(
        db.get(&key(997)).unwrap().as_deref(),
        Some(&b"scattered"[..])
    );
    assert_eq!(
        db.get(&key(5500)).unwrap().as_deref(),
        Some(&b"rewritten"[..])
    );
    assert_eq!(db.get(&key(1)).unwrap().as_deref(), Some(&b"loaded"[..]));
    let scattered = db
        .iter()
        .filter(|r| r.as_ref().unwrap().1 == b"scattered")
        .count();
    assert_eq!(scattered, 21);
    // An asked-for checkpoint merges the buffer first.
    db.checkpoint().unwrap();
    let st = db.stats().unwrap();
    assert_eq!((st.buffered_keys, st.pairs), (0, 20_000));
    assert_eq!(
        db.get(&key(997)).unwrap().as_deref(),
        Some(&b"scattered"[..])
    );
}

#[test]
fn a_small_buffer_is_merged_before_a_crowded_group_goes_to_the_tree() {
    let tmp = tempfile::tempdir().unwrap();
    let db = open(tmp.path());
    let key = |i: u32| format!("key{i:08}").into_bytes();
    let write = |keys: &mut dyn Iterator<Item = u32>, value: &[u8]| {
        let mut b = WriteBatch::new();
        for i in keys {
            b.put(key(i), value.to_vec()).unwrap();
        }
        db.write(b).unwrap();
    };
    for c in 0..20 {
        write(&mut (c * 1000..(c + 1) * 1000), b"loaded");
    }
    // A few scattered writes are buffered (one of them, 8973, falls in the
    // run rewritten next)...
    write(&mut (0..20_000).step_by(997), b"scattered");
    let before = db.stats().unwrap();
    // ...and a rewrite of a run of neighbours, larger than the buffer,
    // merges them into the tree first and goes there itself: nothing is
    // left buffered. (Unless the background merged the buffer in between,
    // after 20 ms without writes; the outcome is the same.)
    write(&mut (8000..9000), b"crowded");
    let st = db.stats().unwrap();
    assert_eq!(st.buffered_keys, 0, "{before:?} then {st:?}");
    assert_eq!(st.buffer_merges, 1, "{st:?}");
    assert_eq!(st.pairs, 20_000);
    // The later write wins where both wrote; the rest is as written.
    assert_eq!(
        db.get(&key(8973)).unwrap().as_deref(),
        Some(&b"crowded"[..])
    );
    assert_eq!(
        db.get(&key(8500)).unwrap().as_deref(),
        Some(&b"crowded"[..])
    );
    assert_eq!(
        db.get(&key(997)).unwrap().as_deref(),
        Some(&b"scattered"[..])
    );
    assert_eq!(db.get(&key(1)).unwrap().as_deref(), Some(&b"loaded"[..]));
    drop(db);
    let db = open(tmp.path());
    assert_eq!(
        db.get(&key(8973)).unwrap().as_deref(),
        Some(&b"crowded"[..])
    );
    assert_eq!(
        db.get(&key(997)).unwrap().as_deref(),
        Some(&b"scattered"[..])
    );
}
