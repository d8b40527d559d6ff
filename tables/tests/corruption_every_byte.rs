//! Every byte of every file of small sealed tables, damaged one at a time
//! (issue 32, "corruption everywhere"): an uncompressed, a snappy and a zstd
//! table of the same operations (puts, overwrites, deletes, values with
//! two-byte lengths), each with its log (`.spl`), index (`.spi`) and kivi's
//! checksum sidecar (`.kvsum`).
//!
//! Each case is a copy with one byte XORed with one bit, bit
//! `(offset + pass) % 8` (passes 0 to 7 together flip every bit of every
//! byte). The copy is opened, every key is read with `get` and with
//! `get_many`, and the table is iterated:
//! - every answer is right or an error naming the damaged file; nothing
//!   panics;
//! - `verify` with the sidecar reports a problem naming the damaged file,
//!   whatever byte it was.
//!
//! sparkey's format has no checksums, so a flipped byte of a key or a
//! value (in an uncompressed log), or of a compressed block's contents
//! that still decompresses, reads as a different key or value: a wrong
//! answer no reader of the format can tell (`tests/hostile.rs`, "by
//! design"). The campaign counts those apart, as *silent: payload*, and
//! requires each to be reported by `verify` with the sidecar, which is
//! what the sidecar is for. A wrong answer from any other byte (a header,
//! a length, a block's framing, the index) is a failure. It also counts how
//! many cases `verify` finds without the sidecar (structural checks only).
//!
//! By default every 37th byte is a case; the campaign runs all of them:
//! `KIVI_EVERY_BYTE=1 cargo test -p kivi-tables --test corruption_every_byte -- --nocapture`
//! (`KIVI_EVERY_BYTE_PASSES=8` for every bit, `KIVI_TEST_THREADS` for the
//! threads, `KIVI_EVERY_BYTE_STRIDE` for another stride).

use kivi_tables::{
    sidecar_path, table_paths, verify, CheckKind, Compression, Error, Table, TableWriter,
    WriterOptions, INDEX_HEADER_LEN, LOG_HEADER_LEN,
};
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

fn env_usize(name: &str) -> Option<usize> {
    let v = std::env::var(name).ok()?;
    Some(
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
    )
}

fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn key(i: u32) -> Vec<u8> {
    format!("key/{i:04}").into_bytes()
}

fn value(i: u32, round: u32) -> Vec<u8> {
    // Two values over 127 bytes: their lengths take two VLQ bytes.
    let len = if i % 70 == 3 {
        200 + i as usize
    } else {
        4 + (i * 7 + round * 3) as usize % 60
    };
    let mut x = mix(u64::from(i) << 8 | u64::from(round));
    (0..len)
        .map(|_| {
            x = mix(x);
            x as u8
        })
        .collect()
}

/// The operations every table holds: key, then the value (`None`: delete).
fn operations() -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let mut ops: Vec<_> = (0..150).map(|i| (key(i), Some(value(i, 0)))).collect();
    for j in 0..20 {
        let i = (j * 37 + 5) % 150;
        ops.push((key(i), Some(value(i, 1)))); // the first put is now garbage
    }
    for j in 0..12 {
        ops.push((key((j * 53 + 11) % 150), None));
    }
    ops.push((key(11), Some(value(11, 2)))); // deleted above, put again
    ops.push((key(999), None)); // a delete of a key never put
    ops
}

struct Built {
    name: &'static str,
    /// `.spl`, `.spi`, `.kvsum`, as written.
    files: [(PathBuf, Vec<u8>); 3],
    /// For an uncompressed log: the byte ranges of keys and values.
    payload: Vec<std::ops::Range<usize>>,
    /// For a compressed log: the ranges of blocks' contents (after each
    /// block's length).
    blocks: Vec<std::ops::Range<usize>>,
}

struct Tables {
    built: Vec<Built>,
    /// The live pairs, in log order (what iteration returns).
    live: Vec<(Vec<u8>, Vec<u8>)>,
    /// Every key of the operations, and some never written.
    probe: Vec<Vec<u8>>,
    _dir: tempfile::TempDir,
}

