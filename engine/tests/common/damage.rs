//! Judging damaged copies of a store, shared by the corruption suites:
//! `tests/corruption.rs` (damage at chosen and random places) and the
//! every-byte campaigns (`tests/corruption_every_byte.rs`,
//! `tests/object_corruption_every_byte.rs`). A copy that opened must answer
//! every read right or with a corruption error, never with a wrong value;
//! `check()` must then report the damage unless the case is one a reader
//! cannot tell from a torn write; nothing may panic.

use super::{panic_message, show, take_library_panics, watch_library_panics, Model};
use kivi::{Clock, Db, Deadline, Error, Options, WriteBatch};
use kivi_storage::Corruption;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// How the messages of wrong answers start (see [`is_wrong`]).
pub const WRONG: &str = "wrong data: ";

/// Whether a judge's message is about a wrong answer, rather than an error
/// of the wrong kind or damage that went unnoticed.
pub fn is_wrong(message: &str) -> bool {
    message.starts_with(WRONG)
}

/// Reads every key of `probe` and scans the whole store forward and in
/// reverse, against `expected`. Every get must return the right answer (an
/// absent answer for a present key is wrong too) or a corruption error;
/// each scan must return a correct prefix (suffix, in reverse) and then,
/// if anything, a corruption error. Returns whether some read failed with
/// corruption; `Err` names the first wrong answer or other error.
pub fn read_all(db: &Db, expected: &Model, probe: &[Vec<u8>]) -> Result<bool, String> {
    read_all_naming(db, expected, probe, &|_| true)
}

/// [`read_all`], where every corruption a read reports must also satisfy
/// `names_the_damage` (name the damaged file, at a place before the damage).
pub fn read_all_naming(
    db: &Db,
    expected: &Model,
    probe: &[Vec<u8>],
    names_the_damage: &dyn Fn(&Corruption) -> bool,
) -> Result<bool, String> {
    let mut problems_seen = false;
    let mut bad_read = |e: Error, what: &str| -> Result<(), String> {
        match &e {
            Error::Corrupt(c) if !names_the_damage(c) => {
                return Err(format!(
                    "{what} reports the corruption elsewhere than the damage: {c}"
                ))
            }
            Error::Corrupt(_) => {}
            _ => return Err(format!("{what} failed with a non-corruption error: {e}")),
        }
        problems_seen = true;
        Ok(())
    };
    for k in probe {
        match db.get(k) {
            Ok(got) => {
                if got.as_ref() != expected.get(k) {
                    return Err(format!(
                        "{WRONG}get({}) returned {:?}, expected {:?}",
                        show(k),
                        got.map(|v| show(&v)),
                        expected.get(k).map(|v| show(v))
                    ));
                }
            }
            Err(e) => bad_read(e, &format!("get({})", show(k)))?,
        }
    }
    let want: Vec<(&Vec<u8>, &Vec<u8>)> = expected.iter().collect();
    for (dir, items) in [
        ("forward", db.iter().collect::<Vec<_>>()),
        ("reverse", db.iter().rev().collect::<Vec<_>>()),
    ] {
        for (i, item) in items.into_iter().enumerate() {
            let w = if dir == "forward" {
                want.get(i)
            } else {
                want.len().checked_sub(i + 1).and_then(|j| want.get(j))
            };
            match item {
                Ok((k, v)) => {
                    if Some((&k, &v)) != w.map(|(a, b)| (*a, *b)) {
                        return Err(format!(
                            "{WRONG}{dir} scan item {i} is {} = {} bytes, expected {:?}",
                            show(&k),
                            v.len(),
                            w.map(|(k, v)| format!("{} = {} bytes", show(k), v.len()))
                        ));
                    }
                }
                Err(e) => {
                    bad_read(e, &format!("{dir} scan"))?;
                    break;
                }
            }
        }
    }
    Ok(problems_seen)
}

/// Whether `db.check()` reports a problem (problems in its report, or a
/// corruption error); `Err` if it fails any other way.
pub fn check_finds(db: &Db) -> Result<bool, String> {
    match db.check() {
        Ok(r) => Ok(!r.is_healthy()),
        Err(e) if e.is_corruption() => Ok(true),
        Err(e) => Err(format!("check failed with a non-corruption error: {e}")),
    }
}

