//! Helpers shared by the robustness suites: seeds and case counts from the
//! environment, per-seed failure reporting, a watch for panics on the
//! library's own threads, and the checker that decides whether a store
//! recovered after a crash is one the acknowledged history allows.
//!
//! Environment:
//! - `KIVI_TEST_CASES=N`: run N cases in every seeded test (default: each
//!   test's own count, chosen so the whole suite stays fast);
//! - `KIVI_TEST_SEED=S`: run only the case with seed S (to reproduce a failure);
//! - `KIVI_TEST_SEED_BASE=B`: start the seeds at B instead of 0;
//! - `KIVI_TEST_MAX_FAILURES=N`: collect up to N failing seeds (default 5)
//!   before stopping.

#![allow(dead_code)]

pub mod child;
pub mod damage;

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
            base.wrapping_add(salt.wrapping_mul(100_000))
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
            if failures.len() as u64 >= env_u64("KIVI_TEST_MAX_FAILURES").unwrap_or(5) {
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

/// One way the store may have come back for one writer: every
/// acknowledged batch up to position `last_acked` (none if `None`) applied,
/// plus possibly one batch that was not acknowledged (`extra`), after them
/// and before the next acknowledged one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Choice {
    last_acked: Option<usize>,
    extra: Option<usize>,
}

fn apply_batch(state: &mut Model, b: &BatchRec) {
    for (k, v) in &b.ops {
        match v {
            Some(v) => state.insert(k.clone(), v.clone()),
            None => state.remove(k),
        };
    }
}

