//! Bad input and a hostile environment get clear errors, never a panic,
//! and never cost data stored before:
//! - keys over 4 KiB, values over 16 MiB, batches over 64 MiB, in every
//!   kind of write; out-of-range options;
//! - a directory that is not a store, a file where the directory should be,
//!   a missing store with `create_if_missing: false`, a second writer;
//! - a read-only directory: opening for writing fails clearly, opening
//!   read-only works, reads work, writes say `Error::ReadOnly`. As root
//!   (where permissions do not stop writes) the test runs the checks in a
//!   child process (`kivi-test-child read-only-checks`) as user `nobody`
//!   to get a directory it really cannot write;
//! - a full disk (ENOSPC) and a failing disk (EIO): the failing writes say
//!   so (`is_full()` for ENOSPC), reads keep working, nothing stored before
//!   is lost, and once the disk is healed writes work again.

mod common;

use common::child::{assert_contents, data, listing, read_only_checks, RO_CHILD_DONE};
use common::{assert_healthy, dump, Model};
use kivi::limits::{MAX_BATCH_BYTES, MAX_KEY_LEN, MAX_VALUE_LEN};
use kivi::{Db, Error, Options, WriteBatch};
use kivi_storage::{Fault, SimOp, SimStorage};
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

fn small() -> Options {
    common::small_opts()
}

fn fill(db: &Db, m: &Model) {
    for chunk in m.iter().collect::<Vec<_>>().chunks(50) {
        let mut b = WriteBatch::new();
        for (k, v) in chunk {
            b.put(k.to_vec(), v.to_vec()).unwrap();
        }
        db.write(b).unwrap();
    }
}

#[test]
fn oversized_keys_values_and_batches_are_refused_and_nothing_is_lost() {
    let tmp = tempfile::tempdir().unwrap();
    let mut m = data();
    let db = Db::open(tmp.path(), small()).unwrap();
    fill(&db, &m);
    let big_key = vec![b'k'; MAX_KEY_LEN + 1];
    let big_value = vec![b'v'; MAX_VALUE_LEN + 1];
    let key_err = |r: kivi::Result<()>, what: &str| match r {
        Err(Error::KeyTooLarge { len, max }) => {
            assert_eq!((len, max), (MAX_KEY_LEN + 1, MAX_KEY_LEN), "{what}");
        }
        other => panic!("{what}: expected KeyTooLarge, got {other:?}"),
    };
    let value_err = |r: kivi::Result<()>, what: &str| match r {
        Err(Error::ValueTooLarge { len, max }) => {
            assert_eq!((len, max), (MAX_VALUE_LEN + 1, MAX_VALUE_LEN), "{what}");
            let msg = Error::ValueTooLarge { len, max }.to_string();
            assert!(msg.contains(&len.to_string()) && msg.contains(&max.to_string()));
        }
        other => panic!("{what}: expected ValueTooLarge, got {other:?}"),
    };
    let unit = |r: kivi::Result<bool>| r.map(|_| ());
    key_err(db.put(&big_key, b"v"), "put");
    key_err(db.delete(&big_key), "delete");
    key_err(
        unit(db.insert_if_absent(&big_key, b"v")),
        "insert_if_absent",
    );
    key_err(
        unit(db.update_if_present(&big_key, b"v")),
        "update_if_present",
    );
    key_err(
        unit(db.compare_and_swap(&big_key, b"a", b"b")),
        "compare_and_swap",
    );
    key_err(
        unit(db.compare_and_delete(&big_key, b"a")),
        "compare_and_delete",
    );
    value_err(db.put(b"key00001", &big_value), "put");
    value_err(
        unit(db.insert_if_absent(b"new", &big_value)),
        "insert_if_absent",
    );
    value_err(
        unit(db.update_if_present(b"key00001", &big_value)),
        "update_if_present",
    );
    value_err(
        unit(db.compare_and_swap(b"key00001", &big_value, b"x")),
        "compare_and_swap expected",
    );
    value_err(
        unit(db.compare_and_swap(b"key00001", b"x", &big_value)),
        "compare_and_swap value",
    );
    value_err(
        unit(db.compare_and_delete(b"key00001", &big_value)),
        "compare_and_delete",
    );
    let mut b = WriteBatch::new();
    b.put(b"ok".to_vec(), b"1".to_vec()).unwrap();
    key_err(
        b.put(big_key.clone(), b"v".to_vec()).map(|_| ()),
        "batch put",
    );
    value_err(
        b.put(b"k".to_vec(), big_value.clone()).map(|_| ()),
        "batch put",
    );
    assert_eq!(b.len(), 1, "refused operations must not join the batch");
    // A batch over the byte limit is refused when it grows too large.
    let mut huge = WriteBatch::new();
    let mut refused = false;
    for i in 0..(MAX_BATCH_BYTES / MAX_VALUE_LEN + 1) {
        match huge.put(format!("huge{i}").into_bytes(), vec![0u8; MAX_VALUE_LEN]) {
            Ok(_) => {}
            Err(Error::BatchTooLarge { bytes, max }) => {
                assert!(bytes > max && max == MAX_BATCH_BYTES);
                refused = true;
            }
            Err(e) => panic!("expected BatchTooLarge, got {e:?}"),
        }
    }
    assert!(refused, "a batch over {MAX_BATCH_BYTES} bytes was accepted");
    drop(huge);
    // Reads with oversized keys and bounds: answers, not panics.
    match db.get(&big_key) {
        Ok(None) | Err(Error::KeyTooLarge { .. }) => {}
        other => panic!("get of an oversized key: {other:?}"),
    }
    let after: Vec<_> = db
        .range(big_key.as_slice()..)
        .map(|r| r.unwrap().0)
        .collect();
    let want: Vec<_> = m
        .keys()
        .filter(|k| k.as_slice() >= big_key.as_slice())
        .cloned()
        .collect();
    assert_eq!(after, want, "range from an oversized bound");
    // The batch with the good operation still works; the limits themselves are allowed.
    db.write(b).unwrap();
    m.insert(b"ok".to_vec(), b"1".to_vec());
    let max_key = vec![b'z'; MAX_KEY_LEN];
    let max_value: Vec<u8> = (0..MAX_VALUE_LEN).map(|i| (i % 253) as u8).collect();
    db.put(&max_key, &max_value).unwrap();
    m.insert(max_key, max_value);
    assert_contents(&db, &m, "after the refused writes");
    drop(db);
    let db = Db::open(tmp.path(), small()).unwrap();
    assert_contents(&db, &m, "after reopening");
    assert_healthy(&db, m.len());
}

