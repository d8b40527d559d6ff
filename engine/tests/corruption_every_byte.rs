//! Every byte of every file of a small store, damaged one at a time
//! (issue 32, "corruption everywhere"). The store is small enough for that
//! (about 40 KB): commit segments written by three opens, the first
//! holding a checkpoint record, commits before it and after it; page
//! segments of two checkpoints, holding live and dead pages, out-of-line
//! values and pages with deadlines; keys with deadlines that have passed
//! when the copies are read and keys whose deadlines have not; and the
//! identity (`KIVI`).
//!
//! Each case is a copy with one byte XORed with one bit: bit
//! `(offset + pass) % 8`, so consecutive bytes get different bits and passes
//! 0 to 7 together flip every bit of every byte. It is judged as
//! `tests/corruption.rs` judges (`common::damage`):
//! - opening fails with `Error::Corrupt` naming the damaged segment at an
//!   offset no later than the damage, or, for damage to `KIVI`, with
//!   `Error::NotAStore` or a corruption naming `KIVI`; or it succeeds;
//! - then every get answers right or with a corruption error, never a
//!   wrong value (absent for present counts as wrong), and scans both ways
//!   return a correct prefix and then an error;
//! - `check()` reports a problem, unless the damage lies in the last
//!   record of the newest commit segment, which recovery cuts off as a torn
//!   tail (that commit must then be gone, and only it);
//! - nothing panics.
//!
//! By default every 37th byte is a case, so the test stays cheap; the
//! campaign runs all of them:
//! `KIVI_EVERY_BYTE=1 cargo test -p kivi-db --test corruption_every_byte -- --nocapture`
//! (`KIVI_EVERY_BYTE_PASSES=8` for every bit, `KIVI_TEST_THREADS` for the
//! threads, `KIVI_EVERY_BYTE_STRIDE` for another stride).

mod common;

use common::damage::{
    self, guarded, judge_opened_naming, judge_refusal, small_store_opts, write_small_store, Fault,
    History, READ_AT, WRITTEN_AT,
};
use common::mix;
use kivi::storage::{MemoryStorage, Storage};
use kivi::{Clock, Db, Error};
use kivi_storage::Corruption;
use std::sync::Arc;
use std::time::Instant;

const HEADER_LEN: usize = 62;
const RECORD_HEADER: usize = 9;
const IDENTITY: &str = "KIVI";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Identity,
    Commits,
    Pages,
}

struct File {
    name: String,
    kind: Kind,
    /// The segment's id (0 for the identity).
    id: u64,
    bytes: Vec<u8>,
}

struct Store {
    files: Vec<File>,
    /// What the copies must read.
    history: History,
    /// The newest commit segment's file, and its last record's extent.
    newest_commits: usize,
    last_record: (usize, usize),
}

fn build() -> Store {
    let mem = MemoryStorage::new();
    let clock = Clock::manual(WRITTEN_AT);
    let history = write_small_store(&|| {
        Db::open_with_storage(Arc::new(mem.clone()), small_store_opts(false, &clock)).unwrap()
    });

    let mut files = vec![File {
        name: IDENTITY.into(),
        kind: Kind::Identity,
        id: 0,
        bytes: mem.read_meta(IDENTITY).unwrap().unwrap(),
    }];
    let mut last_record = None;
    for id in mem.list_segments().unwrap() {
        let r = mem.open_segment(id).unwrap();
        let mut bytes = vec![0u8; r.size().unwrap() as usize];
        r.read_at(0, &mut bytes).unwrap();
        let kind = match bytes[RECORD_HEADER + 36] {
            1 => Kind::Commits,
            2 => Kind::Pages,
            k => panic!("segment {id} of unknown kind {k}"),
        };
        // The records end to end, to find the last one.
        let mut at = HEADER_LEN;
        let mut last = (0, 0, 0u8);
        let mut types = std::collections::BTreeMap::<u8, usize>::new();
        while at < bytes.len() {
            let len = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
            last = (at, RECORD_HEADER + len, bytes[at + 8]);
            *types.entry(bytes[at + 8]).or_default() += 1;
            at += RECORD_HEADER + len;
        }
        println!(
            "  {}: {kind:?}, {} bytes, records by type {types:?}",
            mem.segment_name(id),
            bytes.len()
        );
        assert_eq!(at, bytes.len(), "segment {id} ends inside a record");
        if kind == Kind::Commits {
            last_record = Some((files.len(), last));
        }
        files.push(File {
            name: mem.segment_name(id),
            kind,
            id,
            bytes,
        });
    }
    let (newest_commits, (offset, len, ty)) = last_record.expect("a commit segment");
    assert_eq!(ty, 2, "the newest commit segment ends with a commit");
    let store = Store {
        files,
        history,
        newest_commits,
        last_record: (offset, len),
    };
    let count = |k: Kind| store.files.iter().filter(|f| f.kind == k).count();
    let total: usize = store.files.iter().map(|f| f.bytes.len()).sum();
    println!(
        "store: {} files, {total} bytes: {IDENTITY}, {} commit segments, {} page segments; {} \
         pairs at the time the copies are read",
        store.files.len(),
        count(Kind::Commits),
        count(Kind::Pages),
        store.history.full.len()
    );
    // What the module comment promises the store holds.
    assert!(
        count(Kind::Commits) >= 3,
        "three opens, three commit segments"
    );
    assert!(
        count(Kind::Pages) >= 2,
        "two opens checkpoint, two page segments"
    );
    assert!((20_000..=60_000).contains(&total), "{total} bytes");
    store
}