fn build() -> Tables {
    let dir = tempfile::tempdir().unwrap();
    let ops = operations();
    let mut built = Vec::new();
    for (name, compression) in [
        ("plain", Compression::None),
        ("snappy", Compression::Snappy),
        ("zstd", Compression::Zstd),
    ] {
        let base = dir.path().join(name);
        let opts = WriterOptions {
            compression,
            // Small blocks: several of them, and entries across them.
            block_size: 512,
            ..WriterOptions::default()
        };
        let mut w = TableWriter::create(&base, opts).unwrap();
        for (k, v) in &ops {
            match v {
                Some(v) => w.put(k, v).unwrap(),
                None => w.delete(k).unwrap(),
            }
        }
        w.finish().unwrap();
        let (log, index) = table_paths(&base);
        let side = sidecar_path(&base);
        let read = |p: &Path| (p.to_path_buf(), std::fs::read(p).unwrap());
        let files = [read(&log), read(&index), read(&side)];
        let r = verify(&base);
        assert!(r.kind == CheckKind::Checksummed && r.is_ok(), "{r:?}");
        let (payload, blocks) = layout(&files[0].1, compression);
        built.push(Built {
            name,
            files,
            payload,
            blocks,
        });
    }
    let mut last: BTreeMap<&[u8], usize> = BTreeMap::new();
    for (i, (k, _)) in ops.iter().enumerate() {
        last.insert(k, i);
    }
    let live = ops
        .iter()
        .enumerate()
        .filter(|(i, (k, v))| v.is_some() && last[k.as_slice()] == *i)
        .map(|(_, (k, v))| (k.clone(), v.clone().unwrap()))
        .collect();
    let mut probe: Vec<Vec<u8>> = (0..160).map(key).collect();
    probe.extend([b"".to_vec(), b"key/".to_vec(), key(999), b"zzz".to_vec()]);
    Tables {
        built,
        live,
        probe,
        _dir: dir,
    }
}

fn vlq(bytes: &[u8], at: &mut usize) -> usize {
    let (v, n) = kivi_tables::vlq::decode(&bytes[*at..]).unwrap();
    *at += n;
    v as usize
}

/// Where the keys and values of an uncompressed log lie, or the contents
/// of a compressed log's blocks.
type Ranges = Vec<std::ops::Range<usize>>;
fn layout(log: &[u8], compression: Compression) -> (Ranges, Ranges) {
    let (mut payload, mut blocks) = (Vec::new(), Vec::new());
    let mut at = LOG_HEADER_LEN;
    while at < log.len() {
        if compression != Compression::None {
            let len = vlq(log, &mut at);
            blocks.push(at..at + len);
            at += len;
            continue;
        }
        let a = vlq(log, &mut at);
        let b = vlq(log, &mut at);
        let (k, v) = if a == 0 { (b, 0) } else { (a - 1, b) };
        payload.push(at..at + k + v);
        at += k + v;
    }
    assert_eq!(at, log.len(), "the log parses to its end");
    (payload, blocks)
}

#[derive(Debug, Clone, Copy)]
struct Case {
    table: usize,
    file: usize,
    offset: usize,
    mask: u8,
}

/// What a case came to, when it was handled right.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Open failed, naming the damaged file.
    Refused,
    /// Opened; every answer right.
    Right,
    /// Opened; some reads failed naming the damaged file, no answer wrong.
    ReadErrors,
    /// Some answer wrong, where reads cannot tell (the format has no
    /// checksum): verify with the sidecar reported it. Which part of the
    /// files the byte is in.
    Silent(Region),
}

/// The parts of a table's files, for counting silent wrong answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Region {
    LogHeader,
    /// An uncompressed log's keys and values.
    KeysAndValues,
    /// An uncompressed log's entry lengths (VLQs).
    EntryLengths,
    /// A compressed log's blocks' contents.
    BlockContents,
    /// A compressed log's block lengths.
    BlockLengths,
    IndexHeader,
    IndexSlots,
    Sidecar,
}

fn region(b: &Built, c: &Case) -> Region {
    let compressed = !b.blocks.is_empty();
    let within = |ranges: &[std::ops::Range<usize>]| ranges.iter().any(|r| r.contains(&c.offset));
    match c.file {
        0 if c.offset < LOG_HEADER_LEN => Region::LogHeader,
        0 if compressed && within(&b.blocks) => Region::BlockContents,
        0 if compressed => Region::BlockLengths,
        0 if within(&b.payload) => Region::KeysAndValues,
        0 => Region::EntryLengths,
        1 if c.offset < INDEX_HEADER_LEN => Region::IndexHeader,
        1 => Region::IndexSlots,
        _ => Region::Sidecar,
    }
}

