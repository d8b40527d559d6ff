//! Every byte of every object of a small store on an object store, damaged
//! one at a time (issue 32, "corruption everywhere"). The store is the one
//! `tests/corruption_every_byte.rs` damages on a local backend
//! (`common::damage::write_small_store`: four writable opens, two
//! checkpoints, deadlines), here through kivi-object-storage on
//! object_store's in-memory store: the identity (`meta/KIVI`), the log
//! (fences, creations and deletions of commit segments, commits), the
//! marker of where the log starts, page segments' markers and chunks, and
//! the writer's lease.
//!
//! Each case copies every object into a new in-memory store, one byte
//! XORed with one bit (bit `(offset + pass) % 8`; passes 0 to 7 flip every
//! bit), and opens it, writable or (a quarter of the cases) read-only, on a
//! fresh local cache:
//! - opening fails with a corruption naming the damaged object (a page
//!   chunk's contents are read as its segment's bytes: the error may name
//!   the segment, at an offset inside that chunk), or for `KIVI`, with
//!   `Error::NotAStore`; or it succeeds;
//! - then every get answers right or with a corruption error, never a
//!   wrong value, scans both ways return a correct prefix and then an
//!   error, and `check()` reports a problem if any read failed;
//! - a copy that opens, reads right and checks clean is allowed only for a
//!   byte nothing reads: a chunk's header (its bytes are read by offset,
//!   the header never), a segment's marker (its existence is what counts),
//!   a log entry before the log's start (a fence, kept for good), and the
//!   lease (advice for followers; whether it still reads back as written
//!   is counted);
//! - nothing panics.
//!
//! By default every 37th byte is a case; the campaign runs all of them:
//! `KIVI_EVERY_BYTE=1 cargo test -p kivi-db --test object_corruption_every_byte -- --nocapture`
//! (`KIVI_EVERY_BYTE_PASSES=8`, `KIVI_TEST_THREADS`, `KIVI_EVERY_BYTE_STRIDE`
//! as there).

mod common;

use common::damage::{
    self, check_finds, guarded, read_all, read_all_naming, small_store_opts, write_small_store,
    Fault, History, READ_AT, WRITTEN_AT,
};
use common::mix;
use futures::StreamExt;
use kivi::{Clock, Db, Error};
use kivi_object_storage::{Config, ObjectStorage};
use kivi_storage::Corruption;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PREFIX: &str = "db";
const LABEL: &str = "memory://db";
/// A page chunk's header (object-storage/src/format.rs).
const CHUNK_HEADER: usize = 56;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Identity,
    /// Log entry `n`; `read` is false before the log's start.
    Log {
        n: u64,
        read: bool,
    },
    Start,
    /// Page segment `seg`'s marker.
    Marker,
    /// The chunk of page segment `seg` at `offset`.
    Chunk {
        seg: u64,
        offset: u64,
    },
    Lease,
}

struct Object {
    /// Relative to the prefix: `log/000...`.
    name: String,
    kind: Kind,
    bytes: Vec<u8>,
}

