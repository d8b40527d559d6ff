//! The RocksDB and LevelDB adapters (hand-written FFI to Debian's system
//! libraries), through the same `Store` interface the benchmarks use: each
//! test names one behaviour and fails if it is broken.
#![cfg(feature = "peers")]

use kivi_bench::stores::{kind, Settings, Store};
use std::collections::BTreeMap;
use std::path::Path;

type Pairs = BTreeMap<Vec<u8>, Vec<u8>>;

fn open(name: &str, dir: &Path) -> Box<dyn Store> {
    let k = kind(name).unwrap_or_else(|| panic!("no store called {name}"));
    (k.open)(dir, &Settings::default())
        .unwrap_or_else(|e| panic!("opening {name} in {}: {e}", dir.display()))
}

/// A kv40-like key: the index big-endian (so key order is index order),
/// padded to 40 bytes.
fn key(i: u32) -> Vec<u8> {
    let mut k = i.to_be_bytes().to_vec();
    k.resize(40, b'k');
    k
}

/// A value unique to (`i`, `round`), of varying length (1..=300 bytes).
fn value(i: u32, round: u32) -> Vec<u8> {
    let len = 1 + (i.wrapping_mul(7919) % 300) as usize;
    let seed = format!("{i}/{round};");
    seed.bytes().cycle().take(len).collect()
}

/// `store.get`, with `out` holding stale bytes first: a found value must
/// replace them.
fn get(store: &dyn Store, k: &[u8]) -> Option<Vec<u8>> {
    let mut out = b"stale bytes that must be replaced".to_vec();
    store
        .get(k, &mut out)
        .unwrap_or_else(|e| panic!("get: {e}"))
        .then_some(out)
}

fn scan_all(store: &dyn Store) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut seen = Vec::new();
    store
        .scan(&[], &mut |k, v| {
            seen.push((k.to_vec(), v.to_vec()));
            true
        })
        .unwrap_or_else(|e| panic!("scan: {e}"));
    seen
}

/// Every pair of `want` is readable, and a scan yields exactly `want`.
fn assert_holds(store: &dyn Store, want: &Pairs) {
    for (k, v) in want {
        assert_eq!(get(store, k).as_ref(), Some(v), "value of key {k:?}");
    }
    let seen = scan_all(store);
    assert_eq!(seen.len(), want.len(), "number of pairs scanned");
    assert!(
        seen.iter().map(|(k, v)| (k, v)).eq(want.iter()),
        "scan differs from what was written"
    );
}

/// Writes keys 0..n (value round `round`) in batches of `per_batch`, in a
/// scrambled key order, and returns what was written.
fn write_batches(store: &dyn Store, n: u32, per_batch: usize, round: u32) -> Pairs {
    // 7919 is prime, so i * 7919 mod n visits every index once when n is not
    // a multiple of it.
    let order: Vec<u32> = (0..n).map(|i| (i * 7919) % n).collect();
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = order.iter().map(|&i| (key(i), value(i, round))).collect();
    for chunk in pairs.chunks(per_batch) {
        let refs: Vec<(&[u8], &[u8])> = chunk
            .iter()
            .map(|(k, v)| (k.as_slice(), v.as_slice()))
            .collect();
        store
            .write_batch(&refs)
            .unwrap_or_else(|e| panic!("write_batch: {e}"));
    }
    pairs.into_iter().collect()
}

/// Table files in `dir`: `.sst` (RocksDB) or `.ldb`/`.sst` (LevelDB).
fn table_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            let name = name.to_string_lossy();
            name.ends_with(".sst") || name.ends_with(".ldb")
        })
        .count()
}

fn write_batch_then_get_every_key(name: &str) {
    let dir = tempfile::tempdir().unwrap();
    let store = open(name, dir.path());
    let want = write_batches(&*store, 2000, 500, 0);
    assert_eq!(want.len(), 2000);
    for (k, v) in &want {
        assert_eq!(get(&*store, k).as_ref(), Some(v), "value of key {k:?}");
    }
}