#[test]
fn invalid_options_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = [
        Options {
            page_size: 100,
            ..Default::default()
        },
        Options {
            page_size: 1 << 20,
            ..Default::default()
        },
        Options {
            segment_bytes: 1000,
            ..Default::default()
        },
        Options {
            cache_bytes: 10,
            ..Default::default()
        },
        Options {
            checkpoint_bytes: 0,
            ..Default::default()
        },
        Options {
            write_buffer_bytes: 1000,
            ..Default::default()
        },
    ];
    for o in bad {
        match Db::open(tmp.path().join("s"), o.clone()) {
            Err(Error::InvalidOption(msg)) => assert!(!msg.is_empty()),
            other => panic!("{o:?}: expected InvalidOption, got {other:?}"),
        }
        match Db::open_with_storage(Arc::new(SimStorage::new()), o.clone()) {
            Err(Error::InvalidOption(_)) => {}
            other => panic!("{o:?}: expected InvalidOption, got {other:?}"),
        }
    }
}

#[test]
fn a_directory_that_is_not_a_store_is_refused_and_left_alone() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("notes.txt"), b"my notes").unwrap();
    std::fs::create_dir(tmp.path().join("photos")).unwrap();
    let before = listing(tmp.path());
    for read_only in [false, true] {
        let opts = Options {
            read_only,
            ..Default::default()
        };
        match Db::open(tmp.path(), opts) {
            Err(e @ Error::NotAStore { .. }) => {
                let msg = e.to_string();
                assert!(
                    msg.contains(&tmp.path().display().to_string()),
                    "the error must name the directory: {msg}"
                );
            }
            other => panic!("read_only={read_only}: expected NotAStore, got {other:?}"),
        }
        assert_eq!(
            std::fs::read(tmp.path().join("notes.txt")).unwrap(),
            b"my notes"
        );
        assert_eq!(
            listing(tmp.path()),
            before,
            "read_only={read_only}: opening a directory that is not a store changed it"
        );
    }
}