/// Judges an open refused with `c`: it must name `file`, the damaged one,
/// at an offset no later than `damage_end`, where the damage ends (a record
/// is reported at its start, which may lie before the damaged byte).
pub fn judge_refusal(c: &Corruption, file: &str, damage_end: usize) -> Result<(), String> {
    if c.file != file {
        return Err(format!(
            "open reports the corruption in {} (offset {}: {}), the damage is in {file}",
            c.file, c.offset, c.what
        ));
    }
    if c.offset as usize > damage_end {
        return Err(format!(
            "open reports the corruption at an offset past the damage: {c}"
        ));
    }
    Ok(())
}

/// What reading and checking a damaged copy that opened found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opened {
    /// Some read failed with a corruption error.
    pub read_errors: bool,
    /// `check()` reported a problem.
    pub found_by_check: bool,
}

/// Judges a damaged copy that opened: [`read_all`] against `expected`, then
/// [`check_finds`]. Reads that failed must be matched by check reporting
/// something; when every read was right, check must still report the
/// damage unless `may_go_unnoticed` (the one place a reader cannot tell
/// damage from a torn write, which recovery cuts off).
pub fn judge_opened(
    db: &Db,
    expected: &Model,
    probe: &[Vec<u8>],
    may_go_unnoticed: bool,
) -> Result<Opened, String> {
    judge_opened_naming(db, expected, probe, may_go_unnoticed, &|_| true)
}

/// [`judge_opened`], reads reporting corruption only as `names_the_damage`
/// allows (see [`read_all_naming`]).
pub fn judge_opened_naming(
    db: &Db,
    expected: &Model,
    probe: &[Vec<u8>],
    may_go_unnoticed: bool,
    names_the_damage: &dyn Fn(&Corruption) -> bool,
) -> Result<Opened, String> {
    let read_errors = read_all_naming(db, expected, probe, names_the_damage)?;
    let found_by_check = check_finds(db)?;
    if !found_by_check && read_errors {
        return Err("reads failed with corruption, yet check() reports nothing".into());
    }
    if !found_by_check && !may_go_unnoticed {
        return Err(
            "the store opened, every read was right and check() reports nothing: the damage \
             went unnoticed"
                .into(),
        );
    }
    Ok(Opened {
        read_errors,
        found_by_check,
    })
}

/// Why a case failed: it panicked (on its own thread, or a library thread
/// panicked meanwhile), or its judge found something wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    Panicked(String),
    Judged(String),
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Panicked(m) => write!(f, "PANIC: {m}"),
            Fault::Judged(m) => f.write_str(m),
        }
    }
}

/// Runs one case under `catch_unwind`. A panic of the case, or of a
/// library thread (`kivi-...`) while it ran, is a [`Fault::Panicked`]; the
/// case's own `Err` a [`Fault::Judged`]. When cases run on several threads
/// at once, a library thread's panic is charged to whichever case looks
/// first: run on one thread to pin it on its case.
pub fn guarded<T>(case: impl FnOnce() -> Result<T, String>) -> Result<T, Fault> {
    watch_library_panics();
    let r = catch_unwind(AssertUnwindSafe(case));
    let lib = take_library_panics();
    match r {
        Err(p) => Err(Fault::Panicked(panic_message(p.as_ref()))),
        Ok(_) if !lib.is_empty() => {
            Err(Fault::Panicked(format!("library thread panicked: {lib:?}")))
        }
        Ok(Err(e)) => Err(Fault::Judged(e)),
        Ok(Ok(t)) => Ok(t),
    }
}

/// Threads to run cases on: `KIVI_TEST_THREADS`, else the machine's cores.
pub fn threads() -> usize {
    super::env_u64("KIVI_TEST_THREADS")
        .map(|n| n.max(1) as usize)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// `f` of every case, in the cases' order, computed on [`threads`] threads
/// taking the next case as each finishes one.
pub fn par_map<C: Sync, R: Send>(cases: &[C], f: impl Fn(usize, &C) -> R + Sync) -> Vec<R> {
    let next = AtomicUsize::new(0);
    let out: Mutex<Vec<Option<R>>> = Mutex::new((0..cases.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..threads().min(cases.len().max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(c) = cases.get(i) else { return };
                let r = f(i, c);
                out.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(r);
            });
        }
    });
    out.into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .into_iter()
        .map(|r| r.expect("every case ran"))
        .collect()
}