fn put_then_get(name: &str) {
    let dir = tempfile::tempdir().unwrap();
    let store = open(name, dir.path());
    for i in 0..40 {
        store.put(&key(i), &value(i, 0)).unwrap();
        assert_eq!(
            get(&*store, &key(i)),
            Some(value(i, 0)),
            "right after put {i}"
        );
    }
    for i in 0..40 {
        assert_eq!(get(&*store, &key(i)), Some(value(i, 0)), "key {i}");
    }
}

fn empty_value_is_present(name: &str) {
    let dir = tempfile::tempdir().unwrap();
    let store = open(name, dir.path());
    store.put(b"empty", b"").unwrap();
    store.write_batch(&[(b"empty too", b"")]).unwrap();
    assert_eq!(get(&*store, b"empty"), Some(Vec::new()));
    assert_eq!(get(&*store, b"empty too"), Some(Vec::new()));
    assert_eq!(get(&*store, b"empty three"), None);
}

fn overwrite(name: &str) {
    let dir = tempfile::tempdir().unwrap();
    let store = open(name, dir.path());
    let k = key(7);
    store.put(&k, b"first").unwrap();
    assert_eq!(get(&*store, &k).as_deref(), Some(&b"first"[..]));
    store.put(&k, b"second, longer than the first").unwrap();
    assert_eq!(
        get(&*store, &k).as_deref(),
        Some(&b"second, longer than the first"[..])
    );
    store.write_batch(&[(&k, b"3rd")]).unwrap();
    assert_eq!(get(&*store, &k).as_deref(), Some(&b"3rd"[..]));
    // Within one batch, the later put of a key wins.
    store
        .write_batch(&[(&k, b"fourth"), (&k, b"fifth")])
        .unwrap();
    assert_eq!(get(&*store, &k).as_deref(), Some(&b"fifth"[..]));
    // One key, one pair.
    assert_eq!(scan_all(&*store), vec![(k, b"fifth".to_vec())]);
}

fn absent_key_is_ok_false(name: &str) {
    let dir = tempfile::tempdir().unwrap();
    let store = open(name, dir.path());
    let mut out = Vec::new();
    assert!(!store.get(b"nothing here yet", &mut out).unwrap());
    store
        .write_batch(&[(b"b", b"1"), (b"bb", b"2"), (b"d", b"3")])
        .unwrap();
    for absent in [&b"a"[..], b"", b"c", b"bbb", b"e", b"\xff"] {
        assert!(
            !store.get(absent, &mut out).unwrap(),
            "{absent:?} is absent"
        );
    }
    assert!(store.get(b"bb", &mut out).unwrap());
    assert_eq!(out, b"2");
}

fn scan_in_key_order(name: &str) {
    let dir = tempfile::tempdir().unwrap();
    let store = open(name, dir.path());
    assert!(scan_all(&*store).is_empty(), "a new store is empty");

    let mut want = write_batches(&*store, 500, 64, 0);
    // Keys whose byte order differs from their length order or numeric
    // order, written out of order, some by put and some in a batch.
    let odd: [&[u8]; 8] = [
        b"\xff\xff",
        b"b",
        b"ab",
        b"a",
        b"\x00\x00",
        b"\x00",
        b"\xff",
        b"A",
    ];
    for (i, k) in odd.iter().enumerate() {
        let v = format!("odd {i}").into_bytes();
        if i % 2 == 0 {
            store.put(k, &v).unwrap();
        } else {
            store.write_batch(&[(k, &v)]).unwrap();
        }
        want.insert(k.to_vec(), v);
    }

    // BTreeMap<Vec<u8>, _> orders keys bytewise, as both libraries'
    // default comparators do.
    assert_holds(&*store, &want);
    let seen = scan_all(&*store);
    assert!(
        seen.windows(2).all(|w| w[0].0 < w[1].0),
        "keys strictly increase"
    );
}

fn scan_stops_when_visit_returns_false(name: &str) {
    let dir = tempfile::tempdir().unwrap();
    let store = open(name, dir.path());
    let want = write_batches(&*store, 100, 100, 0);
    let first: Vec<(Vec<u8>, Vec<u8>)> = want.into_iter().take(3).collect();

    for stop_after in [1, 3] {
        let mut seen = Vec::new();
        store
            .scan(&[], &mut |k, v| {
                seen.push((k.to_vec(), v.to_vec()));
                seen.len() < stop_after
            })
            .unwrap();
        assert_eq!(
            seen,
            first[..stop_after],
            "visit returned false after {stop_after}"
        );
    }
}

