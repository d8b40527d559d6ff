//! Helpers shared by the robustness suites: seeds and case counts from the
//! environment, per-seed failure reporting, a watch for panics on the
//! library's own threads, and the checker that decides whether a store
//! recovered after a crash is one the acknowledged history allows.
//!
//! Environment:
//! - `KIVI_TEST_CASES=N`: run N cases in every seeded test (default: each
//!   test's own count, chosen so the whole suite stays fast);
//! - `KIVI_TEST_SEED=S`: run only the case with seed S (to reproduce a failure);
//! - `KIVI_TEST_SEED_BASE=B`: start the seeds at B instead of 0.

#![allow(dead_code)]

use kivi::{Db, Options};
use std::collections::{BTreeMap, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, Once};

pub type Model = BTreeMap<Vec<u8>, Vec<u8>>;

pub fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
    )
}

/// Number of cases to run: `KIVI_TEST_CASES` if set, else `default`.
pub fn cases(default: u64) -> u64 {
    env_u64("KIVI_TEST_CASES").unwrap_or(default)
}

/// The seeds to run: just `KIVI_TEST_SEED` if set, else `cases(default)`
/// seeds from `KIVI_TEST_SEED_BASE` (default 0), offset by `salt` so that
/// different tests do not run the same random streams.
pub fn seeds(default: u64, salt: u64) -> Vec<u64> {
    if let Some(s) = env_u64("KIVI_TEST_SEED") {
        return vec![s];
    }
    let base = env_u64("KIVI_TEST_SEED_BASE").unwrap_or(0);
    (0..cases(default))
        .map(|i| {
            base.wrapping_add(salt.wrapping_mul(1_000_000_007))
                .wrapping_add(i)
        })
        .collect()
}

/// Options that make everything happen often on small data: deep trees,
/// segments that roll, checkpoints all the time.
pub fn small_opts() -> Options {
    Options {
        page_size: 256,
        cache_bytes: 64 << 10,
        checkpoint_bytes: 64 << 10,
        segment_bytes: 64 << 10,
        ..Default::default()
    }
}

pub fn panic_message(e: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = e.downcast_ref::<String>() {
        s.clone()
    } else if let Some(s) = e.downcast_ref::<&str>() {
        s.to_string()
    } else {
        "(non-string panic)".to_string()
    }
}

static WATCH: Once = Once::new();
static LIBRARY_PANICS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Installs (once) a panic hook that remembers panics on the library's own
/// threads (named `kivi-...`), whose results the library may swallow, so
/// that a test can fail on them. Panics still print as usual.
pub fn watch_library_panics() {
    WATCH.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let thread = std::thread::current();
            let name = thread.name().unwrap_or("");
            if name.starts_with("kivi") {
                LIBRARY_PANICS
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(format!("thread {name}: {info}"));
            }
            previous(info);
        }));
    });
}

/// Panics seen on library threads since the last call.
pub fn take_library_panics() -> Vec<String> {
    std::mem::take(&mut *LIBRARY_PANICS.lock().unwrap_or_else(|e| e.into_inner()))
}

/// Runs `case` for every seed, each under `catch_unwind`. Stops after a few
/// failures and panics with every failing seed and how to rerun it.
pub fn run_seeds(test: &str, seeds: &[u64], case: impl Fn(u64)) {
    watch_library_panics();
    let mut failures = Vec::new();
    for &seed in seeds {
        let r = catch_unwind(AssertUnwindSafe(|| case(seed)));
        let lib = take_library_panics();
        let msg = match r {
            Err(e) => Some(panic_message(e.as_ref())),
            Ok(()) if !lib.is_empty() => Some(format!("library thread panicked: {lib:?}")),
            Ok(()) => None,
        };
        if let Some(msg) = msg {
            eprintln!("{test}: seed {seed} FAILED: {msg}");
            failures.push((seed, msg));
            if failures.len() >= 5 {
                break;
            }
        }
    }
    if !failures.is_empty() {
        let list: Vec<String> = failures.iter().map(|(s, _)| s.to_string()).collect();
        panic!(
            "{test}: {} failing seed(s): {} (of {} run). First failure (rerun with \
             KIVI_TEST_SEED={}): {}",
            failures.len(),
            list.join(", "),
            seeds.len(),
            failures[0].0,
            failures[0].1
        );
    }
}

/// Every pair of `db`, by a full forward scan that must not fail, checked
/// against point reads of the same keys.
pub fn dump(db: &Db) -> Model {
    let mut out = Model::new();
    for item in db.iter() {
        let (k, v) = item.expect("scan failed");
        if let Some((last, _)) = out.last_key_value() {
            assert!(*last < k, "scan out of order: {last:?} then {k:?}");
        }
        out.insert(k, v);
    }
    for (k, v) in &out {
        let got = db.get(k).expect("get failed");
        assert_eq!(
            got.as_deref(),
            Some(v.as_slice()),
            "get({}) disagrees with the scan",
            show(k)
        );
    }
    out
}