/// Whether `e` names `path`: as the file it is about, or in its message
/// (an error met where an index slot points names both files: the slot or
/// the log there may be what is damaged; so does a disagreement of the
/// two headers).
fn names(e: &Error, path: &Path) -> bool {
    match e {
        Error::Corrupt { path: p, .. } | Error::Io { path: p, .. } if p == path => true,
        Error::Corrupt { .. } | Error::IdentifierMismatch { .. } => {
            e.to_string().contains(&path.display().to_string())
        }
        _ => false,
    }
}

/// Every read of the table against `t`'s answers: the number of wrong
/// answers, and whether some read failed. An error not naming `damaged`
/// is an `Err`.
fn read_everything(tables: &Tables, t: &Table, damaged: &Path) -> Result<(usize, bool), String> {
    let model: BTreeMap<&[u8], &[u8]> = tables
        .live
        .iter()
        .map(|(k, v)| (k.as_slice(), v.as_slice()))
        .collect();
    let mut wrong = 0;
    let mut errors = false;
    let mut bad = |e: Error, what: &str| -> Result<(), String> {
        if !names(&e, damaged) {
            return Err(format!(
                "{what} failed with an error not naming {}: {e}",
                damaged.display()
            ));
        }
        errors = true;
        Ok(())
    };
    for k in &tables.probe {
        match t.get(k) {
            Ok(got) => wrong += usize::from(got.as_deref() != model.get(k.as_slice()).copied()),
            Err(e) => bad(e, "get")?,
        }
    }
    match t.get_many(&tables.probe) {
        Ok(all) => {
            for (k, got) in tables.probe.iter().zip(all) {
                wrong += usize::from(got.as_deref() != model.get(k.as_slice()).copied());
            }
        }
        Err(e) => bad(e, "get_many")?,
    }
    // Iteration: every pair returned is a live one, in log order; the
    // pairs skipped are reported by an error (at the latest when the
    // iteration ends: the index says how many there are), or there are none.
    let mut it = t.iter();
    let (mut next, mut returned) = (0, 0);
    loop {
        match it.next() {
            Ok(None) => {
                wrong += usize::from(returned != tables.live.len());
                break;
            }
            Ok(Some((k, v))) => {
                match tables.live[next..]
                    .iter()
                    .position(|(a, b)| (a.as_slice(), b.as_slice()) == (k, v))
                {
                    Some(i) => next += i + 1,
                    None => wrong += 1,
                }
                returned += 1;
                if returned > tables.live.len() + 1000 {
                    return Err("iteration does not end".into());
                }
            }
            Err(e) => {
                bad(e, "iteration")?;
                break;
            }
        }
    }
    Ok((wrong, errors))
}

/// A case's outcome and whether `verify` without the sidecar found the
/// damage, or what is wrong.
type Judged = Result<(Outcome, bool), String>;

/// Writes the case's copy into `dir` and judges it.
fn judge(tables: &Tables, c: &Case, dir: &Path) -> Judged {
    let b = &tables.built[c.table];
    let mut paths = Vec::new();
    for (i, (orig, bytes)) in b.files.iter().enumerate() {
        let p = dir.join(orig.file_name().unwrap());
        let mut bytes = bytes.clone();
        if i == c.file {
            bytes[c.offset] ^= c.mask;
        }
        // A new file each time, not the last one truncated and rewritten,
        // which ext4 writes back to the disk at close (auto_da_alloc).
        let _ = std::fs::remove_file(&p);
        std::fs::write(&p, &bytes).unwrap();
        paths.push(p);
    }
    let damaged = &paths[c.file];
    let base = dir.join(b.name);
    let read = match Table::open(&base) {
        Err(e) if names(&e, damaged) => None,
        Err(e) => {
            return Err(format!(
                "open failed with an error not naming {}: {e}",
                damaged.display()
            ))
        }
        Ok(t) => Some(read_everything(tables, &t, damaged)?),
    };
    let checked = verify(&base);
    let file_name = damaged.display().to_string();
    if !checked.problems.iter().any(|p| p.contains(&file_name)) {
        return Err(format!(
            "verify with the sidecar does not report the damage in {file_name}: {:?}",
            checked.problems
        ));
    }
    std::fs::remove_file(&paths[2]).unwrap();
    let structural = verify(&base);
    assert_eq!(structural.kind, CheckKind::Structural);
    let found_without_sidecar = !structural.is_ok();
    let outcome = match read {
        None => Outcome::Refused,
        Some((0, false)) => Outcome::Right,
        Some((0, true)) => Outcome::ReadErrors,
        Some((wrong, _)) => match region(b, c) {
            // Reads never look at the sidecar.
            Region::Sidecar => return Err(format!("{wrong} wrong answers")),
            r => Outcome::Silent(r),
        },
    };
    Ok((outcome, found_without_sidecar))
}