fn settle_flushes_and_keeps_everything(name: &str) {
    let dir = tempfile::tempdir().unwrap();
    let store = open(name, dir.path());
    // Small enough to stay in the memtable (both default write buffers are
    // megabytes), so only settle can have made a table file.
    let want = write_batches(&*store, 1000, 250, 0);
    assert_eq!(table_files(dir.path()), 0, "no table file before settle");
    store.settle().unwrap_or_else(|e| panic!("settle: {e}"));
    assert!(
        table_files(dir.path()) > 0,
        "settle flushed the memtable to a table file"
    );
    assert_holds(&*store, &want);
    // Again, with nothing in the memtable.
    store
        .settle()
        .unwrap_or_else(|e| panic!("second settle: {e}"));
    assert_holds(&*store, &want);
}

/// Batches, puts and overwrites survive closing and reopening (which also
/// shows drop closes the database: the library's lock would refuse the
/// second open otherwise). With `settle`, from table files; without, from
/// the write-ahead log.
fn reopen_keeps_everything(name: &str, settle: bool) {
    let dir = tempfile::tempdir().unwrap();
    let mut want = {
        let store = open(name, dir.path());
        let mut want = write_batches(&*store, 1000, 200, 0);
        for i in (0..1000).step_by(97) {
            store.put(&key(i), &value(i, 1)).unwrap();
            want.insert(key(i), value(i, 1));
        }
        store.put(b"only put", b"once").unwrap();
        want.insert(b"only put".to_vec(), b"once".to_vec());
        if settle {
            store.settle().unwrap();
        }
        want
    };
    {
        let store = open(name, dir.path());
        assert_holds(&*store, &want);
        // Still writable after recovery; overwrite again and reopen once more.
        store.write_batch(&[(&key(5), b"after reopen")]).unwrap();
        want.insert(key(5), b"after reopen".to_vec());
    }
    let store = open(name, dir.path());
    assert_holds(&*store, &want);
}

fn concurrent_puts(name: &str) {
    let dir = tempfile::tempdir().unwrap();
    let store = open(name, dir.path());
    let store: &dyn Store = &*store;
    std::thread::scope(|s| {
        for t in 0..4u32 {
            s.spawn(move || {
                for i in 0..25 {
                    let i = t * 1000 + i;
                    store.put(&key(i), &value(i, 0)).unwrap();
                }
            });
        }
    });
    let want: Pairs = (0..4u32)
        .flat_map(|t| (0..25).map(move |i| t * 1000 + i))
        .map(|i| (key(i), value(i, 0)))
        .collect();
    assert_holds(store, &want);
}

fn open_errors_carry_the_library_message(name: &str) {
    let dir = tempfile::tempdir().unwrap();
    let prefix = format!("{name}: ");

    // The directory is locked while a store has it open.
    let first = open(name, dir.path());
    let e = (kind(name).unwrap().open)(dir.path(), &Settings::default())
        .err()
        .expect("second open fails");
    assert!(e.0.starts_with(&prefix) && e.0.len() > prefix.len(), "{e}");
    assert!(e.0.to_lowercase().contains("lock"), "names the lock: {e}");
    drop(first);

    // A regular file where the directory should be.
    let file = dir.path().join("a file");
    std::fs::write(&file, b"x").unwrap();
    let e = (kind(name).unwrap().open)(&file.join("db"), &Settings::default())
        .err()
        .expect("open under a file fails");
    assert!(e.0.starts_with(&prefix) && e.0.len() > prefix.len(), "{e}");
}