#[test]
fn a_file_where_the_directory_should_be() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("data.db");
    std::fs::write(&file, b"not a directory").unwrap();
    for read_only in [false, true] {
        let opts = Options {
            read_only,
            ..Default::default()
        };
        match Db::open(&file, opts.clone()) {
            Err(e @ Error::NotAStore { .. }) => {
                let msg = e.to_string();
                assert!(msg.contains("data.db") && msg.contains("file"), "{msg}");
            }
            other => panic!("read_only={read_only}: expected NotAStore, got {other:?}"),
        }
        // Below a file: an error that names the path, not a panic.
        let below = file.join("store");
        match Db::open(&below, opts) {
            Err(e) => assert!(e.to_string().contains("data.db"), "{e}"),
            Ok(_) => panic!("opened a store below a file"),
        }
        assert_eq!(std::fs::read(&file).unwrap(), b"not a directory");
    }
}

#[test]
fn a_missing_store_is_not_created_when_not_asked_to() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("nothing-here");
    for (what, opts) in [
        (
            "create_if_missing: false",
            Options {
                create_if_missing: false,
                ..Default::default()
            },
        ),
        (
            "read_only",
            Options {
                read_only: true,
                ..Default::default()
            },
        ),
    ] {
        match Db::open(&path, opts) {
            Err(Error::NotAStore { .. }) => {}
            other => panic!("{what}: expected NotAStore, got {other:?}"),
        }
        assert!(
            !path.exists(),
            "{what}: opening a missing store created {}",
            path.display()
        );
    }
    // An empty directory is not a store either, when not asked to create one.
    std::fs::create_dir(&path).unwrap();
    let opts = Options {
        create_if_missing: false,
        ..Default::default()
    };
    assert!(matches!(
        Db::open(&path, opts),
        Err(Error::NotAStore { .. })
    ));
}

#[test]
fn a_second_writer_is_refused_clearly() {
    let tmp = tempfile::tempdir().unwrap();
    let db = Db::open(tmp.path(), Options::default()).unwrap();
    db.put(b"a", b"1").unwrap();
    let err = Db::open(tmp.path(), Options::default()).unwrap_err();
    assert!(
        err.to_string().contains("in use by another process"),
        "{err}"
    );
    let ro = Options {
        read_only: true,
        ..Default::default()
    };
    // A reader opens beside the writer (kivi check and stats on a served
    // store) and sees what was committed.
    let reader = Db::open(tmp.path(), ro).unwrap();
    assert_eq!(reader.get(b"a").unwrap().as_deref(), Some(&b"1"[..]));
    assert!(matches!(
        reader.put(b"b", b"2"),
        Err(Error::ReadOnly) | Err(Error::Io(_))
    ));
    drop(reader);
    assert_eq!(db.get(b"a").unwrap().as_deref(), Some(&b"1"[..]));
}

// ---------------------------------------------------------------------------
// A read-only directory.
// ---------------------------------------------------------------------------

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn a_read_only_directory_opens_read_only() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    {
        let db = Db::open(&dir, small()).unwrap();
        fill(&db, &data());
        db.checkpoint().unwrap();
    }
    // Readable by everyone, writable by no one (but root).
    for e in std::fs::read_dir(&dir).unwrap() {
        chmod(&e.unwrap().path(), 0o444);
    }
    chmod(&dir, 0o555);
    chmod(tmp.path(), 0o755);
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if root {
        use std::os::unix::process::CommandExt;
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_kivi-test-child"))
            .arg("read-only-checks")
            .arg(&dir)
            .uid(65534)
            .gid(65534)
            .output()
            .expect("running the child as nobody failed");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains(RO_CHILD_DONE),
            "the read-only checks failed as user nobody ({}):\nstdout:\n{stdout}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    } else {
        read_only_checks(&dir);
    }
    // Writable again: everything is still there, and writes work.
    chmod(&dir, 0o755);
    for e in std::fs::read_dir(&dir).unwrap() {
        chmod(&e.unwrap().path(), 0o644);
    }
    let db = Db::open(&dir, small()).unwrap();
    assert_contents(&db, &data(), "writable again");
    db.put(b"after", b"ro").unwrap();
    assert_healthy(&db, data().len() + 1);
}

// ---------------------------------------------------------------------------
// A full disk, a failing disk.
// ---------------------------------------------------------------------------