/// The storage of a copy, with byte `offset` of file `file` XORed with `mask`.
fn copy_with(store: &Store, file: usize, offset: usize, mask: u8) -> MemoryStorage {
    let mem = MemoryStorage::new();
    for (i, f) in store.files.iter().enumerate() {
        let mut bytes = f.bytes.clone();
        if i == file {
            bytes[offset] ^= mask;
        }
        match f.kind {
            Kind::Identity => mem.write_meta(IDENTITY, &bytes).unwrap(),
            _ => mem.create_segment(f.id).unwrap().append(&bytes).unwrap(),
        }
    }
    mem
}

#[derive(Debug, Clone, Copy)]
struct Case {
    file: usize,
    offset: usize,
    mask: u8,
    read_only: bool,
}

/// What a case came to, when it was handled right.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Open failed with a corruption naming the damaged file.
    Refused,
    /// Open failed: the identity is not one of a store (damage to `KIVI`).
    NotAStore,
    /// Opened; every read right, or failing with corruption.
    Opened {
        read_errors: bool,
        found_by_check: bool,
        torn_tail_cut: bool,
    },
}

fn judge(store: &Store, clock: &Clock, c: &Case) -> Result<Outcome, String> {
    let f = &store.files[c.file];
    let mem = copy_with(store, c.file, c.offset, c.mask);
    let (lr_offset, lr_len) = store.last_record;
    let in_last_record =
        c.file == store.newest_commits && (lr_offset..lr_offset + lr_len).contains(&c.offset);
    let db = match Db::open_with_storage(Arc::new(mem), small_store_opts(c.read_only, clock)) {
        Err(Error::Corrupt(e)) => {
            judge_refusal(&e, &f.name, c.offset + 1)?;
            return Ok(Outcome::Refused);
        }
        Err(Error::NotAStore { .. }) if f.kind == Kind::Identity => {
            return Ok(Outcome::NotAStore);
        }
        Err(e) => return Err(format!("open failed with a non-corruption error: {e:?}")),
        Ok(db) => db,
    };
    let h = &store.history;
    let expected = match in_last_record {
        true => &h.without_last,
        false => &h.full,
    };
    let names = |e: &Corruption| e.file == f.name && e.offset as usize <= c.offset;
    let o = judge_opened_naming(&db, expected, &h.probe, in_last_record, &names)?;
    drop(db);
    Ok(Outcome::Opened {
        read_errors: o.read_errors,
        found_by_check: o.found_by_check,
        torn_tail_cut: in_last_record && !o.found_by_check,
    })
}

#[derive(Debug, Default)]
struct Tally {
    cases: u64,
    refused_naming_the_file: u64,
    identity_not_a_store: u64,
    opened: u64,
    opened_read_errors: u64,
    opened_found_by_check: u64,
    torn_tail_cut: u64,
    wrong: u64,
    panics: u64,
    other_failures: u64,
}