/// Every `stride`-th of `n` positions (all of them under `KIVI_EVERY_BYTE=1`,
/// the full campaign), and the stride used.
pub fn every_byte_stride(default_stride: usize) -> usize {
    match std::env::var("KIVI_EVERY_BYTE").as_deref() {
        Ok("1") => 1,
        _ => super::env_u64("KIVI_EVERY_BYTE_STRIDE").map_or(default_stride, |s| s.max(1) as usize),
    }
}

/// The mask a campaign XORs into byte `offset` of a file: one bit, rotating
/// with the offset and the pass (`KIVI_EVERY_BYTE_PASS`, default 0), so
/// that passes 0 to 7 together flip every bit of every byte.
pub fn rotating_mask(offset: usize, pass: usize) -> u8 {
    1u8 << ((offset + pass) % 8)
}

/// The passes to run: `KIVI_EVERY_BYTE_PASSES=N` runs passes 0..N (8: every
/// bit of every byte), else the one pass `KIVI_EVERY_BYTE_PASS` (default 0).
pub fn every_byte_passes() -> Vec<usize> {
    if let Some(n) = super::env_u64("KIVI_EVERY_BYTE_PASSES") {
        return (0..n.clamp(1, 8) as usize).collect();
    }
    vec![super::env_u64("KIVI_EVERY_BYTE_PASS").unwrap_or(0) as usize % 8]
}

// ---------------------------------------------------------------------------
// The small store of the every-byte campaigns.
// ---------------------------------------------------------------------------

/// The manual clock's time while the small store is written, and when its
/// copies are read: keys with deadlines between the two have expired.
pub const WRITTEN_AT: u64 = 1_700_000_000_000;
pub const READ_AT: u64 = WRITTEN_AT + 60_000;

/// The options of the small store, written and read on `clock`.
pub fn small_store_opts(read_only: bool, clock: &Clock) -> Options {
    Options {
        page_size: 512,
        cache_bytes: 1 << 20,
        segment_bytes: 64 << 10,
        // Only the explicit checkpoints, so the commits after the last one
        // stay in the log and no checkpoint runs while a copy is read.
        checkpoint_bytes: 1 << 30,
        // No cleaning, so the page segments keep dead pages beside live ones.
        space_amplification_max: 1000.0,
        read_only,
        clock: clock.clone(),
        ..Default::default()
    }
}

/// What the copies of the small store must read at `READ_AT`.
pub struct History {
    /// With every commit.
    pub full: Model,
    /// Without the last one (cut off as a torn tail).
    pub without_last: Model,
    /// Every key ever written, and some never written.
    pub probe: Vec<Vec<u8>>,
}

fn small_key(i: u32) -> Vec<u8> {
    format!("key/{:04}/{}", i, "k".repeat((i % 7) as usize)).into_bytes()
}

fn small_value(i: u32, round: u32) -> Vec<u8> {
    let len = if i.is_multiple_of(41) {
        1100 + (i * 37 + round * 11) as usize % 400 // out of line
    } else {
        8 + (i * 7 + round) as usize % 60
    };
    let mut x = super::mix(u64::from(i) << 8 | u64::from(round));
    (0..len)
        .map(|_| {
            x = super::mix(x);
            x as u8
        })
        .collect()
}

/// A write: key, then the value and its deadline (`None`: a delete).
type Op = (Vec<u8>, Option<(Vec<u8>, Option<u64>)>);

fn write_ops(db: &Db, model: &mut Model, ops: Vec<Op>) {
    let mut b = WriteBatch::new();
    for (k, op) in ops {
        match op {
            Some((v, deadline)) => {
                b.put(k.clone(), v.clone())
                    .unwrap()
                    .with_deadline(deadline.map(Deadline::from_unix_millis))
                    .unwrap();
                // What a reader at READ_AT sees: a value through its deadline.
                if deadline.is_none_or(|d| d >= READ_AT) {
                    model.insert(k, v);
                } else {
                    model.remove(&k);
                }
            }
            None => {
                b.delete(k.clone()).unwrap();
                model.remove(&k);
            }
        }
    }
    db.write(b).unwrap();
}