fn sim_db(sim: &SimStorage) -> Db {
    Db::open_with_storage(Arc::new(sim.clone()), small()).unwrap()
}

/// After the disk is healed: writes work, everything acknowledged is there,
/// in the running store, after a clean reopen and after a crash.
fn heal_and_verify(sim: SimStorage, db: Db, mut m: Model, what: &str) {
    sim.heal();
    for i in 0..20u32 {
        let k = format!("healed{i:03}").into_bytes();
        let v = vec![i as u8; 50 + i as usize * 100];
        db.put(&k, &v)
            .unwrap_or_else(|e| panic!("{what}: a write after heal() failed: {e}"));
        m.insert(k, v);
    }
    db.checkpoint()
        .unwrap_or_else(|e| panic!("{what}: a checkpoint after heal() failed: {e}"));
    assert_contents(&db, &m, &format!("{what}: after heal"));
    let r = db.check().unwrap();
    assert!(
        r.is_healthy(),
        "{what}: check after heal() finds problems: {:?}",
        r.problems
    );
    drop(db);
    let db = sim_db(&sim);
    assert_contents(&db, &m, &format!("{what}: reopened"));
    db.put(b"one more", b"x").unwrap();
    m.insert(b"one more".to_vec(), b"x".to_vec());
    let crashed = sim.crash(&mut StdRng::seed_from_u64(7));
    drop(db);
    let db = sim_db(&crashed);
    assert_contents(&db, &m, &format!("{what}: after a crash"));
    let r = db.check().unwrap();
    assert!(
        r.is_healthy() && r.pairs == m.len() as u64,
        "{what}: check after the crash: {} pairs, problems {:?}",
        r.pairs,
        r.problems
    );
}

/// Runs every sub-case, even after one fails, and fails with all of them.
fn sub_cases<T: std::fmt::Debug>(test: &str, cases: Vec<T>, f: impl Fn(&T)) {
    let mut failures = Vec::new();
    for c in &cases {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(c)));
        if let Err(p) = r {
            failures.push(format!("{c:?}: {}", common::panic_message(p.as_ref())));
        }
    }
    assert!(
        failures.is_empty(),
        "{test}: {} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn a_full_disk_gives_clear_errors_and_keeps_data() {
    let test = "a_full_disk_gives_clear_errors_and_keeps_data";
    sub_cases(test, vec![0u64, 100, 5_000, 40_000, 150_000], |&extra| {
        let what = format!("quota of {extra} bytes over the data");
        let sim = SimStorage::new();
        let db = sim_db(&sim);
        let mut m = data();
        fill(&db, &m);
        sim.set_quota(Some(sim.total_bytes() + extra));
        let mut failures = 0;
        for i in 0..400u32 {
            let k = format!("more{i:04}").into_bytes();
            let v = vec![7u8; 10 + (i as usize * 37) % 2000];
            match db.put(&k, &v) {
                Ok(()) => {
                    m.insert(k, v);
                }
                Err(e) => {
                    assert!(e.is_full(), "{what}: expected a full-disk error, got {e:?}");
                    let msg = e.to_string();
                    assert!(
                        msg.contains(".seg") && (msg.contains("ENOSPC") || msg.contains("space")),
                        "{what}: the error should name the file and say the disk is full: {msg}"
                    );
                    failures += 1;
                    // Reads keep working, and show exactly the acknowledged data.
                    if failures % 50 == 1 {
                        assert_eq!(
                            db.get(b"key00100").unwrap(),
                            m.get(&b"key00100"[..]).cloned()
                        );
                        assert_contents(&db, &m, &format!("{what}: disk full"));
                    }
                }
            }
        }
        assert!(failures > 0, "{what}: the quota never bit");
        match db.checkpoint() {
            Ok(()) => {}
            Err(e) => assert!(e.is_full(), "{what}: checkpoint: {e:?}"),
        }
        assert_contents(&db, &m, &format!("{what}: disk full"));
        heal_and_verify(sim, db, m, &what);
    });
}

