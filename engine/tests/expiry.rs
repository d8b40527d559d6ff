//! Deadlines against a model, on a manual clock: random puts with and
//! without deadlines, deletes, conditional writes (an expired key is absent
//! to every condition; a compare-and-swap may also compare the deadline),
//! the clock moving forward, checkpoints, compaction, cache drops, clears
//! of the whole store, and reopens. After every step each read path (get, get_with_deadline,
//! get_each, scans both ways, a held snapshot) must answer as the model
//! does: a value exists, with its deadline, through the millisecond of its
//! deadline and not after.
//!
//! `KIVI_TEST_CASES` sets the number of generated sequences per
//! configuration.

mod common;

use common::{cases, small_opts};
use kivi::storage::MemoryStorage;
use kivi::{Clock, Db, Deadline, Options, Snapshot, WriteBatch, WriteOutcome};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// key -> (value, deadline in ms, `None` for none): everything written
/// and not deleted, expired or not. What is visible depends on the time.
type Model = BTreeMap<Vec<u8>, (Vec<u8>, Option<u64>)>;

const START: u64 = 1_700_000_000_000;

fn key(i: u8) -> Vec<u8> {
    // Shared heads, a long key and an empty one among them.
    match i % 4 {
        0 => vec![i],
        1 => format!("key-{i:03}").into_bytes(),
        2 => format!("shared-prefix-longer-than-a-head/{i}").into_bytes(),
        _ => [vec![b'L'; 600], vec![i]].concat(),
    }
}

fn value(seed: u8, big: bool) -> Vec<u8> {
    let len = if big { 1500 } else { usize::from(seed % 40) };
    (0..len).map(|i| seed.wrapping_add(i as u8)).collect()
}

#[derive(Debug, Clone)]
enum Step {
    /// Key, value seed, big value, deadline as ms from now (negative:
    /// already past), or none.
    Put(u8, u8, bool, Option<i64>),
    Delete(u8),
    InsertIfAbsent(u8, u8, Option<i64>),
    UpdateIfPresent(u8, u8, Option<i64>),
    /// Swap the current value for a new one keeping its deadline, on the
    /// condition that the deadline is still the one read (or a wrong one).
    SwapKeepingDeadline(u8, u8, bool),
    Advance(u64),
    Snapshot,
    Checkpoint,
    Compact,
    ClearCache,
    Reopen,
    /// `Db::clear`: every key gone, in one commit.
    Clear,
}

fn ttl() -> impl Strategy<Value = Option<i64>> {
    prop_oneof![2 => Just(None), 3 => (-3i64..40).prop_map(Some)]
}

fn step() -> impl Strategy<Value = Step> {
    let k = 0u8..24;
    prop_oneof![
        10 => (k.clone(), any::<u8>(), proptest::bool::weighted(0.1), ttl())
            .prop_map(|(k, v, b, t)| Step::Put(k, v, b, t)),
        3 => k.clone().prop_map(Step::Delete),
        3 => (k.clone(), any::<u8>(), ttl()).prop_map(|(k, v, t)| Step::InsertIfAbsent(k, v, t)),
        2 => (k.clone(), any::<u8>(), ttl()).prop_map(|(k, v, t)| Step::UpdateIfPresent(k, v, t)),
        2 => (k, any::<u8>(), any::<bool>()).prop_map(|(k, v, r)| Step::SwapKeepingDeadline(k, v, r)),
        6 => (0u64..25).prop_map(Step::Advance),
        1 => Just(Step::Snapshot),
        2 => Just(Step::Checkpoint),
        1 => Just(Step::Compact),
        1 => Just(Step::ClearCache),
        2 => Just(Step::Reopen),
        1 => Just(Step::Clear),
    ]
}