#[test]
fn every_byte_of_every_file() {
    let started = Instant::now();
    let store = build();
    let clock = Clock::manual(READ_AT);
    let stride = damage::every_byte_stride(37);
    let mut cases = Vec::new();
    let mut n = 0usize;
    for pass in damage::every_byte_passes() {
        for (file, f) in store.files.iter().enumerate() {
            for offset in 0..f.bytes.len() {
                n += 1;
                if !(n - 1).is_multiple_of(stride) {
                    continue;
                }
                cases.push(Case {
                    file,
                    offset,
                    mask: damage::rotating_mask(offset, pass),
                    // A quarter of the copies opened read-only, spread
                    // over the files and bits.
                    read_only: mix(n as u64).is_multiple_of(4),
                });
            }
        }
    }
    let results = damage::par_map(&cases, |_, c| guarded(|| judge(&store, &clock, c)));
    let mut t = Tally::default();
    let mut failures = Vec::new();
    for (c, r) in cases.iter().zip(results) {
        t.cases += 1;
        match r {
            Ok(Outcome::Refused) => t.refused_naming_the_file += 1,
            Ok(Outcome::NotAStore) => t.identity_not_a_store += 1,
            Ok(Outcome::Opened {
                read_errors,
                found_by_check,
                torn_tail_cut,
            }) => {
                t.opened += 1;
                t.opened_read_errors += u64::from(read_errors);
                t.opened_found_by_check += u64::from(found_by_check);
                t.torn_tail_cut += u64::from(torn_tail_cut);
            }
            Err(e) => {
                match &e {
                    Fault::Panicked(_) => t.panics += 1,
                    Fault::Judged(m) if damage::is_wrong(m) => t.wrong += 1,
                    Fault::Judged(_) => t.other_failures += 1,
                }
                let f = &store.files[c.file];
                failures.push(format!(
                    "{} ({:?}) offset {} ^{:02x}, read_only={}: {e}",
                    f.name, f.kind, c.offset, c.mask, c.read_only
                ));
            }
        }
    }
    println!(
        "every_byte_of_every_file: stride {stride}, passes {:?}, {} threads, {:.1} s: {t:?}",
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
    // The stride must not have skipped what the test is about.
    assert!(t.refused_naming_the_file > 0 && t.opened_found_by_check > 0);
}

/// Damage to the identity is reported as the identity's, whatever it
/// makes of it (the campaign found such damage reported as the first
/// segment's, or not at all): another store's id is a corruption naming
/// `KIVI`, as is an older format than the segments were written in
/// (before this, a writable open "upgraded" it back and read-only opens
/// went on); bytes that decode to the same identity but are not as kivi
/// writes them (an upper-case hex digit) are refused.
#[test]
fn a_damaged_identity_is_reported_as_the_identitys() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::manual(WRITTEN_AT);
    let db = Db::open(dir.path(), small_store_opts(false, &clock)).unwrap();
    db.put(b"k", b"v").unwrap();
    db.checkpoint().unwrap();
    db.close().unwrap();
    let path = dir.path().join(IDENTITY);
    let orig = String::from_utf8(std::fs::read(&path).unwrap()).unwrap();
    let id_at = orig.find("\nid ").unwrap() + 4;
    let digit = orig.as_bytes()[id_at];
    let other_digit = if digit == b'0' { "1" } else { "0" };
    let another_id = format!("{}{other_digit}{}", &orig[..id_at], &orig[id_at + 1..]);
    let older = orig.replace("format 5", "format 4");
    let upper = match orig[id_at..].find(|c: char| c.is_ascii_lowercase()) {
        Some(i) => {
            orig[..id_at + i].to_string()
                + &orig[id_at + i..=id_at + i].to_uppercase()
                + &orig[id_at + i + 1..]
        }
        None => orig.replace('\n', "\r\n"), // no hex letter in this id
    };
    let named = path.display().to_string();
    for read_only in [false, true] {
        let opts = small_store_opts(read_only, &clock);
        for (what, text, expect) in [
            ("another store's id", &another_id, "another store"),
            ("an older format", &older, "format 4"),
        ] {
            std::fs::write(&path, text).unwrap();
            match Db::open(dir.path(), opts.clone()) {
                Err(Error::Corrupt(c)) => {
                    assert_eq!(c.file, named, "{what}: {c}");
                    assert!(c.what.contains(expect), "{what}: {c}");
                }
                other => panic!("{what}, read_only={read_only}: {:?}", other.map(|_| ())),
            }
            assert_eq!(&std::fs::read_to_string(&path).unwrap(), text, "{what}");
        }
        std::fs::write(&path, &upper).unwrap();
        match Db::open(dir.path(), opts.clone()) {
            Err(Error::NotAStore { reason, .. }) => assert!(reason.contains("damaged"), "{reason}"),
            other => panic!("{upper:?}: {:?}", other.map(|_| ())),
        }
    }
    std::fs::write(&path, &orig).unwrap();
    let db = Db::open(dir.path(), small_store_opts(true, &clock)).unwrap();
    assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
}