#[test]
fn a_failing_disk_gives_clear_errors_and_keeps_data() {
    let mut cases = Vec::new();
    for (op, word) in [
        (Some(SimOp::Sync), "fdatasync"),
        (Some(SimOp::Append), "append"),
        (Some(SimOp::Create), "create"),
        (None, ""),
    ] {
        let skips: &[u64] = if op == Some(SimOp::Create) {
            &[0, 1]
        } else {
            &[0, 3, 17]
        };
        for &skip in skips {
            cases.push((op, word, skip));
        }
    }
    let test = "a_failing_disk_gives_clear_errors_and_keeps_data";
    sub_cases(test, cases, |&(op, word, skip)| {
        {
            let what = format!("sticky EIO on {op:?} after {skip} calls");
            let sim = SimStorage::new();
            let db = sim_db(&sim);
            let m = data();
            fill(&db, &m);
            db.put(b"roll", &vec![1u8; 70_000]).unwrap(); // the next write starts a segment
            let mut m = m;
            m.insert(b"roll".to_vec(), vec![1u8; 70_000]);
            sim.inject(op, skip, Fault::Io, true);
            let mut failures = 0;
            // Until a few writes have failed: which call a background
            // checkpoint makes first (and so when the fault fires) depends
            // on timing.
            for i in 0..400u32 {
                if failures == 5 {
                    break;
                }
                let k = format!("more{i:04}").into_bytes();
                // Large enough that segments roll while the fault is armed.
                let v = vec![i as u8; 3000];
                match db.put(&k, &v) {
                    Ok(()) => {
                        m.insert(k, v);
                    }
                    Err(e) => {
                        failures += 1;
                        assert!(
                            matches!(e, Error::Io(_)) && !e.is_full(),
                            "{what}: expected an I/O error, got {e:?}"
                        );
                        let msg = e.to_string();
                        assert!(msg.contains(word), "{what}: {msg}");
                        if op.is_some() {
                            // Reads do not touch the failing call.
                            assert_contents(&db, &m, &format!("{what}: failing disk"));
                        }
                    }
                }
            }
            assert!(failures > 0, "{what}: the fault never fired");
            heal_and_verify(sim, db, m, &what);
        }
    });
}

#[test]
fn failing_reads_give_errors_not_wrong_answers() {
    let sim = SimStorage::new();
    let db = sim_db(&sim);
    let m = data();
    fill(&db, &m);
    db.checkpoint().unwrap();
    for skip in [0u64, 1, 2, 5, 10] {
        db.clear_cache();
        sim.inject(Some(SimOp::Read), skip, Fault::Io, false);
        let mut errors = 0;
        for (k, v) in m.iter().step_by(7) {
            match db.get(k) {
                Ok(got) => assert_eq!(got.as_ref(), Some(v), "get after a read error"),
                Err(e) => {
                    errors += 1;
                    assert!(
                        matches!(e, Error::Io(_)),
                        "a failed read must be an I/O error, not {e:?}"
                    );
                }
            }
        }
        assert_eq!(
            errors, 1,
            "the single injected read error shows exactly once"
        );
        sim.heal();
        let mut it = db.iter();
        db.clear_cache();
        sim.inject(Some(SimOp::Read), skip, Fault::Io, false);
        let mut seen = 0;
        let expected: Vec<_> = m.iter().collect();
        for item in &mut it {
            match item {
                Ok((k, v)) => {
                    assert_eq!((&k, &v), expected[seen], "scan item {seen}");
                    seen += 1;
                }
                Err(e) => {
                    assert!(matches!(e, Error::Io(_)), "{e:?}");
                    break;
                }
            }
        }
        assert!(it.next().is_none(), "a scan ends after its error");
        sim.heal();
        assert_contents(&db, &m, "after read errors");
    }
    assert_healthy(&db, m.len());
}

