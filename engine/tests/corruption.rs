//! Media corruption: a store with several segments (commit segments, page
//! segments holding live and dead pages and out-of-line values, a
//! checkpoint and commits after it) is copied many times, each copy with
//! one byte flipped (or a small range overwritten) somewhere: in segment
//! headers, commit and checkpoint records, page and blob records, the tail.
//! For each copy:
//! - opening fails with `Error::Corrupt` naming the damaged segment file and
//!   an offset, or succeeds;
//! - if it succeeds, every read returns the right answer or an error, never
//!   a wrong value (an absent answer for a present key is wrong too), and
//!   scans return a correct prefix (suffix, in reverse) and then an error;
//! - `check()` then reports a problem, unless the damage lies in the one
//!   place a reader can legitimately never tell from a torn write: the last
//!   record of the newest commit segment, which recovery cuts off as a torn
//!   tail, and then exactly that last commit must be gone;
//! - nothing panics (each case runs under `catch_unwind`, and panics on the
//!   library's threads are caught by a hook).
//!
//! `KIVI_TEST_CASES` sets the number of random extra positions per test.

mod common;

use common::damage::{guarded, judge_opened, judge_refusal};
use common::{env_u64, panic_message, Model};
use kivi::storage::{MemoryStorage, Storage};
use kivi::{Db, Error, Options, WriteBatch};
use kivi_storage::SimStorage;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, OnceLock};

const HEADER_LEN: usize = 62;
const RECORD_HEADER: usize = 9;