#[derive(Debug, Default)]
struct Tally {
    cases: u64,
    refused_naming_the_file: u64,
    opened_all_right: u64,
    opened_read_errors_naming_the_file: u64,
    /// Wrong answers reads cannot tell, by where the byte is; every one
    /// reported by verify with the sidecar.
    silent_wrong_caught_by_sidecar: BTreeMap<Region, u64>,
    found_by_verify_with_sidecar: u64,
    found_by_verify_without_sidecar: u64,
    failures: u64,
    panics: u64,
}

#[test]
fn every_byte_of_every_table_file() {
    let started = Instant::now();
    let tables = build();
    let stride = match std::env::var("KIVI_EVERY_BYTE").as_deref() {
        Ok("1") => 1,
        _ => env_usize("KIVI_EVERY_BYTE_STRIDE").unwrap_or(37).max(1),
    };
    let passes: Vec<usize> = match env_usize("KIVI_EVERY_BYTE_PASSES") {
        Some(n) => (0..n.clamp(1, 8)).collect(),
        None => vec![env_usize("KIVI_EVERY_BYTE_PASS").unwrap_or(0) % 8],
    };
    let mut cases = Vec::new();
    let mut n = 0usize;
    for &pass in &passes {
        for (table, b) in tables.built.iter().enumerate() {
            for (file, (_, bytes)) in b.files.iter().enumerate() {
                for offset in 0..bytes.len() {
                    n += 1;
                    if (n - 1).is_multiple_of(stride) {
                        cases.push(Case {
                            table,
                            file,
                            offset,
                            mask: 1 << ((offset + pass) % 8),
                        });
                    }
                }
            }
        }
    }
    let threads = env_usize("KIVI_TEST_THREADS")
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Judged>>> = Mutex::new(vec![None; cases.len()]);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let dir = tempfile::tempdir().unwrap();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(c) = cases.get(i) else { return };
                    let r = catch_unwind(AssertUnwindSafe(|| judge(&tables, c, dir.path())))
                        .unwrap_or_else(|p| {
                            let m = p
                                .downcast_ref::<String>()
                                .cloned()
                                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                                .unwrap_or_default();
                            Err(format!("PANIC: {m}"))
                        });
                    results.lock().unwrap()[i] = Some(r);
                }
            });
        }
    });
    let mut t = Tally::default();
    let mut failures = Vec::new();
    for (c, r) in cases.iter().zip(results.into_inner().unwrap()) {
        t.cases += 1;
        match r.expect("every case ran") {
            Ok((outcome, without_sidecar)) => {
                t.found_by_verify_with_sidecar += 1;
                t.found_by_verify_without_sidecar += u64::from(without_sidecar);
                match outcome {
                    Outcome::Refused => t.refused_naming_the_file += 1,
                    Outcome::Right => t.opened_all_right += 1,
                    Outcome::ReadErrors => t.opened_read_errors_naming_the_file += 1,
                    Outcome::Silent(r) => {
                        *t.silent_wrong_caught_by_sidecar.entry(r).or_default() += 1
                    }
                }
            }
            Err(e) => {
                if e.starts_with("PANIC") {
                    t.panics += 1;
                } else {
                    t.failures += 1;
                }
                let b = &tables.built[c.table];
                failures.push(format!(
                    "{} {} offset {} ^{:02x}: {e}",
                    b.name,
                    b.files[c.file].0.extension().unwrap().to_string_lossy(),
                    c.offset,
                    c.mask
                ));
            }
        }
    }
    let sizes: Vec<String> = tables
        .built
        .iter()
        .map(|b| {
            let s: Vec<String> = b.files.iter().map(|(_, f)| f.len().to_string()).collect();
            format!("{} {}", b.name, s.join("+"))
        })
        .collect();
    println!(
        "every_byte_of_every_table_file: tables (spl+spi+kvsum bytes) {sizes:?}; stride \
         {stride}, passes {passes:?}, {threads} threads, {:.1} s: {t:?}",
        started.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{} of {} damaged copies handled wrongly:\n{}",
        failures.len(),
        cases.len(),
        failures[..failures.len().min(40)].join("\n")
    );
    assert!(t.refused_naming_the_file > 0 && t.opened_read_errors_naming_the_file > 0);
}