struct Store {
    objects: Vec<Object>,
    history: History,
    /// The lease as the undamaged copy reads it back.
    lease: String,
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

fn config(read_only: bool, renew_lease: bool) -> Config {
    Config {
        read_only,
        // Nobody follows: retired page segments go at once.
        retired_grace: Duration::ZERO,
        renew_lease,
        ..Config::default()
    }
}

fn storage(store: &Arc<InMemory>, read_only: bool) -> Result<ObjectStorage, kivi_storage::Error> {
    ObjectStorage::open(store.clone(), PREFIX, LABEL, config(read_only, false))
}

fn classify(name: &str, start: u64) -> Kind {
    let parts: Vec<&str> = name.split('/').collect();
    match parts.as_slice() {
        ["meta", "KIVI"] => Kind::Identity,
        ["log", n] => {
            let n: u64 = n.parse().unwrap();
            Kind::Log {
                n,
                read: n >= start,
            }
        }
        ["start", _] => Kind::Start,
        ["pages", _, "created"] => Kind::Marker,
        ["pages", seg, offset] => Kind::Chunk {
            seg: seg.parse().unwrap(),
            offset: offset.parse().unwrap(),
        },
        ["lease"] => Kind::Lease,
        _ => panic!("an object the test does not know: {name}"),
    }
}

fn build() -> Store {
    let memory = Arc::new(InMemory::new());
    let clock = Clock::manual(WRITTEN_AT);
    let history = write_small_store(&|| {
        // Each open renews the writer's lease (at once, then every second):
        // the lease is one of the objects.
        let s = ObjectStorage::open(memory.clone(), PREFIX, LABEL, config(false, true)).unwrap();
        Db::open_with_storage(Arc::new(s), small_store_opts(false, &clock)).unwrap()
    });
    // A lease thread puts at most once more after its store is dropped (a
    // renewal under way); after that the objects no longer change.
    std::thread::sleep(Duration::from_millis(200));

    let rt = runtime();
    let listed: Vec<String> = rt.block_on(async {
        let mut names = Vec::new();
        let mut stream = memory.list(Some(&Path::from(PREFIX)));
        while let Some(meta) = stream.next().await {
            let loc = meta.unwrap().location;
            names.push(loc.as_ref().strip_prefix("db/").unwrap().to_string());
        }
        names.sort();
        names
    });
    let start = listed
        .iter()
        .filter_map(|n| n.strip_prefix("start/")?.parse::<u64>().ok())
        .max()
        .unwrap_or(0);
    let objects: Vec<Object> = listed
        .iter()
        .map(|name| {
            let path = Path::from(format!("{PREFIX}/{name}"));
            let bytes = rt.block_on(async { memory.get(&path).await.unwrap().bytes().await });
            Object {
                name: name.clone(),
                kind: classify(name, start),
                bytes: bytes.unwrap().to_vec(),
            }
        })
        .collect();
    let count = |f: &dyn Fn(&Kind) -> bool| objects.iter().filter(|o| f(&o.kind)).count();
    let total: usize = objects.iter().map(|o| o.bytes.len()).sum();
    println!(
        "store: {} objects, {total} bytes: {} log entries ({} before the start), {} start \
         markers, {} page segment markers, {} chunks, {} lease; {} pairs at the time the \
         copies are read",
        objects.len(),
        count(&|k| matches!(k, Kind::Log { .. })),
        count(&|k| matches!(k, Kind::Log { read: false, .. })),
        count(&|k| *k == Kind::Start),
        count(&|k| *k == Kind::Marker),
        count(&|k| matches!(k, Kind::Chunk { .. })),
        count(&|k| *k == Kind::Lease),
        history.full.len()
    );
    assert_eq!(count(&|k| *k == Kind::Identity), 1);
    assert_eq!(count(&|k| *k == Kind::Lease), 1);
    assert!(count(&|k| matches!(k, Kind::Chunk { .. })) >= 2);
    assert!(count(&|k| *k == Kind::Marker) >= 2);
    let mut store = Store {
        objects,
        history,
        lease: String::new(),
    };
    // The undamaged copy opens, reads right and checks clean.
    let copy = copy_with(&store, &rt, None);
    let db = Db::open_with_storage(
        Arc::new(storage(&copy, false).unwrap()),
        small_store_opts(false, &Clock::manual(READ_AT)),
    )
    .unwrap();
    assert!(!read_all(&db, &store.history.full, &store.history.probe).unwrap());
    assert!(!check_finds(&db).unwrap());
    store.lease = format!("{:?}", db.writer_lease().unwrap());
    assert!(store.lease.starts_with("Some("), "{}", store.lease);
    store
}

/// A new in-memory store holding every object, byte `at.1` of object
/// `at.0` XORed with `at.2`.
fn copy_with(
    store: &Store,
    rt: &tokio::runtime::Runtime,
    at: Option<(usize, usize, u8)>,
) -> Arc<InMemory> {
    let copy = Arc::new(InMemory::new());
    rt.block_on(async {
        for (i, o) in store.objects.iter().enumerate() {
            let mut bytes = o.bytes.clone();
            if let Some((_, offset, mask)) = at.filter(|a| a.0 == i) {
                bytes[offset] ^= mask;
            }
            let path = Path::from(format!("{PREFIX}/{}", o.name));
            copy.put(&path, PutPayload::from(bytes)).await.unwrap();
        }
    });
    copy
}

#[derive(Debug, Clone, Copy)]
struct Case {
    object: usize,
    offset: usize,
    mask: u8,
    read_only: bool,
}

/// What a case came to, when it was handled right.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Open failed with a corruption naming the damaged object.
    Refused,
    /// Open failed with a corruption naming the chunk's segment, at an
    /// offset inside the damaged chunk.
    RefusedNamingTheSegment,
    /// Open failed: the identity is not one of a store.
    NotAStore,
    /// Opened; some reads failed with corruption, check reported it.
    ReadErrors,
    /// Opened; every read right, check reported the damage.
    FoundByCheck,
    /// Opened; every read right, check silent: a byte nothing reads.
    /// `lease_altered`: the lease reads back otherwise than written.
    Unread { lease_altered: bool },
}

/// Whether a corruption `c` names the damaged byte: the object, or for a
/// chunk's contents, its segment at an offset no later than the byte's.
fn names(c: &Corruption, store: &Store, case: &Case, segment_name: &str) -> Option<Outcome> {
    let o = &store.objects[case.object];
    if c.file == format!("{LABEL}/{}", o.name) {
        return Some(Outcome::Refused);
    }
    match o.kind {
        Kind::Chunk { offset, .. }
            if case.offset >= CHUNK_HEADER
                && c.file == segment_name
                && c.offset >= offset
                && c.offset <= offset + (case.offset - CHUNK_HEADER) as u64 =>
        {
            Some(Outcome::RefusedNamingTheSegment)
        }
        _ => None,
    }
}