/// Short printable form of a key or value.
pub fn show(b: &[u8]) -> String {
    let s: String = b
        .iter()
        .take(48)
        .map(|&c| {
            if c.is_ascii_graphic() {
                (c as char).to_string()
            } else {
                format!("\\x{c:02x}")
            }
        })
        .collect();
    if b.len() > 48 {
        format!("{s}...({} bytes)", b.len())
    } else {
        s
    }
}

/// Asserts that `db.check()` finds nothing wrong and counts `pairs` pairs.
pub fn assert_healthy(db: &Db, pairs: usize) {
    let r = db.check().expect("check failed to run");
    assert!(r.is_healthy(), "check found problems: {:?}", r.problems);
    assert_eq!(r.pairs, pairs as u64, "check counts {} pairs", r.pairs);
}

// ---------------------------------------------------------------------------
// Batch histories and the recovery checker.
// ---------------------------------------------------------------------------

/// A 64-bit mix (splitmix64), for deterministic pseudo-random content.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn hash_key(key: &[u8]) -> u64 {
    key.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// The value batch `batch` writes under `key`: the batch id first (so a
/// value always says which batch wrote it), then filler derived from both.
/// About one value in eight is over 1 KiB, so it is stored out of line.
pub fn batch_value(batch: u64, key: &[u8]) -> Vec<u8> {
    let h = mix(batch ^ hash_key(key).rotate_left(17));
    let len = match h % 16 {
        0 | 1 => 1025 + (h >> 8) as usize % 4000,
        2 => 0,
        _ => (h >> 8) as usize % 200,
    };
    let mut v = batch.to_le_bytes().to_vec();
    let mut x = h;
    for _ in 0..len {
        x = mix(x);
        v.push(x as u8);
    }
    v
}

/// The batch id a value written by [`batch_value`] carries.
pub fn value_batch(v: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(v.get(..8)?.try_into().ok()?))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// `write` returned Ok and the batch changed something.
    Acked,
    /// `write` returned Ok, but a condition failed: it changed nothing.
    NoEffect,
    /// `write` returned an error before the crash began: in the running
    /// process it was not applied; after a crash it may appear, whole.
    Failed,
    /// In flight when the crash came (or failed during it): may or may not
    /// be there after the crash, but whole or not at all.
    InDoubt,
}

#[derive(Debug, Clone)]
pub struct BatchRec {
    pub id: u64,
    /// Effective operations, one per key (after conditions were decided).
    pub ops: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    pub status: Status,
    /// Logical clock readings: before the call, after it returned. Only
    /// their order matters; 0 means unknown.
    pub start: u64,
    pub finish: u64,
}

/// The batches one writer issued, in order. Different writers write
/// disjoint keys, so each key's history is that of one writer.
#[derive(Debug, Clone, Default)]
pub struct WriterHistory {
    pub batches: Vec<BatchRec>,
}