macro_rules! store_tests {
    ($($store:ident),*) => {$(
        mod $store {
            const NAME: &str = stringify!($store);
            #[test]
            fn write_batch_then_get_every_key() { super::write_batch_then_get_every_key(NAME) }
            #[test]
            fn put_then_get() { super::put_then_get(NAME) }
            #[test]
            fn empty_value_is_present() { super::empty_value_is_present(NAME) }
            #[test]
            fn overwrite() { super::overwrite(NAME) }
            #[test]
            fn absent_key_is_ok_false() { super::absent_key_is_ok_false(NAME) }
            #[test]
            fn scan_in_key_order() { super::scan_in_key_order(NAME) }
            #[test]
            fn scan_stops_when_visit_returns_false() {
                super::scan_stops_when_visit_returns_false(NAME)
            }
            #[test]
            fn settle_flushes_and_keeps_everything() {
                super::settle_flushes_and_keeps_everything(NAME)
            }
            #[test]
            fn reopen_keeps_everything_from_the_log() { super::reopen_keeps_everything(NAME, false) }
            #[test]
            fn reopen_keeps_everything_after_settle() { super::reopen_keeps_everything(NAME, true) }
            #[test]
            fn concurrent_puts() { super::concurrent_puts(NAME) }
            #[test]
            fn open_errors_carry_the_library_message() {
                super::open_errors_carry_the_library_message(NAME)
            }
        }
    )*};
}

store_tests!(rocksdb, leveldb);

/// The version in RocksDB's `library` string is the one actually loaded:
/// RocksDB records its version in the OPTIONS file of every database.
#[test]
fn rocksdb_library_names_the_loaded_version() {
    let dir = tempfile::tempdir().unwrap();
    drop(open("rocksdb", dir.path()));
    let options = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("OPTIONS-")
        })
        .expect("an OPTIONS file");
    let text = std::fs::read_to_string(options).unwrap();
    let version = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("rocksdb_version="))
        .expect("rocksdb_version in the OPTIONS file");
    let library = kind("rocksdb").unwrap().library;
    assert!(
        library.starts_with(&format!("RocksDB {version} ")),
        "loaded {version}, library says {library:?}"
    );
}

/// The version in LevelDB's `library` string is the one actually loaded.
#[test]
fn leveldb_library_names_the_loaded_version() {
    extern "C" {
        fn leveldb_major_version() -> std::ffi::c_int;
        fn leveldb_minor_version() -> std::ffi::c_int;
    }
    // SAFETY: both functions take no arguments and return a constant
    // (leveldb/c.h); the library is linked through kivi-bench's build.rs.
    let (major, minor) = unsafe { (leveldb_major_version(), leveldb_minor_version()) };
    let library = kind("leveldb").unwrap().library;
    assert!(
        library.starts_with(&format!("LevelDB {major}.{minor} ")),
        "loaded {major}.{minor}, library says {library:?}"
    );
}

/// Every store, kivi's included: a scan from a key starts at the first key
/// at or after it, and a store opened with the suite's cache setting holds
/// what it was given.
#[test]
fn every_store_scans_from_a_key_and_takes_a_cache_size() {
    for k in kivi_bench::stores::kinds() {
        let dir = tempfile::tempdir().unwrap();
        let settings = Settings {
            cache_bytes: Some(16 << 20),
            memory_limited: true,
        };
        let store = (k.open)(dir.path(), &settings)
            .unwrap_or_else(|e| panic!("opening {} with a cache size: {e}", k.name));
        let want = write_batches(&*store, 100, 50, 0);
        assert_holds(&*store, &want);
        let from = |start: &[u8], count: usize| -> Vec<Vec<u8>> {
            let mut seen = Vec::new();
            store
                .scan(start, &mut |key, _| {
                    seen.push(key.to_vec());
                    seen.len() < count
                })
                .unwrap_or_else(|e| panic!("{}: scan: {e}", k.name));
            seen
        };
        let expect = |range: std::ops::Range<u32>| -> Vec<Vec<u8>> { range.map(key).collect() };
        assert_eq!(from(&key(37), 5), expect(37..42), "{}: from a key", k.name);
        // Between two keys: key 37 with a larger last byte sorts before 38.
        let mut between = key(37);
        *between.last_mut().unwrap() = 0xff;
        assert_eq!(
            from(&between, 2),
            expect(38..40),
            "{}: between keys",
            k.name
        );
        assert_eq!(from(&key(99), 10), expect(99..100), "{}: the last", k.name);
        assert!(from(&key(100), 10).is_empty(), "{}: past the end", k.name);
        assert_eq!(from(&[], 3), expect(0..3), "{}: from the start", k.name);
    }
}