fn live(m: &Model, now: u64) -> BTreeMap<Vec<u8>, (Vec<u8>, Option<u64>)> {
    m.iter()
        .filter(|(_, (_, d))| d.is_none_or(|d| now <= d))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

struct Harness {
    storage: MemoryStorage,
    opts: Options,
    clock: Clock,
    db: Db,
    model: Model,
    snapshot: Option<(Snapshot, Model)>,
}

impl Harness {
    fn new(opts: Options) -> Harness {
        let clock = Clock::manual(START);
        let opts = Options {
            clock: clock.clone(),
            ..opts
        };
        let storage = MemoryStorage::new();
        let db = Db::open_with_storage(Arc::new(storage.clone()), opts.clone()).unwrap();
        Harness {
            storage,
            opts,
            clock,
            db,
            model: Model::new(),
            snapshot: None,
        }
    }

    fn now(&self) -> u64 {
        self.clock.now_millis()
    }

    fn deadline(&self, ttl: Option<i64>) -> Option<u64> {
        ttl.map(|t| self.now().saturating_add_signed(t))
    }

    fn visible(&self, k: &[u8]) -> Option<(Vec<u8>, Option<u64>)> {
        live(&self.model, self.now()).get(k).cloned()
    }

    /// A conditional batch of one operation with a deadline, against the
    /// model's answer.
    fn conditional(
        &mut self,
        b: &mut WriteBatch,
        k: Vec<u8>,
        v: Vec<u8>,
        d: Option<u64>,
        ok: bool,
    ) {
        b.with_deadline(d.map(Deadline::from_unix_millis)).unwrap();
        let got = self.db.write(std::mem::take(b)).unwrap();
        assert_eq!(got == WriteOutcome::Applied, ok, "condition on {k:?}");
        if ok {
            self.model.insert(k, (v, d));
        }
    }

    fn step(&mut self, s: &Step) {
        match s.clone() {
            Step::Put(k, v, big, ttl) => {
                let (k, v, d) = (key(k), value(v, big), self.deadline(ttl));
                self.db
                    .put_with_deadline(&k, &v, d.map(Deadline::from_unix_millis))
                    .unwrap();
                self.model.insert(k, (v, d));
            }
            Step::Delete(k) => {
                self.db.delete(&key(k)).unwrap();
                self.model.remove(&key(k));
            }
            Step::InsertIfAbsent(k, v, ttl) => {
                let (k, v, d) = (key(k), value(v, false), self.deadline(ttl));
                let ok = self.visible(&k).is_none();
                let mut b = WriteBatch::new();
                b.insert_if_absent(k.clone(), v.clone()).unwrap();
                self.conditional(&mut b, k, v, d, ok);
            }
            Step::UpdateIfPresent(k, v, ttl) => {
                let (k, v, d) = (key(k), value(v, false), self.deadline(ttl));
                let ok = self.visible(&k).is_some();
                let mut b = WriteBatch::new();
                b.update_if_present(k.clone(), v.clone()).unwrap();
                self.conditional(&mut b, k, v, d, ok);
            }
            Step::SwapKeepingDeadline(k, v, wrong) => {
                let k = key(k);
                let Some((old, d)) = self.db.get_with_deadline(&k).unwrap() else {
                    return;
                };
                let d = d.map(Deadline::unix_millis);
                let claimed = if wrong {
                    Some(d.map_or(1, |d| d + 1))
                } else {
                    d
                };
                let v = value(v, false);
                let mut b = WriteBatch::new();
                b.compare_and_swap(k.clone(), old, v.clone())
                    .unwrap()
                    .if_deadline(claimed.map(Deadline::from_unix_millis))
                    .unwrap();
                self.conditional(&mut b, k, v, d, !wrong);
            }
            Step::Advance(ms) => self.clock.advance(Duration::from_millis(ms)),
            Step::Snapshot => self.snapshot = Some((self.db.snapshot(), self.model.clone())),
            Step::Checkpoint => self.db.checkpoint().unwrap(),
            Step::Compact => self.db.compact().unwrap(),
            Step::ClearCache => self.db.clear_cache(),
            Step::Clear => {
                self.db.clear().unwrap();
                self.model.clear();
            }
            Step::Reopen => {
                self.snapshot = None;
                let db = Db::open_with_storage(Arc::new(self.storage.clone()), self.opts.clone())
                    .unwrap();
                self.db = db;
            }
        }
    }

    fn verify(&self, after: usize) {
        let now = self.now();
        let want = live(&self.model, now);
        for i in 0u8..24 {
            let k = key(i);
            let got = self.db.get_with_deadline(&k).unwrap();
            let got = got.map(|(v, d)| (v, d.map(Deadline::unix_millis)));
            assert_eq!(got, want.get(&k).cloned(), "after step {after}: key {k:?}");
            assert_eq!(
                self.db.get(&k).unwrap(),
                want.get(&k).map(|(v, _)| v.clone())
            );
        }
        let keys: Vec<Vec<u8>> = (0u8..24).map(key).collect();
        let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
        self.db
            .get_each(&refs, |i, v| {
                assert_eq!(
                    v.map(<[u8]>::to_vec),
                    want.get(refs[i]).map(|(v, _)| v.clone()),
                    "after step {after}: get_each of {:?}",
                    refs[i]
                );
                std::ops::ControlFlow::Continue(())
            })
            .unwrap();
        let pairs: Vec<(Vec<u8>, Vec<u8>)> = want
            .iter()
            .map(|(k, (v, _))| (k.clone(), v.clone()))
            .collect();
        let forward: Vec<_> = self.db.iter().map(|p| p.unwrap()).collect();
        assert_eq!(forward, pairs, "after step {after}: forward scan");
        let mut backward: Vec<_> = self.db.iter().rev().map(|p| p.unwrap()).collect();
        backward.reverse();
        assert_eq!(backward, pairs, "after step {after}: backward scan");
        if let Some((snap, model)) = &self.snapshot {
            // A snapshot holds its writes; expiry is decided by the clock now.
            let want = live(model, now);
            let got: Vec<_> = snap.iter().map(|p| p.unwrap()).collect();
            let pairs: Vec<_> = want
                .iter()
                .map(|(k, (v, _))| (k.clone(), v.clone()))
                .collect();
            assert_eq!(got, pairs, "after step {after}: snapshot scan");
            for i in 0u8..24 {
                let k = key(i);
                let got = snap.get_with_deadline(&k).unwrap();
                let got = got.map(|(v, d)| (v, d.map(Deadline::unix_millis)));
                assert_eq!(
                    got,
                    want.get(&k).cloned(),
                    "after step {after}: snapshot {k:?}"
                );
            }
        }
        // Counts leave expired keys out, reclaimed or not.
        let stats = self.db.stats().unwrap();
        assert_eq!(stats.pairs, want.len() as u64, "after step {after}: pairs");
        let with_deadline = want.values().filter(|(_, d)| d.is_some()).count();
        assert_eq!(
            stats.pairs_with_deadline, with_deadline as u64,
            "after step {after}: pairs with a deadline"
        );
        if let Some((snap, model)) = &self.snapshot {
            assert_eq!(snap.len().unwrap(), live(model, now).len() as u64);
        }
        let report = self.db.check().unwrap();
        assert!(report.is_healthy(), "after step {after}: {report:?}");
    }
}

fn run(opts: Options, steps: &[Step]) {
    let mut h = Harness::new(opts);
    for (i, s) in steps.iter().enumerate() {
        h.step(s);
        h.verify(i);
    }
}

#[test]
fn deadlines_match_a_model_with_default_options() {
    let mut runner = TestRunner::new(Config {
        cases: cases(48) as u32,
        ..Config::default()
    });
    runner
        .run(&proptest::collection::vec(step(), 1..60), |steps| {
            run(Options::default(), &steps);
            Ok(())
        })
        .unwrap();
}

#[test]
fn deadlines_match_a_model_with_tiny_pages_and_constant_checkpoints() {
    let mut runner = TestRunner::new(Config {
        cases: cases(48) as u32,
        ..Config::default()
    });
    runner
        .run(&proptest::collection::vec(step(), 1..60), |steps| {
            run(small_opts(), &steps);
            Ok(())
        })
        .unwrap();
}

#[test]
fn a_deadline_goes_only_on_a_written_value() {
    let mut b = WriteBatch::new();
    let d = Some(Deadline::from_unix_millis(START));
    assert!(matches!(
        b.with_deadline(d),
        Err(kivi::Error::InvalidBatch(_))
    ));
    b.delete(b"k".to_vec()).unwrap();
    assert!(matches!(
        b.with_deadline(d),
        Err(kivi::Error::InvalidBatch(_))
    ));
    b.put(b"k".to_vec(), b"v".to_vec()).unwrap();
    assert!(matches!(
        b.if_deadline(d),
        Err(kivi::Error::InvalidBatch(_))
    ));
    b.with_deadline(d).unwrap();
}

#[test]
fn deadlines_survive_a_reopen_from_the_log_and_from_pages() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::manual(START);
    let opts = Options {
        clock: clock.clone(),
        ..Options::default()
    };
    let db = Db::open(dir.path(), opts.clone()).unwrap();
    let soon = clock.after(Duration::from_secs(1));
    db.put_with_deadline(b"paged", b"1", Some(soon)).unwrap();
    db.checkpoint().unwrap();
    db.put_with_deadline(b"logged", b"2", Some(soon)).unwrap();
    db.put(b"forever", b"3").unwrap();
    drop(db);
    let db = Db::open(dir.path(), opts.clone()).unwrap();
    for k in [&b"paged"[..], b"logged"] {
        assert_eq!(db.get_with_deadline(k).unwrap().unwrap().1, Some(soon));
    }
    clock.advance(Duration::from_millis(1001));
    assert_eq!(db.get(b"paged").unwrap(), None);
    assert_eq!(db.get(b"logged").unwrap(), None);
    assert_eq!(db.get(b"forever").unwrap().as_deref(), Some(&b"3"[..]));
}