/// A plain table of a few short pairs, for the focused tests below; its
/// files' bytes, and where the entry of `key/0003` starts in the log.
fn small_table(dir: &Path) -> (PathBuf, Vec<u8>, Vec<u8>, usize) {
    let base = dir.join("t");
    let mut w = TableWriter::create(&base, WriterOptions::default()).unwrap();
    for i in 0..8 {
        w.put(&key(i), format!("value {i}").as_bytes()).unwrap();
    }
    w.finish().unwrap();
    let (log, index) = table_paths(&base);
    let log = std::fs::read(log).unwrap();
    let at = log
        .windows(8)
        .position(|w| w == key(3).as_slice())
        .expect("key/0003 in the log")
        - 2; // its two one-byte lengths
    (base, log, std::fs::read(index).unwrap(), at)
}

/// An index slot is made of its entry's key's hash: a slot pointing at an
/// entry whose key hashes otherwise is damage, reported naming both files
/// (the campaign found such lookups answering "absent" for a present key:
/// a flipped byte of the key in the log, or of the slot's address), as is
/// a slot pointing at a DELETE.
#[test]
fn a_slot_whose_entry_hashes_otherwise_is_an_error_not_an_absent_key() {
    let dir = tempfile::tempdir().unwrap();
    let (base, log, index, at) = small_table(dir.path());
    let (log_path, index_path) = table_paths(&base);
    let both = |e: &Error| {
        let m = e.to_string();
        m.contains(&log_path.display().to_string()) && m.contains(&index_path.display().to_string())
    };
    // A byte of key/0003's key in the log.
    let mut damaged = log.clone();
    damaged[at + 2 + 5] ^= 0x01;
    std::fs::write(&log_path, &damaged).unwrap();
    let t = Table::open(&base).unwrap();
    let e = t
        .get(&key(3))
        .expect_err("a damaged key is not an absent one");
    assert!(both(&e), "{e}");
    let e = t.get_many(&[key(3)]).expect_err("get_many as get");
    assert!(both(&e), "{e}");
    drop(t);
    std::fs::write(&log_path, &log).unwrap();
    // key/0003's entry made a DELETE (the campaign found a compressed
    // block damaged this way reported as the index's alone).
    let mut damaged = log.clone();
    damaged[at] = 0;
    std::fs::write(&log_path, &damaged).unwrap();
    let e = Table::open(&base)
        .unwrap()
        .get(&key(3))
        .expect_err("a DELETE");
    assert!(both(&e) && e.to_string().contains("DELETE"), "{e}");
    std::fs::write(&log_path, &log).unwrap();
    // key/0003's slot pointing at key/0004's entry instead.
    let addr = (at as u32).to_le_bytes();
    let slot = (INDEX_HEADER_LEN..index.len())
        .step_by(8)
        .find(|&s| index[s + 4..s + 8] == addr)
        .expect("key/0003's slot");
    let next = at + 2 + 8 + "value 3".len();
    let mut damaged = index.clone();
    damaged[slot + 4..slot + 8].copy_from_slice(&(next as u32).to_le_bytes());
    std::fs::write(&index_path, &damaged).unwrap();
    let t = Table::open(&base).unwrap();
    let e = t.get(&key(3)).expect_err("a redirected slot is an error");
    assert!(both(&e), "{e}");
    assert_eq!(t.get(&key(4)).unwrap().as_deref(), Some(&b"value 4"[..]));
}