fn opts(read_only: bool) -> Options {
    Options {
        page_size: 1024,
        cache_bytes: 1 << 20,
        segment_bytes: 64 << 10,
        // Only the explicit checkpoints, so the commits after the last one
        // stay in the log.
        checkpoint_bytes: 1 << 30,
        // No cleaning, so the page segments keep dead pages beside live
        // ones. (A segment the cleaner emptied is deleted at the next open:
        // damage there is harmless and goes unnoticed.)
        space_amplification_max: 1000.0,
        read_only,
        ..Default::default()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Commits,
    Pages,
}

#[derive(Debug, Clone, Copy)]
struct Rec {
    offset: usize,
    len: usize,
    ty: u8,
}

struct Seg {
    id: u64,
    name: String,
    kind: Kind,
    bytes: Vec<u8>,
    records: Vec<Rec>,
}

struct Store {
    identity: Vec<u8>,
    segs: Vec<Seg>,
    /// The contents with every commit, and without the last one.
    full: Model,
    without_last: Model,
    /// Keys to read: every key ever written, and some never written.
    probe: Vec<Vec<u8>>,
    /// The newest commit segment and its last record.
    newest_commits: u64,
    last_record: Rec,
}

fn key(i: u32) -> Vec<u8> {
    format!("key/{:05}/{}", i, "k".repeat((i % 13) as usize)).into_bytes()
}

fn value(i: u32, round: u32) -> Vec<u8> {
    let len = if i.is_multiple_of(29) {
        1100 + (i * 37 + round * 11) as usize % 5000 // out of line
    } else {
        10 + (i * 7 + round) as usize % 150
    };
    let mut x = common::mix(u64::from(i) << 8 | u64::from(round));
    (0..len)
        .map(|_| {
            x = common::mix(x);
            x as u8
        })
        .collect()
}

fn build() -> Store {
    let sim = SimStorage::new();
    let db = Db::open_with_storage(Arc::new(sim.clone()), opts(false)).unwrap();
    let mut model = Model::new();
    let write = |db: &Db, model: &mut Model, ops: Vec<(u32, Option<u32>)>| {
        let mut b = WriteBatch::new();
        for (i, round) in ops {
            match round {
                Some(r) => {
                    b.put(key(i), value(i, r)).unwrap();
                    model.insert(key(i), value(i, r));
                }
                None => {
                    b.delete(key(i)).unwrap();
                    model.remove(&key(i));
                }
            }
        }
        db.write(b).unwrap();
    };
    // Enough for several commit segments, then a checkpoint.
    for chunk in 0..60u32 {
        let ops = (0..20).map(|j| (chunk * 20 + j, Some(0))).collect();
        write(&db, &mut model, ops);
    }
    db.checkpoint().unwrap();
    // Overwrites and deletes, another checkpoint: the first one's pages
    // that changed are now dead, but still in their segments.
    for chunk in 0..30u32 {
        let ops = (0..15)
            .map(|j| {
                let i = (chunk * 97 + j * 31) % 1200;
                (i, if j % 5 == 0 { None } else { Some(1) })
            })
            .collect();
        write(&db, &mut model, ops);
    }
    db.checkpoint().unwrap();
    // Commits after the last checkpoint, enough to roll a commit segment.
    for chunk in 0..45u32 {
        let ops = (0..12)
            .map(|j| ((chunk * 53 + j * 101) % 1300, Some(2)))
            .collect();
        write(&db, &mut model, ops);
    }
    let without_last = model.clone();
    write(
        &db,
        &mut model,
        vec![(5, Some(3)), (6, None), (1299, Some(3))],
    );
    assert_eq!(sim.pending_writes(), 0, "everything is synced");
    let frozen = sim.crash(&mut StdRng::seed_from_u64(0));
    drop(db);

    let mut segs = Vec::new();
    for id in frozen.list_segments().unwrap() {
        let r = frozen.open_segment(id).unwrap();
        let mut bytes = vec![0u8; r.size().unwrap() as usize];
        r.read_at(0, &mut bytes).unwrap();
        // The crash may leave a sparse tail of zeros (as LocalDir's is)
        // after the last record; this test damages the records only.
        let data_end = last_record_end(&bytes);
        bytes.truncate(data_end);
        let kind = match bytes[RECORD_HEADER + 36] {
            1 => Kind::Commits,
            2 => Kind::Pages,
            k => panic!("segment {id} of unknown kind {k}"),
        };
        let mut records = Vec::new();
        let mut at = HEADER_LEN;
        while at < bytes.len() {
            let len = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
            records.push(Rec {
                offset: at,
                len: RECORD_HEADER + len,
                ty: bytes[at + 8],
            });
            at += RECORD_HEADER + len;
        }
        assert_eq!(at, bytes.len(), "segment {id} ends inside a record");
        segs.push(Seg {
            id,
            name: frozen.segment_name(id),
            kind,
            bytes,
            records,
        });
    }
    let newest = segs.iter().rev().find(|s| s.kind == Kind::Commits).unwrap();
    let (newest_commits, last_record) = (newest.id, *newest.records.last().unwrap());
    assert_eq!(last_record.ty, 2, "the last record is a commit");
    let mut probe: Vec<Vec<u8>> = (0..1300).map(key).collect();
    probe.extend([b"".to_vec(), b"key/".to_vec(), b"zzz".to_vec()]);
    let store = Store {
        identity: frozen.read_meta("KIVI").unwrap().unwrap(),
        segs,
        full: model,
        without_last,
        probe,
        newest_commits,
        last_record,
    };
    let count = |k: Kind, ty: u8| -> usize {
        store
            .segs
            .iter()
            .filter(|s| s.kind == k)
            .map(|s| s.records.iter().filter(|r| r.ty == ty).count())
            .sum()
    };
    println!(
        "store: {} segments ({} commit, {} page): {} commit, {} checkpoint, {} page, {} blob \
         records; {} pairs",
        store.segs.len(),
        store
            .segs
            .iter()
            .filter(|s| s.kind == Kind::Commits)
            .count(),
        store.segs.iter().filter(|s| s.kind == Kind::Pages).count(),
        count(Kind::Commits, 2),
        count(Kind::Commits, 3),
        count(Kind::Pages, 4),
        count(Kind::Pages, 5),
        store.full.len()
    );
    assert!(
        store
            .segs
            .iter()
            .filter(|s| s.kind == Kind::Commits)
            .count()
            >= 2
    );
    assert!(store.segs.iter().filter(|s| s.kind == Kind::Pages).count() >= 2);
    assert!(count(Kind::Commits, 3) >= 1 && count(Kind::Pages, 5) >= 10);
    store
}

fn store() -> &'static Store {
    static STORE: OnceLock<Store> = OnceLock::new();
    STORE.get_or_init(build)
}

/// One damaged copy: `bytes` written over segment `seg` at `offset`.
#[derive(Debug, Clone)]
struct Damage {
    seg: usize,
    offset: usize,
    bytes: Vec<u8>,
    what: String,
}

fn copy_with(store: &Store, damage: Option<&Damage>) -> MemoryStorage {
    let mem = MemoryStorage::new();
    mem.write_meta("KIVI", &store.identity).unwrap();
    for (i, s) in store.segs.iter().enumerate() {
        let mut bytes = s.bytes.clone();
        if let Some(d) = damage.filter(|d| d.seg == i) {
            bytes[d.offset..d.offset + d.bytes.len()].copy_from_slice(&d.bytes);
        }
        let mut w = mem.create_segment(s.id).unwrap();
        w.append(&bytes).unwrap();
    }
    mem
}

#[derive(Debug, Default)]
struct Outcomes {
    cases: u64,
    refused: u64,
    opened: u64,
    read_errors: u64,
    found_by_check: u64,
    torn_tail_cut: u64,
}

