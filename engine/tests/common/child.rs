//! The two halves of tests that need a second process: the child side of
//! the kill test (`tests/kill.rs`) and of the read-only test
//! (`tests/bad_input.rs`). The child is the `kivi-test-child` program
//! (`tests/support/child.rs`), which the parent tests run through
//! `CARGO_BIN_EXE_kivi-test-child`; nothing here is a test of its own.

use super::{assert_healthy, batch_value, dump, mix, small_opts, Model};
use kivi::{Db, Error, Options, WriteBatch};
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------
// The kill test.
// ---------------------------------------------------------------------------

pub const KEYS_PER_THREAD: u64 = 64;

/// The options of the kill test's stores.
pub fn kill_opts() -> Options {
    Options {
        page_size: 512,
        cache_bytes: 1 << 20,
        checkpoint_bytes: 64 << 10,
        segment_bytes: 64 << 10,
        ..Default::default()
    }
}

/// The id of batch `n` of thread `t` in run `run`.
pub fn batch_id(run: u64, t: u64, n: u64) -> u64 {
    (run << 40) | (t << 32) | n
}

/// The operations of batch `n` of thread `t` in run `run`, in order. Both
/// processes compute them, so the child only has to say what was acknowledged.
pub fn batch_ops(run: u64, t: u64, n: u64) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let id = batch_id(run, t, n);
    let mut x = mix(id);
    let count = 1 + x % 5;
    (0..count)
        .map(|_| {
            x = mix(x);
            let key = format!("t{t}/k{:03}", x % KEYS_PER_THREAD).into_bytes();
            if (x >> 32).is_multiple_of(7) {
                (key, None)
            } else {
                let v = batch_value(id, &key);
                (key, Some(v))
            }
        })
        .collect()
}

/// The child of the kill test: opens the store in `dir` and commits batches
/// from `threads` threads, printing `READY` once open and `ACK <thread> <n>`
/// after each acknowledged commit, until killed (or for at most a minute,
/// should the parent be gone).
pub fn kill_writer(dir: &Path, run: u64, threads: u64) {
    let db = Db::open(dir, kill_opts()).expect("child: open failed");
    println!("READY");
    let deadline = Instant::now() + Duration::from_secs(60);
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let db = db.clone();
            std::thread::spawn(move || {
                for n in 0.. {
                    if Instant::now() > deadline {
                        break;
                    }
                    let mut b = WriteBatch::new();
                    for (k, v) in batch_ops(run, t, n) {
                        match v {
                            Some(v) => b.put(k, v).unwrap(),
                            None => b.delete(k).unwrap(),
                        };
                    }
                    let r = db.write(b);
                    let mut out = std::io::stdout().lock();
                    match r {
                        Ok(_) => writeln!(out, "ACK {t} {n}").unwrap(),
                        Err(e) => {
                            writeln!(out, "ERR {t} {n} {e}").unwrap();
                            out.flush().unwrap();
                            std::process::exit(3);
                        }
                    }
                    out.flush().unwrap();
                    if t == 0 && n % 97 == 96 {
                        db.checkpoint().expect("child: checkpoint failed");
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

// ---------------------------------------------------------------------------
// The read-only test.
// ---------------------------------------------------------------------------

/// The data every store here starts with: enough for several segments and
/// out-of-line values.
pub fn data() -> Model {
    (0..1500u32)
        .map(|i| {
            let v = if i % 100 == 0 {
                vec![(i % 251) as u8; 3000 + i as usize]
            } else {
                format!("value {i} {}", "v".repeat((i % 40) as usize)).into_bytes()
            };
            (format!("key{i:05}").into_bytes(), v)
        })
        .collect()
}

pub fn assert_contents(db: &Db, m: &Model, what: &str) {
    let got = dump(db);
    assert!(
        got == *m,
        "{what}: the store holds {} pairs, expected {}",
        got.len(),
        m.len()
    );
}

pub fn listing(dir: &Path) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                e.metadata().unwrap().len(),
            )
        })
        .collect();
    v.sort();
    v
}

/// What the child prints by the child once [`read_only_checks`] passed.
pub const RO_CHILD_DONE: &str = "READ-ONLY CHECKS PASSED";

/// What must hold on a store in a directory this process cannot write.
pub fn read_only_checks(dir: &Path) {
    let m = data();
    let before = listing(dir);
    let shown = dir.display().to_string();
    match Db::open(dir, small_opts()) {
        Err(Error::Io(e)) => {
            let msg = e.to_string();
            assert!(
                matches!(
                    e.kind(),
                    std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem
                ),
                "opening for writing: expected permission denied, got {msg}"
            );
            assert!(msg.contains(&shown), "the error must name the store: {msg}");
        }
        Err(e) => panic!("opening for writing: expected an I/O error, got {e:?}"),
        Ok(_) => panic!("opened a store in a read-only directory for writing"),
    }
    let opts = Options {
        read_only: true,
        ..small_opts()
    };
    let db = Db::open(dir, opts).expect("opening read-only failed");
    assert_contents(&db, &m, "read-only");
    assert!(matches!(db.put(b"k", b"v"), Err(Error::ReadOnly)));
    assert!(matches!(db.delete(b"key00001"), Err(Error::ReadOnly)));
    assert!(matches!(
        db.insert_if_absent(b"new", b"v"),
        Err(Error::ReadOnly)
    ));
    assert!(matches!(
        db.compare_and_delete(b"key00001", b"x"),
        Err(Error::ReadOnly)
    ));
    let mut b = WriteBatch::new();
    b.put(b"a".to_vec(), b"b".to_vec()).unwrap();
    assert!(matches!(db.write(b), Err(Error::ReadOnly)));
    assert!(matches!(db.checkpoint(), Err(Error::ReadOnly)));
    assert_eq!(
        Error::ReadOnly.to_string(),
        "the store is open read-only",
        "message"
    );
    db.clear_cache();
    assert_contents(&db, &m, "read-only, after refused writes");
    let snap = db.snapshot();
    assert_eq!(snap.len().unwrap(), m.len() as u64);
    assert_healthy(&db, m.len());
    drop(snap);
    drop(db);
    assert_eq!(listing(dir), before, "the read-only store was changed");
}