/// Iteration returns what it finds live, and says so at its end when that
/// is less than the index holds (the campaign found a damaged entry
/// length making iteration skip pairs silently, the entries after it read
/// as others, none of them live; and a damaged slot hiding its entry).
#[test]
fn iteration_that_finds_fewer_live_pairs_than_the_index_holds_fails() {
    let dir = tempfile::tempdir().unwrap();
    let (base, log, index, at) = small_table(dir.path());
    let (log_path, index_path) = table_paths(&base);
    // key/0003's lengths moved by a byte (key 7, value 8, as long in all):
    // its entry reads as a pair of another key, which no slot points at.
    let mut damaged = log.clone();
    damaged[at..at + 2].copy_from_slice(&[8, 8]);
    std::fs::write(&log_path, &damaged).unwrap();
    let t = Table::open(&base).unwrap();
    let e = t.to_vec().expect_err("pairs went missing");
    assert!(e.to_string().contains("live"), "{e}");
    drop(t);
    std::fs::write(&log_path, &log).unwrap();
    // A slot's stored hash: its entry no longer looks live.
    let mut damaged = index.clone();
    let slot = (INDEX_HEADER_LEN..index.len())
        .step_by(8)
        .find(|&s| index[s + 4..s + 8] != [0; 4])
        .unwrap();
    damaged[slot] ^= 0x01;
    std::fs::write(&index_path, &damaged).unwrap();
    let e = Table::open(&base)
        .unwrap()
        .to_vec()
        .expect_err("a pair went missing");
    assert!(e.to_string().contains("live"), "{e}");
}

/// Errors about a slot's address name the index, errors of iteration cut
/// short by the index's data_end name the index too, and disagreements of
/// the two headers name both files (the campaign found them naming only
/// the other file: the log for an address outside it or an entry running
/// past the index's data_end, the index for a damaged log header), and a log whose compression does not match its index's
/// addresses is refused at open, not read as another log (the campaign
/// found a snappy log flipped to "uncompressed" answering "absent").
#[test]
fn errors_name_the_file_that_may_be_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let (base, log, index, at) = small_table(dir.path());
    let (log_path, index_path) = table_paths(&base);
    let addr = (at as u32).to_le_bytes();
    let slot = (INDEX_HEADER_LEN..index.len())
        .step_by(8)
        .find(|&s| index[s + 4..s + 8] == addr)
        .unwrap();
    let mut damaged = index.clone();
    damaged[slot + 7] ^= 0x40;
    std::fs::write(&index_path, &damaged).unwrap();
    match Table::open(&base).unwrap().get(&key(3)) {
        Err(Error::Corrupt { path, what, .. }) => {
            assert_eq!(path, index_path, "{what}");
            assert!(what.contains("outside"), "{what}");
        }
        other => panic!("{other:?}"),
    }
    // The index's data_end in the middle of key/0003's entry: iteration,
    // which reads the log as far as it, names the index too.
    let mut damaged = index.clone();
    damaged[20..28].copy_from_slice(&(at as u64 + 5).to_le_bytes());
    std::fs::write(&index_path, &damaged).unwrap();
    let e = Table::open(&base)
        .unwrap()
        .to_vec()
        .expect_err("a cut entry");
    assert!(
        e.to_string().contains(&index_path.display().to_string()),
        "{e}"
    );
    std::fs::write(&index_path, &index).unwrap();
    let log_named = |e: Error| {
        let m = e.to_string();
        assert!(m.contains(&log_path.display().to_string()), "{m}");
    };
    for (at, what) in [
        (12, "file identifier"),
        (32, "data_end"),
        (48, "max_value_len"),
    ] {
        let mut damaged = log.clone();
        damaged[at] ^= 0x01;
        std::fs::write(&log_path, &damaged).unwrap();
        log_named(Table::open(&base).expect_err(what));
    }
    let zbase = dir.path().join("z");
    let opts = WriterOptions {
        compression: Compression::Snappy,
        ..WriterOptions::default()
    };
    let mut w = TableWriter::create(&zbase, opts).unwrap();
    for i in 0..8 {
        w.put(&key(i), b"v").unwrap();
    }
    w.finish().unwrap();
    let (zlog, _) = table_paths(&zbase);
    let mut bytes = std::fs::read(&zlog).unwrap();
    bytes[64] = 0; // compression: none
    std::fs::write(&zlog, &bytes).unwrap();
    let e = Table::open(&zbase).expect_err("an index of a compressed log");
    assert!(e.to_string().contains("entry_block_bits"), "{e}");
}