fn judge(store: &Store, rt: &tokio::runtime::Runtime, c: &Case) -> Result<Outcome, String> {
    let o = &store.objects[c.object];
    let copy = copy_with(store, rt, Some((c.object, c.offset, c.mask)));
    let segment_name = match o.kind {
        Kind::Chunk { seg, .. } => kivi_storage::segment_file_name(seg),
        _ => String::new(),
    };
    let segment_name = format!("{LABEL}/{segment_name}");
    let refused = |e: &Corruption| -> Result<Outcome, String> {
        names(e, store, c, &segment_name).ok_or_else(|| {
            format!(
                "open reports the corruption in {} (offset {}: {}), the damage is in {LABEL}/{}",
                e.file, e.offset, e.what, o.name
            )
        })
    };
    let s = match storage(&copy, c.read_only) {
        Err(kivi_storage::Error::Corrupt(e)) => return refused(&e),
        Err(e) => return Err(format!("the backend's open failed otherwise: {e}")),
        Ok(s) => s,
    };
    let opts = small_store_opts(c.read_only, &Clock::manual(READ_AT));
    let db = match Db::open_with_storage(Arc::new(s), opts) {
        Err(Error::Corrupt(e)) => return refused(&e),
        Err(Error::NotAStore { .. }) if o.kind == Kind::Identity => return Ok(Outcome::NotAStore),
        Err(e) => return Err(format!("open failed with a non-corruption error: {e:?}")),
        Ok(db) => db,
    };
    let h = &store.history;
    let read_errors = read_all_naming(&db, &h.full, &h.probe, &|e| {
        names(e, store, c, &segment_name).is_some()
    })?;
    let found = check_finds(&db)?;
    let lease = format!("{:?}", db.writer_lease());
    drop(db);
    Ok(match (read_errors, found) {
        (true, false) => return Err("reads failed with corruption, yet check() is silent".into()),
        (true, true) => Outcome::ReadErrors,
        (false, true) => Outcome::FoundByCheck,
        (false, false) => {
            let unread = match o.kind {
                Kind::Chunk { .. } => c.offset < CHUNK_HEADER,
                Kind::Marker | Kind::Lease | Kind::Log { read: false, .. } => true,
                Kind::Identity | Kind::Start | Kind::Log { read: true, .. } => false,
            };
            if !unread {
                return Err(
                    "the store opened, every read was right and check() reports nothing: the \
                     damage went unnoticed"
                        .into(),
                );
            }
            Outcome::Unread {
                lease_altered: lease != format!("Ok({})", store.lease),
            }
        }
    })
}

#[derive(Debug, Default)]
struct Tally {
    cases: u64,
    refused_naming_the_object: u64,
    refused_naming_the_chunks_segment: u64,
    identity_not_a_store: u64,
    opened_read_errors: u64,
    opened_found_by_check: u64,
    opened_unread_byte: u64,
    lease_reads_back_altered: u64,
    wrong: u64,
    panics: u64,
    other_failures: u64,
}

#[test]
fn every_byte_of_every_object() {
    let started = Instant::now();
    let store = build();
    let stride = damage::every_byte_stride(37);
    let mut cases = Vec::new();
    let mut n = 0usize;
    for pass in damage::every_byte_passes() {
        for (object, o) in store.objects.iter().enumerate() {
            for offset in 0..o.bytes.len() {
                n += 1;
                if (n - 1).is_multiple_of(stride) {
                    cases.push(Case {
                        object,
                        offset,
                        mask: damage::rotating_mask(offset, pass),
                        read_only: mix(n as u64).is_multiple_of(4),
                    });
                }
            }
        }
    }
    let results = damage::par_map(&cases, |_, c| {
        let rt = runtime();
        guarded(|| judge(&store, &rt, c))
    });
    let mut t = Tally::default();
    let mut failures = Vec::new();
    for (c, r) in cases.iter().zip(results) {
        t.cases += 1;
        match r {
            Ok(Outcome::Refused) => t.refused_naming_the_object += 1,
            Ok(Outcome::RefusedNamingTheSegment) => t.refused_naming_the_chunks_segment += 1,
            Ok(Outcome::NotAStore) => t.identity_not_a_store += 1,
            Ok(Outcome::ReadErrors) => t.opened_read_errors += 1,
            Ok(Outcome::FoundByCheck) => t.opened_found_by_check += 1,
            Ok(Outcome::Unread { lease_altered }) => {
                t.opened_unread_byte += 1;
                t.lease_reads_back_altered += u64::from(lease_altered);
            }
            Err(e) => {
                match &e {
                    Fault::Panicked(_) => t.panics += 1,
                    Fault::Judged(m) if damage::is_wrong(m) => t.wrong += 1,
                    Fault::Judged(_) => t.other_failures += 1,
                }
                let o = &store.objects[c.object];
                failures.push(format!(
                    "{} ({:?}) offset {} ^{:02x}, read_only={}: {e}",
                    o.name, o.kind, c.offset, c.mask, c.read_only
                ));
            }
        }
    }
    println!(
        "every_byte_of_every_object: stride {stride}, passes {:?}, {} threads, {:.1} s: {t:?}",
        damage::every_byte_passes(),
        damage::threads(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{} of {} damaged copies handled wrongly:\n{}",
        failures.len(),
        cases.len(),
        failures[..failures.len().min(40)].join("\n")
    );
    assert!(t.refused_naming_the_object > 0 && t.opened_read_errors > 0);
}