#[test]
fn expired_keys_are_counted_out_at_once_and_reclaimed_in_the_background() {
    let clock = Clock::manual(START);
    let opts = Options {
        clock: clock.clone(),
        ..Options::default()
    };
    let db = Db::open_with_storage(Arc::new(MemoryStorage::new()), opts).unwrap();
    let soon = Some(clock.after(Duration::from_secs(1)));
    let later = Some(clock.after(Duration::from_secs(3600)));
    for chunk in 0..20u32 {
        let mut b = WriteBatch::new();
        for i in 0..1000u32 {
            let n = chunk * 1000 + i;
            let key = format!("key-{n:06}").into_bytes();
            // Three of four keys expire soon; the rest later or never.
            let deadline = match n % 4 {
                0 => None,
                1 => later,
                _ => soon,
            };
            b.put(key, vec![b'v'; 100])
                .unwrap()
                .with_deadline(deadline)
                .unwrap();
        }
        db.write(b).unwrap();
    }
    db.checkpoint().unwrap();
    assert_eq!(db.stats().unwrap().pairs, 20_000);
    clock.advance(Duration::from_millis(1001));
    // Counted out at once, whatever the background has done.
    assert_eq!(db.stats().unwrap().pairs, 10_000);
    assert_eq!(db.snapshot().len().unwrap(), 10_000);
    // Reclaimed by the background, without a write to wake it.
    let waited = std::time::Instant::now();
    while db.stats().unwrap().expired_reclaimed < 10_000 {
        assert!(
            waited.elapsed() < Duration::from_secs(60),
            "reclaimed {} of 10,000 expired keys in a minute",
            db.stats().unwrap().expired_reclaimed
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let s = db.stats().unwrap();
    assert_eq!((s.expired_reclaimed, s.pairs), (10_000, 10_000));
    // The entries are gone, not just hidden: `check` counts what is stored.
    db.checkpoint().unwrap();
    assert_eq!(db.check().unwrap().pairs, 10_000);
    // The keys that expire later are still there.
    assert!(db.get(b"key-000001").unwrap().is_some());
    assert!(db.get(b"key-000002").unwrap().is_none());
}

#[test]
fn a_clear_survives_a_crash_whole_or_not_at_all() {
    use kivi::Durability;
    use kivi_storage::SimStorage;
    use rand::{rngs::StdRng, SeedableRng};
    // Unsynced commits (no fsync) may be lost at a crash, but only as a
    // suffix: the store after it is the one after some prefix of the
    // commits. So the clear is either there with all it deleted, or not
    // there with nothing deleted; and the write after it only with it.
    let opts = Options {
        durability: Durability::NoFsync,
        ..Options::default()
    };
    let mut outcomes = std::collections::BTreeSet::new();
    for seed in 0..cases(40) {
        let sim = SimStorage::new();
        let db = Db::open_with_storage(Arc::new(sim.clone()), opts.clone()).unwrap();
        let mut b = WriteBatch::new();
        for i in 0..300u32 {
            b.put(format!("old-{i:04}").into_bytes(), vec![7; 64])
                .unwrap();
        }
        db.write(b).unwrap();
        db.checkpoint().unwrap();
        db.put(b"old-later", b"x").unwrap();
        db.clear().unwrap();
        db.put(b"after", b"y").unwrap();
        if seed % 2 == 0 {
            // Sometimes the clear reaches the pages too.
            db.checkpoint().unwrap();
        }
        let crashed = sim.crash(&mut StdRng::seed_from_u64(seed));
        drop(db);
        let db = Db::open_with_storage(Arc::new(crashed), opts.clone()).unwrap();
        let old = db.range(b"old-0".as_slice()..b"old-:".as_slice()).count();
        let later = db.get(b"old-later").unwrap().is_some();
        let after = db.get(b"after").unwrap().is_some();
        let cleared = old == 0;
        assert!(
            (cleared && !later) || (old == 300 && !after),
            "seed {seed}: {old} old keys, old-later {later}, after {after}"
        );
        assert_eq!(
            db.stats().unwrap().pairs as usize,
            old + usize::from(later) + usize::from(after)
        );
        let r = db.check().unwrap();
        assert!(r.is_healthy(), "seed {seed}: {:?}", r.problems);
        outcomes.insert((cleared, after));
    }
    // Both sides of the clear are reached.
    assert!(outcomes.contains(&(false, false)) && outcomes.iter().any(|o| o.0));
    println!("outcomes (cleared, after): {outcomes:?}");
}