/// Opens a damaged copy and checks everything the module comment promises.
/// Returns a description of what is wrong, if anything.
fn judge(store: &Store, d: &Damage, read_only: bool, out: &mut Outcomes) -> Result<(), String> {
    let seg = &store.segs[d.seg];
    let mem = copy_with(store, Some(d));
    let in_last_record = seg.id == store.newest_commits
        && d.offset + d.bytes.len() > store.last_record.offset
        && d.offset < store.last_record.offset + store.last_record.len;
    out.cases += 1;
    let db = match Db::open_with_storage(Arc::new(mem), opts(read_only)) {
        Err(Error::Corrupt(c)) => {
            out.refused += 1;
            return judge_refusal(&c, &seg.name, d.offset + d.bytes.len());
        }
        Err(e) => return Err(format!("open failed with a non-corruption error: {e:?}")),
        Ok(db) => db,
    };
    out.opened += 1;
    let expected = if in_last_record {
        out.torn_tail_cut += 1;
        &store.without_last
    } else {
        &store.full
    };
    let opened = judge_opened(&db, expected, &store.probe, in_last_record)?;
    if opened.read_errors {
        out.read_errors += 1;
    }
    if opened.found_by_check {
        out.found_by_check += 1;
    }
    drop(db);
    Ok(())
}