/// A large group (several hundred operations, split over two threads to
/// apply) whose apply fails on a page read: its writers get the error and
/// nothing of it reaches the log: it is absent now, after later writes,
/// after a crash that makes the log replay, after a clean reopen, and when
/// the machine crashes right after the failure.
#[test]
fn a_large_group_whose_apply_fails_leaves_nothing_in_the_log() {
    // Groups this large skip the write buffer and are applied to the tree
    // before their record is written.
    const DIRECT_OPS: u32 = 1 << 16;
    let sim = SimStorage::new();
    let mut db = sim_db(&sim);
    let mut m = data();
    fill(&db, &m);
    db.checkpoint().unwrap();
    for (round, skip) in [0u64, 1, 3].into_iter().enumerate() {
        // Reopened, so that no node is resident in the tree and the apply
        // reads every node it passes: how many a running store keeps
        // resident depends on which background checkpoints ran, and an
        // apply now and then read fewer pages than the fault skips. The
        // write of the round before goes into a checkpoint first: an open
        // replays commits into the write buffer, and a group meeting a
        // non-empty buffer is buffered, not applied.
        db.checkpoint().unwrap();
        drop(db);
        db = sim_db(&sim);
        db.clear_cache();
        sim.inject(Some(SimOp::Read), skip, Fault::Io, false);
        let mut b = WriteBatch::new();
        for i in 0..DIRECT_OPS {
            b.put(format!("key{:05}", i * 3 + round as u32), b"lost".to_vec())
                .unwrap();
        }
        let e = db
            .write(b)
            .expect_err("the apply meets the injected read error");
        assert!(matches!(e, Error::Io(_)), "{e:?}");
        sim.heal();
        assert_contents(&db, &m, "right after the failed group");
        let k = format!("after{round}").into_bytes();
        db.put(&k, b"kept").unwrap();
        m.insert(k, b"kept".to_vec());
    }
    // No checkpoint since the last round: the reopened store replays the
    // log, which must not hold its failed group.
    let crashed = sim.crash(&mut StdRng::seed_from_u64(5));
    drop(db);
    let db = sim_db(&crashed);
    assert_contents(&db, &m, "after a crash following failed large groups");
    heal_and_verify(crashed, db, m.clone(), "after failed large groups");
    // The same again, and the machine crashes right after the failure.
    let sim = SimStorage::new();
    let db = sim_db(&sim);
    fill(&db, &m);
    db.checkpoint().unwrap();
    // Reopened, as above, so that the apply reads the nodes it passes.
    drop(db);
    let db = sim_db(&sim);
    db.clear_cache();
    sim.inject(Some(SimOp::Read), 0, Fault::Io, false);
    let mut b = WriteBatch::new();
    for i in 0..DIRECT_OPS {
        b.put(format!("key{:05}", i * 5), b"maybe".to_vec())
            .unwrap();
    }
    match db.write(b) {
        Err(Error::Io(e)) => assert!(e.to_string().contains("injected EIO"), "{e}"),
        r => panic!("a large group whose reads fail: expected the injected EIO, got {r:?}"),
    }
    sim.heal();
    let crashed = sim.crash(&mut StdRng::seed_from_u64(11));
    drop(db);
    let db = sim_db(&crashed);
    let got = dump(&db);
    let maybe = m
        .iter()
        .filter(|(k, _)| got.get(*k).is_some_and(|v| v == b"maybe"))
        .count();
    assert_eq!(maybe, 0, "a failed group reappears after a crash");
    assert_eq!(got.len(), m.len(), "no pair lost or added by the crash");
    assert!(db.check().unwrap().is_healthy());
}

#[test]
fn a_write_buffer_merge_that_fails_loses_nothing_and_is_retried() {
    let sim = SimStorage::new();
    let mut db = sim_db(&sim);
    let mut m = data();
    fill(&db, &m);
    db.checkpoint().unwrap();
    // Reopened with nothing resident, so merging reads pages; and every
    // read fails from here on (sticky: the background merge, which starts
    // once writes pause, meets it too). Writes read nothing.
    drop(db);
    db = sim_db(&sim);
    db.clear_cache();
    sim.inject(Some(SimOp::Read), 0, Fault::Io, true);
    // Small random batches go into the write buffer.
    for i in 0..40u32 {
        let k = format!("key{:05}", (i * 37) % 1500).into_bytes();
        let v = format!("buffered {i}").into_bytes();
        db.put(&k, &v).unwrap();
        m.insert(k, v);
    }
    db.delete(b"key00002").unwrap();
    m.remove(b"key00002".as_slice());
    // A checkpoint merges the buffer first; the merge meets the error.
    let e = db
        .checkpoint()
        .expect_err("the merge meets the injected read error");
    assert!(matches!(e, Error::Io(_)), "{e:?}");
    sim.heal();
    assert_contents(&db, &m, "after the failed merge");
    // The next checkpoint merges it.
    db.checkpoint().unwrap();
    let st = db.stats().unwrap();
    assert_eq!(st.buffered_keys, 0, "merged");
    assert!(st.buffer_merges > 0);
    assert_eq!(st.pairs, m.len() as u64);
    assert_contents(&db, &m, "after the merge");
    heal_and_verify(sim, db, m, "after a failed merge");
}