fn small_puts(keys: impl IntoIterator<Item = u32>, round: u32) -> Vec<Op> {
    keys.into_iter()
        .map(|i| (small_key(i), Some((small_value(i, round), None))))
        .collect()
}

/// Writes the small store through four opens (`open` opens it writable,
/// on a manual clock standing at `WRITTEN_AT`), about 40 KB on a local
/// backend: a load and a checkpoint, overwrites, deletes and keys with
/// deadlines; a second open's checkpoint (a page segment of its own, the
/// first one's changed pages dead but still there; commits before and
/// after its record); two more opens, each writing a commit segment of
/// its own. Every open is closed.
pub fn write_small_store(open: &dyn Fn() -> Db) -> History {
    let mut model = Model::new();
    let m = &mut model;
    let soon = Some(WRITTEN_AT + 1_000); // passed at READ_AT
    let later = Some(READ_AT + 1_000_000_000);
    let db = open();
    for chunk in 0..10 {
        write_ops(&db, m, small_puts(chunk * 20..chunk * 20 + 20, 0));
    }
    db.checkpoint().unwrap();
    for chunk in 0..3u32 {
        let mut ops = small_puts((0..8).map(|j| (chunk * 31 + j * 13) % 200), 1);
        ops.push((small_key(chunk * 17 + 5), None));
        write_ops(&db, m, ops);
    }
    let ops = vec![
        (
            b"exp/paged-later".to_vec(),
            Some((b"stays".to_vec(), later)),
        ),
        (b"exp/paged-soon".to_vec(), Some((b"goes".to_vec(), soon))),
        (small_key(7), Some((small_value(7, 2), later))),
    ];
    write_ops(&db, m, ops);
    db.close().unwrap();

    let db = open();
    for chunk in 0..6u32 {
        let ops = small_puts((0..6).map(|j| (chunk * 23 + j * 37) % 200), 2);
        write_ops(&db, m, ops);
    }
    db.checkpoint().unwrap();
    for chunk in 0..6u32 {
        let mut ops = small_puts((0..6).map(|j| (chunk * 29 + j * 41 + 3) % 205), 3);
        ops.push((small_key(chunk * 19 + 60), None));
        write_ops(&db, m, ops);
    }
    db.close().unwrap();

    // The first write after an open starts a commit segment.
    let db = open();
    let ops = vec![
        (
            b"exp/logged-later".to_vec(),
            Some((b"stays".to_vec(), later)),
        ),
        (b"exp/logged-soon".to_vec(), Some((b"goes".to_vec(), soon))),
        (small_key(10), None),
        (small_key(11), Some((small_value(11, 4), None))),
    ];
    write_ops(&db, m, ops);
    for chunk in 0..4u32 {
        let ops = small_puts((0..6).map(|j| (chunk * 43 + j * 7 + 1) % 208), 4);
        write_ops(&db, m, ops);
    }
    db.close().unwrap();

    let db = open();
    for chunk in 0..4u32 {
        let ops = small_puts((0..6).map(|j| (chunk * 47 + j * 11 + 2) % 210), 5);
        write_ops(&db, m, ops);
    }
    let without_last = m.clone();
    let ops = vec![
        (small_key(5), Some((small_value(5, 6), None))),
        (small_key(6), None),
        (small_key(209), Some((small_value(209, 6), later))),
    ];
    write_ops(&db, m, ops);
    db.close().unwrap();

    let mut probe: Vec<Vec<u8>> = (0..215).map(small_key).collect();
    probe.extend(
        [
            &b""[..],
            b"exp/",
            b"exp/paged-later",
            b"exp/paged-soon",
            b"exp/logged-later",
            b"exp/logged-soon",
            b"key/",
            b"zzz",
        ]
        .map(|k| k.to_vec()),
    );
    History {
        full: model,
        without_last,
        probe,
    }
}