/// Runs each damage case under `catch_unwind`, fails with every bad case.
fn run_cases(test: &str, cases: Vec<Damage>) {
    let store = store();
    let mut out = Outcomes::default();
    let mut failures = Vec::new();
    for (n, d) in cases.iter().enumerate() {
        let read_only = n % 4 == 3;
        if let Err(e) = guarded(|| judge(store, d, read_only, &mut out)) {
            let seg = &store.segs[d.seg];
            failures.push(format!(
                "{} ({:?} segment) offset {} ({}), {} bytes written {:02x?}, read_only={read_only}: {e}",
                seg.name,
                seg.kind,
                d.offset,
                d.what,
                d.bytes.len(),
                &d.bytes[..d.bytes.len().min(8)]
            ));
        }
    }
    println!("{test}: {out:?}");
    if !failures.is_empty() {
        panic!(
            "{test}: {} of {} damaged copies handled wrongly:\n{}",
            failures.len(),
            cases.len(),
            failures
                .iter()
                .take(30)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

fn flip(store: &Store, seg: usize, offset: usize, mask: u8, what: impl Into<String>) -> Damage {
    let b = store.segs[seg].bytes[offset];
    Damage {
        seg,
        offset,
        bytes: vec![b ^ mask],
        what: what.into(),
    }
}

fn seg_indices(store: &Store, kind: Kind) -> Vec<usize> {
    (0..store.segs.len())
        .filter(|&i| store.segs[i].kind == kind)
        .collect()
}

/// Damage at chosen places of every record of the segments of `kind`.
fn record_cases(store: &Store, kind: Kind, rng: &mut StdRng) -> Vec<Damage> {
    let mut cases = Vec::new();
    for i in seg_indices(store, kind) {
        for (n, r) in store.segs[i].records.iter().enumerate() {
            let body = r.len - RECORD_HEADER;
            let mut places = vec![
                (0, "crc"),
                (4, "length"),
                (8, "type"),
                (RECORD_HEADER, "first body byte"),
                (r.len - 1, "last body byte"),
            ];
            if body > 2 {
                places.push((RECORD_HEADER + rng.random_range(1..body - 1), "body"));
            }
            // Keep the number of cases in check on big segments: every
            // record gets its header damaged, one in three its body.
            if n % 3 != 0 {
                places.truncate(3);
            }
            for (at, what) in places {
                let mask = 1u8 << rng.random_range(0..8);
                cases.push(flip(
                    store,
                    i,
                    r.offset + at,
                    mask,
                    format!("{what} of record type {} at {}", r.ty, r.offset),
                ));
            }
        }
    }
    cases
}

#[test]
fn damaged_segment_headers() {
    let store = store();
    let mut rng = StdRng::seed_from_u64(1);
    let mut cases = Vec::new();
    for i in 0..store.segs.len() {
        for at in 0..HEADER_LEN {
            let mask = 1u8 << rng.random_range(0..8);
            cases.push(flip(store, i, at, mask, "segment header"));
        }
    }
    run_cases("damaged_segment_headers", cases);
}

#[test]
fn damaged_commit_log_records() {
    let store = store();
    let mut rng = StdRng::seed_from_u64(2);
    let mut cases = record_cases(store, Kind::Commits, &mut rng);
    // Every byte of the last record: cut off as a torn tail, or refused.
    let newest = store
        .segs
        .iter()
        .position(|s| s.id == store.newest_commits)
        .unwrap();
    let last = store.last_record;
    for at in 0..last.len {
        cases.push(flip(store, newest, last.offset + at, 0x80, "last record"));
    }
    run_cases("damaged_commit_log_records", cases);
}

#[test]
fn damaged_page_and_blob_records() {
    let store = store();
    let mut rng = StdRng::seed_from_u64(3);
    let cases = record_cases(store, Kind::Pages, &mut rng);
    run_cases("damaged_page_and_blob_records", cases);
}

/// Random places anywhere, one byte flipped or a small range overwritten
/// with zeros or noise.
#[test]
fn damaged_random_ranges() {
    let store = store();
    let seed = env_u64("KIVI_TEST_SEED").unwrap_or(4);
    let mut rng = StdRng::seed_from_u64(seed);
    let total: usize = store.segs.iter().map(|s| s.bytes.len()).sum();
    let mut cases = Vec::new();
    for _ in 0..common::cases(400) {
        let mut at = rng.random_range(0..total);
        let seg = store
            .segs
            .iter()
            .position(|s| {
                if at < s.bytes.len() {
                    true
                } else {
                    at -= s.bytes.len();
                    false
                }
            })
            .unwrap();
        let len = store.segs[seg].bytes.len();
        let n = rng.random_range(1..=16usize).min(len - at);
        let old = &store.segs[seg].bytes[at..at + n];
        let bytes: Vec<u8> = match rng.random_range(0..3) {
            0 => vec![0; n],
            1 => (0..n).map(|_| rng.random()).collect(),
            _ => old.iter().map(|b| b ^ 0xff).collect(),
        };
        if bytes == old {
            continue;
        }
        cases.push(Damage {
            seg,
            offset: at,
            bytes,
            what: format!("random range (seed {seed})"),
        });
    }
    run_cases("damaged_random_ranges", cases);
}

/// The undamaged copy opens, reads right and checks clean: the baseline
/// the other tests rely on.
#[test]
fn undamaged_copy_is_healthy() {
    let store = store();
    for read_only in [false, true] {
        let db = Db::open_with_storage(Arc::new(copy_with(store, None)), opts(read_only)).unwrap();
        assert!(common::dump(&db) == store.full);
        common::assert_healthy(&db, store.full.len());
    }
}

/// A damaged or foreign identity file: a clear error, never a panic, and
/// never segments of one store read as another's.
#[test]
fn damaged_identity_file() {
    let store = store();
    let text = String::from_utf8(store.identity.clone()).unwrap();
    let other_id = {
        let line = text.lines().find(|l| l.starts_with("id ")).unwrap();
        let flipped: String = line[3..]
            .chars()
            .map(|c| if c == '0' { '1' } else { '0' })
            .collect();
        text.replace(&line[3..], &flipped)
    };
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        ("garbage", b"\x00\xffnot a store at all".to_vec()),
        (
            "truncated",
            store.identity[..store.identity.len() / 2].to_vec(),
        ),
        (
            "future format",
            text.lines()
                .map(|l| {
                    if l.starts_with("format ") {
                        "format 99"
                    } else {
                        l
                    }
                })
                .collect::<Vec<_>>()
                .join("\n")
                .into_bytes(),
        ),
        ("another store's id", other_id.into_bytes()),
    ];
    for (what, identity) in cases {
        let mem = copy_with(store, None);
        mem.write_meta("KIVI", &identity).unwrap();
        let r = catch_unwind(AssertUnwindSafe(|| {
            Db::open_with_storage(Arc::new(mem), opts(false))
        }));
        let r =
            r.unwrap_or_else(|p| panic!("{what}: open panicked: {}", panic_message(p.as_ref())));
        match r {
            Ok(_) => panic!("{what}: a store with a bad identity file opened"),
            Err(Error::NotAStore { .. }) if what != "another store's id" => {}
            Err(Error::Corrupt(c)) if what == "another store's id" => {
                assert!(c.what.contains("another store"), "{what}: {c}");
            }
            Err(e) => panic!("{what}: unexpected error {e:?}"),
        }
    }
}

/// Where the records of a segment's bytes end: the start of the zeros that
/// follow the last record, or the end.
fn last_record_end(bytes: &[u8]) -> usize {
    let mut at = HEADER_LEN;
    while at + RECORD_HEADER <= bytes.len() && bytes[at..].iter().any(|&b| b != 0) {
        let len = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
        at += RECORD_HEADER + len;
    }
    at.min(bytes.len())
}