/// Decides whether `observed` (every pair of a store reopened after a
/// crash) is a state the history allows, given the state `base` the round
/// started from. The commit log is a sequence, so what comes back is, per
/// writer, a prefix of its acknowledged batches plus at most one batch whose
/// write did not return Ok (in flight at the crash, or failed), placed
/// before the writer's next acknowledged batch:
/// - if `acked_durable` (fsync), the prefix is all acknowledged batches;
///   otherwise (no fsync) it may be shorter, but a batch acknowledged before
///   another batch (of any writer) started must be there if that one is;
/// - batches apply whole or not at all, and no value appears that was
///   never written;
/// - a batch that failed in the running process never comes back behind a
///   later acknowledged batch (of any writer) that is there.
pub fn check_recovered(
    base: &Model,
    writers: &[WriterHistory],
    observed: &Model,
    acked_durable: bool,
) -> Result<(), String> {
    // Keys of each writer; keys nobody wrote must be as they were.
    let mut key_writer: HashMap<&[u8], usize> = HashMap::new();
    for (w, h) in writers.iter().enumerate() {
        for b in &h.batches {
            for k in b.ops.keys() {
                if let Some(other) = key_writer.insert(k, w) {
                    if other != w {
                        return Err(format!("test bug: key {} has two writers", show(k)));
                    }
                }
            }
        }
    }
    let describe_value = |k: &[u8], v: Option<&Vec<u8>>| -> String {
        let Some(v) = v else {
            return "absent".into();
        };
        if base.get(k) == Some(v) {
            return format!("the value from before the round ({} bytes)", v.len());
        }
        for (w, h) in writers.iter().enumerate() {
            for (i, b) in h.batches.iter().enumerate() {
                if b.ops.get(k) == Some(&Some(v.clone())) {
                    return format!(
                        "the value of batch {} (writer {w} #{i}, {:?})",
                        b.id, b.status
                    );
                }
            }
        }
        format!("a value no batch wrote: {} ({} bytes)", show(v), v.len())
    };
    for (k, v) in observed {
        if !key_writer.contains_key(k.as_slice()) && base.get(k) != Some(v) {
            return Err(format!(
                "key {} nobody wrote holds {}",
                show(k),
                describe_value(k, Some(v))
            ));
        }
    }
    for (k, v) in base {
        if !key_writer.contains_key(k.as_slice()) && !observed.contains_key(k) {
            return Err(format!(
                "key {} (value {}) vanished though nothing deleted it",
                show(k),
                show(v)
            ));
        }
    }

    // Per writer, every choice that explains what is there.
    let mut options: Vec<Vec<Choice>> = Vec::with_capacity(writers.len());
    for (w, h) in writers.iter().enumerate() {
        let keys: Vec<&[u8]> = {
            let mut ks: Vec<&[u8]> = key_writer
                .iter()
                .filter(|(_, &x)| x == w)
                .map(|(k, _)| *k)
                .collect();
            ks.sort();
            ks
        };
        let restrict = |m: &Model| -> Model {
            keys.iter()
                .filter_map(|k| m.get(*k).map(|v| (k.to_vec(), v.clone())))
                .collect()
        };
        let want = restrict(observed);
        let acked: Vec<usize> = (0..h.batches.len())
            .filter(|&i| h.batches[i].status == Status::Acked)
            .collect();
        let mut prefixes: Vec<Option<usize>> = vec![None];
        prefixes.extend(acked.iter().map(|&i| Some(i)));
        if acked_durable {
            prefixes = vec![acked.last().copied()];
        }
        let mut found = Vec::new();
        for &last in &prefixes {
            let mut state = restrict(base);
            for &i in acked.iter().filter(|&&i| Some(i) <= last) {
                apply_batch(&mut state, &h.batches[i]);
            }
            if state == want {
                found.push(Choice {
                    last_acked: last,
                    extra: None,
                });
            }
            let from = last.map_or(0, |l| l + 1);
            for x in from..h.batches.len() {
                let b = &h.batches[x];
                if b.status == Status::Acked {
                    break;
                }
                if b.ops.is_empty() || b.status == Status::NoEffect {
                    continue;
                }
                let mut s = state.clone();
                apply_batch(&mut s, b);
                if s == want {
                    found.push(Choice {
                        last_acked: last,
                        extra: Some(x),
                    });
                }
            }
        }
        if found.is_empty() {
            // Explain against the state with every acknowledged batch.
            let mut expected = restrict(base);
            for &i in &acked {
                apply_batch(&mut expected, &h.batches[i]);
            }
            let mut diffs = Vec::new();
            for k in &keys {
                let (got, exp) = (want.get(*k), expected.get(*k));
                if got != exp {
                    diffs.push(format!(
                        "key {}: found {}; with every acknowledged batch it would be {}",
                        show(k),
                        describe_value(k, got),
                        describe_value(k, exp)
                    ));
                }
            }
            let statuses: Vec<String> = h
                .batches
                .iter()
                .enumerate()
                .filter(|(_, b)| b.status != Status::Acked)
                .map(|(i, b)| format!("#{i} {:?}", b.status))
                .collect();
            return Err(format!(
                "writer {w}: no prefix of its acknowledged batches{} (plus at most one \
                 unacknowledged batch) gives what the store holds; {} batches, the \
                 unacknowledged ones: {statuses:?}; differences: {diffs:#?}",
                if acked_durable {
                    " that keeps all of them"
                } else {
                    ""
                },
                h.batches.len()
            ));
        }
        options.push(found);
    }

    // Across writers (only restrictive without fsync): if a batch is there,
    // every batch acknowledged before it started is there too. Take the
    // least choice per writer, raising it while a requirement is unmet.
    let mut pick: Vec<usize> = vec![0; writers.len()];
    let present = |w: usize, c: &Choice| -> Vec<usize> {
        let h = &writers[w];
        let mut v: Vec<usize> = (0..h.batches.len())
            .filter(|&i| h.batches[i].status == Status::Acked && Some(i) <= c.last_acked)
            .collect();
        v.extend(c.extra);
        v
    };
    loop {
        let mut changed = false;
        for a in 0..writers.len() {
            let latest_start = present(a, &options[a][pick[a]])
                .iter()
                .map(|&i| writers[a].batches[i].start)
                .max()
                .unwrap_or(0);
            for b in 0..writers.len() {
                if b == a {
                    continue;
                }
                let need = writers[b].batches.iter().enumerate().rev().find(|(_, x)| {
                    x.status == Status::Acked && x.finish != 0 && x.finish < latest_start
                });
                let Some((need, _)) = need else { continue };
                if options[b][pick[b]].last_acked >= Some(need) {
                    continue;
                }
                match options[b].iter().position(|c| c.last_acked >= Some(need)) {
                    Some(p) => {
                        pick[b] = p;
                        changed = true;
                    }
                    None => {
                        return Err(format!(
                            "writer {b}'s batch #{need} was acknowledged before a batch of \
                             writer {a} started, yet only the later one survived the crash"
                        ))
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }

    // A failed batch that came back: nothing acknowledged after it may be there.
    for (w, h) in writers.iter().enumerate() {
        let Some(x) = options[w][pick[w]].extra else {
            continue;
        };
        let f = &h.batches[x];
        if f.status != Status::Failed {
            continue;
        }
        for (w2, h2) in writers.iter().enumerate() {
            if w2 == w {
                continue;
            }
            for &j in &present(w2, &options[w2][pick[w2]]) {
                let g = &h2.batches[j];
                if g.status == Status::Acked && f.finish != 0 && g.start > f.finish {
                    return Err(format!(
                        "batch {} failed (its write returned an error) yet is there after the \
                         crash, though batch {} of writer {w2}, acknowledged after it, is too",
                        f.id, g.id
                    ));
                }
            }
        }
    }
    Ok(())
}