/// Decides whether `observed` (every pair of a store reopened after a
/// crash) is a state the history allows, given the state `base` the round
/// started from:
/// - every value present was written by some batch (or was there before);
/// - if `acked_durable`, no acknowledged write is lost; otherwise (no-fsync)
///   only a suffix of the acknowledged writes may be lost: whatever was
///   acknowledged before any batch that is visible must be there;
/// - no batch is partly applied: if any of a batch's values is visible, each
///   of its keys shows it or a later write to that key;
/// - a batch that failed (in the running process) never shows up behind a
///   later batch that was acknowledged and is present.
pub fn check_recovered(
    base: &Model,
    writers: &[WriterHistory],
    observed: &Model,
    acked_durable: bool,
) -> Result<(), String> {
    // Who wrote what.
    let mut by_id: HashMap<u64, (usize, usize)> = HashMap::new();
    let mut key_writer: HashMap<&[u8], usize> = HashMap::new();
    for (w, h) in writers.iter().enumerate() {
        for (i, b) in h.batches.iter().enumerate() {
            by_id.insert(b.id, (w, i));
            for k in b.ops.keys() {
                if let Some(other) = key_writer.insert(k, w) {
                    if other != w {
                        return Err(format!("test bug: key {} has two writers", show(k)));
                    }
                }
            }
        }
    }

    // Which batches are visible: one of their values is there, exactly.
    let mut visible: Vec<Vec<bool>> = writers
        .iter()
        .map(|h| vec![false; h.batches.len()])
        .collect();
    for (k, v) in observed {
        if base.get(k) == Some(v) {
            continue;
        }
        let found = value_batch(v)
            .and_then(|id| by_id.get(&id))
            .and_then(|&(w, i)| {
                let b = &writers[w].batches[i];
                (b.ops.get(k) == Some(&Some(v.clone()))).then_some((w, i))
            });
        match found {
            Some((w, i)) => visible[w][i] = true,
            None => {
                return Err(format!(
                    "key {} holds a value no batch wrote to it: {} ({} bytes; was {:?} before the round)",
                    show(k),
                    show(v),
                    v.len(),
                    base.get(k).map(|b| show(b))
                ))
            }
        }
    }
    for (k, v) in base {
        if !observed.contains_key(k) && !key_writer.contains_key(k.as_slice()) {
            return Err(format!(
                "key {} (value {}) vanished though nothing deleted it",
                show(k),
                show(v)
            ));
        }
    }

    // The latest moment any visible batch started: acknowledged batches that
    // finished before it must be there, even without fsync.
    let mut latest_visible_start = 0;
    for (w, h) in writers.iter().enumerate() {
        for (i, b) in h.batches.iter().enumerate() {
            if visible[w][i] {
                latest_visible_start = latest_visible_start.max(b.start);
            }
        }
    }

    // Per writer: the horizon, the last batch that must be (or is) applied.
    let mut horizon: Vec<Option<usize>> = Vec::with_capacity(writers.len());
    for (w, h) in writers.iter().enumerate() {
        let mut hz = visible[w].iter().rposition(|&v| v);
        for (i, b) in h.batches.iter().enumerate() {
            let must = b.status == Status::Acked
                && (acked_durable || (b.finish != 0 && b.finish < latest_visible_start));
            if must && hz.is_none_or(|x| x < i) {
                hz = Some(i);
            }
        }
        horizon.push(hz);
    }

    // Per key: the value must be that of an allowed writer.
    let mut keys: Vec<(&[u8], usize)> = key_writer.iter().map(|(k, w)| (*k, *w)).collect();
    keys.sort();
    for (k, w) in keys {
        let h = &writers[w];
        let got = observed.get(k);
        // Candidates: the base state (position None), then each writer.
        let writes: Vec<(usize, &Option<Vec<u8>>)> = h
            .batches
            .iter()
            .enumerate()
            .filter_map(|(i, b)| b.ops.get(k).map(|e| (i, e)))
            .collect();
        let Some(hz) = horizon[w] else {
            // Nothing of this writer may be visible, and nothing is required.
            if got != base.get(k) {
                return Err(format!(
                    "key {}: {:?} but no batch writing it can be there (expected the old {:?})",
                    show(k),
                    got.map(|v| show(v)),
                    base.get(k).map(|v| show(v))
                ));
            }
            continue;
        };
        // The lowest position allowed: the last acknowledged write at or
        // before the horizon, and any visible batch writing this key.
        let mut floor: Option<usize> = None;
        for &(i, _) in &writes {
            let b = &h.batches[i];
            if i <= hz && (b.status == Status::Acked || visible[w][i]) {
                floor = Some(i);
            }
        }
        let allowed: Vec<Option<&Vec<u8>>> = {
            let mut a = Vec::new();
            if floor.is_none() {
                a.push(base.get(k));
            }
            for &(i, e) in &writes {
                if i <= hz
                    && floor.is_none_or(|f| i >= f)
                    && h.batches[i].status != Status::NoEffect
                {
                    a.push(e.as_ref());
                }
            }
            a
        };
        if !allowed.contains(&got) {
            let describe = |i: usize| {
                let b = &h.batches[i];
                format!(
                    "batch {} #{i} {:?}{} writes {:?}",
                    b.id,
                    b.status,
                    if visible[w][i] { " (visible)" } else { "" },
                    b.ops[k].as_ref().map(|v| show(v))
                )
            };
            let hist: Vec<String> = writes.iter().map(|&(i, _)| describe(i)).collect();
            return Err(format!(
                "key {} of writer {w}: found {:?}; allowed {:?} (horizon #{hz}); \
                 base {:?}; its writes: {hist:#?}",
                show(k),
                got.map(|v| show(v)),
                allowed
                    .iter()
                    .map(|v| v.map(|v| show(v)))
                    .collect::<Vec<_>>(),
                base.get(k).map(|v| show(v)),
            ));
        }
    }

    // A failed batch may come back after a crash only if nothing
    // acknowledged after it is there.
    for (w, h) in writers.iter().enumerate() {
        for (i, f) in h.batches.iter().enumerate() {
            if f.status != Status::Failed || !visible[w][i] {
                continue;
            }
            for (w2, h2) in writers.iter().enumerate() {
                for (j, g) in h2.batches.iter().enumerate() {
                    let after = if w2 == w {
                        j > i
                    } else {
                        f.finish != 0 && g.start > f.finish
                    };
                    let present = visible[w2][j]
                        || (g.status == Status::Acked && horizon[w2].is_some_and(|hz| j <= hz));
                    if after && g.status == Status::Acked && present {
                        return Err(format!(
                            "batch {} failed (the write returned an error) yet is present after \
                             the crash, behind batch {} that was acknowledged after it",
                            f.id, g.id
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}
