//! `Db` against a `BTreeMap` model: random sequences of puts, deletes,
//! multi-op batches, conditional writes (also in batches whose condition
//! fails, which must apply nothing), point reads, ranges in both directions
//! with every kind of bound (and both ends used at once), snapshots and
//! iterators held across later writes, explicit checkpoints and reopens.
//! After every step everything is compared with the model; at the end
//! `check()` must be clean and count the model's pairs.
//!
//! Two configurations: the defaults, and tiny pages/segments/checkpoints so
//! trees are deep, segments roll and checkpoints happen constantly.
//!
//! `KIVI_TEST_CASES` sets the number of generated sequences per
//! configuration; `KIVI_TEST_SEED` the proptest seed (printed on failure).

mod common;

use common::{cases, env_u64, small_opts, Model};
use kivi::storage::MemoryStorage;
use kivi::{Db, Iter, Options, Snapshot, WriteBatch, WriteOutcome};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestRunner};
use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::{Arc, OnceLock};

/// The keys every sequence draws from: few enough that writes collide,
/// shaped to exercise key comparison (empty key, shared 8-byte heads,
/// keys that are prefixes of others, 0x00 and 0xff bytes, maximal keys).
fn keys() -> &'static [Vec<u8>] {
    static KEYS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    KEYS.get_or_init(|| {
        let mut k: Vec<Vec<u8>> = [
            &b""[..],
            b"\x00",
            b"\x00\x00",
            b"a",
            b"ab",
            b"ab\x00",
            b"abc",
            b"abcdefgh",
            b"abcdefgh\x00",
            b"abcdefghi",
            b"abcdefgi",
            b"\xff",
            b"\xff\xff\xff\xff\xff\xff\xff\xff\xff",
        ]
        .iter()
        .map(|s| s.to_vec())
        .collect();
        for i in 0..16 {
            k.push(format!("key-{i:03}").into_bytes());
        }
        for i in 0..5 {
            k.push(format!("shared-prefix-longer-than-a-head/{i}").into_bytes());
        }
        k.push(vec![b'L'; 1000]);
        k.push(vec![b'M'; 4096]);
        let mut near = vec![b'M'; 4095];
        near.push(b'N');
        k.push(near);
        k
    })
}

fn key(i: usize) -> Vec<u8> {
    keys()[i % keys().len()].clone()
}

#[derive(Debug, Clone)]
struct Val {
    len: usize,
    seed: u8,
}

impl Val {
    fn bytes(&self) -> Vec<u8> {
        (0..self.len)
            .map(|i| self.seed.wrapping_add((i as u8).wrapping_mul(31)) ^ (i >> 8) as u8)
            .collect()
    }
}

#[derive(Debug, Clone)]
enum Expect {
    /// The key's current value (as the batch sees it) if it has one.
    Current,
    Other(Val),
}

#[derive(Debug, Clone)]
enum BOp {
    Put(usize, Val),
    Delete(usize),
    InsertIfAbsent(usize, Val),
    UpdateIfPresent(usize, Val),
    Cas(usize, Expect, Val),
    Cad(usize, Expect),
}

/// A bound key: a key of the key space, or one just after it, just before
/// it (shortened), or after everything it prefixes.
#[derive(Debug, Clone)]
struct BKey(usize, u8);

impl BKey {
    fn bytes(&self) -> Vec<u8> {
        let mut k = key(self.0);
        match self.1 {
            0 => {}
            1 => k.push(0),
            2 => {
                k.pop();
            }
            _ => k.push(0xff),
        }
        k
    }
}

#[derive(Debug, Clone)]
enum BSpec {
    Unbounded,
    Included(BKey),
    Excluded(BKey),
}

impl BSpec {
    fn bound(&self) -> Bound<Vec<u8>> {
        match self {
            BSpec::Unbounded => Bound::Unbounded,
            BSpec::Included(k) => Bound::Included(k.bytes()),
            BSpec::Excluded(k) => Bound::Excluded(k.bytes()),
        }
    }
}

#[derive(Debug, Clone)]
enum Scan {
    Forward,
    Reverse,
    /// Both ends at once: `true` takes from the front, `false` from the back,
    /// the pattern repeating until the two ends meet.
    Mixed(Vec<bool>),
}

#[derive(Debug, Clone)]
enum Step {
    Put(usize, Val),
    Delete(usize),
    Batch(Vec<BOp>),
    Cond(BOp),
    Get(BKey),
    Range(BSpec, BSpec, Scan),
    Snapshot,
    DropSnapshot(usize),
    /// An iterator started now and advanced one item per later step.
    HoldIter(BSpec, BSpec, bool),
    Checkpoint,
    Reopen,
    ClearCache,
}

fn val() -> impl Strategy<Value = Val> {
    let len = prop_oneof![
        1 => Just(0usize),
        5 => 1..=20usize,
        3 => 21..=300usize,
        1 => 1000..=1100usize,
        1 => 1025..=5000usize,
    ];
    (len, any::<u8>()).prop_map(|(len, seed)| Val { len, seed })
}

fn kidx() -> impl Strategy<Value = usize> {
    0..keys().len()
}

fn expect() -> impl Strategy<Value = Expect> {
    prop_oneof![3 => Just(Expect::Current), 1 => val().prop_map(Expect::Other)]
}

fn bop() -> impl Strategy<Value = BOp> {
    prop_oneof![
        4 => (kidx(), val()).prop_map(|(k, v)| BOp::Put(k, v)),
        2 => kidx().prop_map(BOp::Delete),
        1 => (kidx(), val()).prop_map(|(k, v)| BOp::InsertIfAbsent(k, v)),
        1 => (kidx(), val()).prop_map(|(k, v)| BOp::UpdateIfPresent(k, v)),
        1 => (kidx(), expect(), val()).prop_map(|(k, e, v)| BOp::Cas(k, e, v)),
        1 => (kidx(), expect()).prop_map(|(k, e)| BOp::Cad(k, e)),
    ]
}

fn cond_op() -> impl Strategy<Value = BOp> {
    prop_oneof![
        (kidx(), val()).prop_map(|(k, v)| BOp::InsertIfAbsent(k, v)),
        (kidx(), val()).prop_map(|(k, v)| BOp::UpdateIfPresent(k, v)),
        (kidx(), expect(), val()).prop_map(|(k, e, v)| BOp::Cas(k, e, v)),
        (kidx(), expect()).prop_map(|(k, e)| BOp::Cad(k, e)),
    ]
}

fn bkey() -> impl Strategy<Value = BKey> {
    (kidx(), prop_oneof![3 => Just(0u8), 1 => 1..4u8]).prop_map(|(k, v)| BKey(k, v))
}

fn bspec() -> impl Strategy<Value = BSpec> {
    prop_oneof![
        1 => Just(BSpec::Unbounded),
        2 => bkey().prop_map(BSpec::Included),
        2 => bkey().prop_map(BSpec::Excluded),
    ]
}

fn scan() -> impl Strategy<Value = Scan> {
    prop_oneof![
        Just(Scan::Forward),
        Just(Scan::Reverse),
        proptest::collection::vec(any::<bool>(), 1..6).prop_map(Scan::Mixed),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        20 => (kidx(), val()).prop_map(|(k, v)| Step::Put(k, v)),
        7 => kidx().prop_map(Step::Delete),
        10 => proptest::collection::vec(bop(), 1..8).prop_map(Step::Batch),
        8 => cond_op().prop_map(Step::Cond),
        3 => bkey().prop_map(Step::Get),
        8 => (bspec(), bspec(), scan()).prop_map(|(a, b, s)| Step::Range(a, b, s)),
        3 => Just(Step::Snapshot),
        2 => (0..4usize).prop_map(Step::DropSnapshot),
        3 => (bspec(), bspec(), any::<bool>()).prop_map(|(a, b, r)| Step::HoldIter(a, b, r)),
        3 => Just(Step::Checkpoint),
        2 => Just(Step::Reopen),
        1 => Just(Step::ClearCache),
    ]
}

fn in_range(k: &[u8], start: &Bound<Vec<u8>>, end: &Bound<Vec<u8>>) -> bool {
    let after_start = match start {
        Bound::Included(s) => k >= s.as_slice(),
        Bound::Excluded(s) => k > s.as_slice(),
        Bound::Unbounded => true,
    };
    let before_end = match end {
        Bound::Included(e) => k <= e.as_slice(),
        Bound::Excluded(e) => k < e.as_slice(),
        Bound::Unbounded => true,
    };
    after_start && before_end
}

type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

fn expected_range(m: &Model, start: &Bound<Vec<u8>>, end: &Bound<Vec<u8>>) -> Pairs {
    m.iter()
        .filter(|(k, _)| in_range(k, start, end))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn collect(it: impl Iterator<Item = kivi::Result<(Vec<u8>, Vec<u8>)>>) -> Pairs {
    it.map(|r| r.expect("iteration failed")).collect()
}

/// Walks `it` as `scan` says and returns the pairs in key order.
fn run_scan(mut it: Iter, scan: &Scan) -> Pairs {
    match scan {
        Scan::Forward => collect(it),
        Scan::Reverse => {
            let mut v = collect(it.rev());
            v.reverse();
            v
        }
        Scan::Mixed(pattern) => {
            let mut front = Vec::new();
            let mut back = Vec::new();
            for i in 0.. {
                let from_front = pattern[i % pattern.len()];
                let item = if from_front {
                    it.next()
                } else {
                    it.next_back()
                };
                match item {
                    Some(r) => {
                        let pair = r.expect("iteration failed");
                        if from_front {
                            front.push(pair)
                        } else {
                            back.push(pair)
                        }
                    }
                    None => break,
                }
            }
            assert!(it.next().is_none(), "front yields after the ends met");
            assert!(it.next_back().is_none(), "back yields after the ends met");
            back.reverse();
            front.extend(back);
            front
        }
    }
}

fn show_keys(p: &Pairs) -> Vec<String> {
    p.iter().map(|(k, _)| common::show(k)).collect()
}

struct HeldIter {
    it: Iter,
    expected: VecDeque<(Vec<u8>, Vec<u8>)>,
    rev: bool,
    what: String,
}

struct Harness {
    storage: MemoryStorage,
    opts: Options,
    db: Option<Db>,
    model: Model,
    snaps: Vec<(Snapshot, Model)>,
    iters: Vec<HeldIter>,
}

impl Harness {
    fn open(storage: &MemoryStorage, opts: &Options) -> Db {
        Db::open_with_storage(Arc::new(storage.clone()), opts.clone()).expect("open failed")
    }

    fn db(&self) -> &Db {
        self.db.as_ref().expect("db is open")
    }

    /// Decides `ops` against the model as the store must: in order, each
    /// seeing the effects of the ones before. Returns the outcome and the
    /// model after the batch if it applies.
    fn decide(&self, ops: &[BOp]) -> (WriteOutcome, Model, WriteBatch) {
        let mut m = self.model.clone();
        let mut b = WriteBatch::new();
        let mut failed = None;
        for (i, op) in ops.iter().enumerate() {
            let expected_of = |e: &Expect, k: &[u8], m: &Model| match e {
                Expect::Current => m.get(k).cloned().unwrap_or_else(|| b"absent".to_vec()),
                Expect::Other(v) => v.bytes(),
            };
            let ok = match op {
                BOp::Put(k, v) => {
                    b.put(key(*k), v.bytes()).unwrap();
                    m.insert(key(*k), v.bytes());
                    true
                }
                BOp::Delete(k) => {
                    b.delete(key(*k)).unwrap();
                    m.remove(&key(*k));
                    true
                }
                BOp::InsertIfAbsent(k, v) => {
                    b.insert_if_absent(key(*k), v.bytes()).unwrap();
                    let ok = !m.contains_key(&key(*k));
                    if ok {
                        m.insert(key(*k), v.bytes());
                    }
                    ok
                }
                BOp::UpdateIfPresent(k, v) => {
                    b.update_if_present(key(*k), v.bytes()).unwrap();
                    let ok = m.contains_key(&key(*k));
                    if ok {
                        m.insert(key(*k), v.bytes());
                    }
                    ok
                }
                BOp::Cas(k, e, v) => {
                    let exp = expected_of(e, &key(*k), &m);
                    b.compare_and_swap(key(*k), exp.clone(), v.bytes()).unwrap();
                    let ok = m.get(&key(*k)) == Some(&exp);
                    if ok {
                        m.insert(key(*k), v.bytes());
                    }
                    ok
                }
                BOp::Cad(k, e) => {
                    let exp = expected_of(e, &key(*k), &m);
                    b.compare_and_delete(key(*k), exp.clone()).unwrap();
                    let ok = m.get(&key(*k)) == Some(&exp);
                    if ok {
                        m.remove(&key(*k));
                    }
                    ok
                }
            };
            if !ok && failed.is_none() {
                failed = Some(i);
            }
        }
        match failed {
            Some(op) => (WriteOutcome::ConditionFailed { op }, self.model.clone(), b),
            None => (WriteOutcome::Applied, m, b),
        }
    }

    fn step(&mut self, n: usize, s: &Step) {
        let db = self.db().clone();
        match s {
            Step::Put(k, v) => {
                db.put(&key(*k), &v.bytes()).expect("put failed");
                self.model.insert(key(*k), v.bytes());
            }
            Step::Delete(k) => {
                db.delete(&key(*k)).expect("delete failed");
                self.model.remove(&key(*k));
            }
            Step::Batch(ops) => {
                let (outcome, after, batch) = self.decide(ops);
                let got = db.write(batch).expect("write failed");
                assert_eq!(got, outcome, "step {n}: outcome of batch {ops:?}");
                self.model = after;
            }
            Step::Cond(op) => {
                let (outcome, after, _) = self.decide(std::slice::from_ref(op));
                let want = outcome == WriteOutcome::Applied;
                let expected_of = |e: &Expect, k: &[u8]| match e {
                    Expect::Current => self
                        .model
                        .get(k)
                        .cloned()
                        .unwrap_or_else(|| b"absent".to_vec()),
                    Expect::Other(v) => v.bytes(),
                };
                let got = match op {
                    BOp::InsertIfAbsent(k, v) => db.insert_if_absent(&key(*k), &v.bytes()),
                    BOp::UpdateIfPresent(k, v) => db.update_if_present(&key(*k), &v.bytes()),
                    BOp::Cas(k, e, v) => {
                        db.compare_and_swap(&key(*k), &expected_of(e, &key(*k)), &v.bytes())
                    }
                    BOp::Cad(k, e) => db.compare_and_delete(&key(*k), &expected_of(e, &key(*k))),
                    BOp::Put(..) | BOp::Delete(_) => unreachable!("not conditional"),
                }
                .expect("conditional write failed");
                assert_eq!(got, want, "step {n}: result of {op:?}");
                self.model = after;
            }
            Step::Get(k) => {
                let k = k.bytes();
                match db.get(&k) {
                    // A key no write can store may be refused on reads too.
                    Err(kivi::Error::KeyTooLarge { len, max })
                        if k.len() > kivi::limits::MAX_KEY_LEN =>
                    {
                        assert_eq!((len, max), (k.len(), kivi::limits::MAX_KEY_LEN));
                    }
                    r => assert_eq!(
                        r.expect("get failed"),
                        self.model.get(&k).cloned(),
                        "step {n}: get({})",
                        common::show(&k)
                    ),
                }
            }
            Step::Range(a, b, scan) => {
                let (start, end) = (a.bound(), b.bound());
                let want = expected_range(&self.model, &start, &end);
                let got = run_scan(db.range((start.clone(), end.clone())), scan);
                assert!(
                    got == want,
                    "step {n}: range {start:?}..{end:?} {scan:?}: got keys {:?}, want {:?}",
                    show_keys(&got),
                    show_keys(&want)
                );
            }
            Step::Snapshot => {
                if self.snaps.len() >= 4 {
                    self.snaps.remove(0);
                }
                self.snaps.push((db.snapshot(), self.model.clone()));
            }
            Step::DropSnapshot(i) => {
                if !self.snaps.is_empty() {
                    let i = i % self.snaps.len();
                    self.snaps.remove(i);
                }
            }
            Step::HoldIter(a, b, rev) => {
                if self.iters.len() >= 4 {
                    self.iters.remove(0);
                }
                let (start, end) = (a.bound(), b.bound());
                let mut expected: VecDeque<_> = expected_range(&self.model, &start, &end).into();
                if *rev {
                    expected = expected.into_iter().rev().collect();
                }
                self.iters.push(HeldIter {
                    it: db.range((start.clone(), end.clone())),
                    expected,
                    rev: *rev,
                    what: format!("iterator of step {n} over {start:?}..{end:?} rev={rev}"),
                });
            }
            Step::Checkpoint => db.checkpoint().expect("checkpoint failed"),
            Step::Reopen => {
                drop(db);
                self.snaps.clear();
                self.iters.clear();
                self.db = None;
                self.db = Some(Self::open(&self.storage, &self.opts));
            }
            Step::ClearCache => db.clear_cache(),
        }
    }

    /// Compares everything readable with the model(s).
    fn verify(&mut self, n: usize) {
        let db = self.db();
        for k in keys() {
            assert_eq!(
                db.get(k).expect("get failed"),
                self.model.get(k).cloned(),
                "after step {n}: get({})",
                common::show(k)
            );
        }
        // Every key at once, some twice and out of order: each answered
        // once, in order, as the model says.
        let many: Vec<&[u8]> = keys()
            .iter()
            .chain(keys().iter().rev().step_by(3))
            .map(|k| k.as_slice())
            .collect();
        let mut answered = 0;
        db.get_each(&many, |i, v| {
            assert_eq!(
                i, answered,
                "after step {n}: get_each answered out of order"
            );
            answered += 1;
            assert_eq!(
                v,
                self.model.get(many[i]).map(|v| v.as_slice()),
                "after step {n}: get_each of {}",
                common::show(many[i])
            );
            std::ops::ControlFlow::Continue(())
        })
        .expect("get_each failed");
        assert_eq!(
            answered,
            many.len(),
            "after step {n}: get_each answered every key"
        );
        // One key at a time (a path of its own).
        for k in keys() {
            let mut got = None;
            db.get_each(&[k.as_slice()], |i, v| {
                assert_eq!(i, 0);
                got = Some(v.map(|v| v.to_vec()));
                std::ops::ControlFlow::Continue(())
            })
            .expect("get_each failed");
            assert_eq!(
                got,
                Some(self.model.get(k).cloned()),
                "after step {n}: get_each of {} alone",
                common::show(k)
            );
        }
        // Stopped partway: nothing after the stop is answered.
        let stop_after = n % many.len() + 1;
        let mut answered = 0;
        db.get_each(&many, |i, _| {
            assert!(i < stop_after, "after step {n}: answered past a stop");
            answered += 1;
            if answered == stop_after {
                std::ops::ControlFlow::Break(())
            } else {
                std::ops::ControlFlow::Continue(())
            }
        })
        .expect("get_each failed");
        assert_eq!(
            answered, stop_after,
            "after step {n}: get_each stopped where asked"
        );
        let all: Pairs = self
            .model
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let got = collect(db.iter());
        assert!(
            got == all,
            "after step {n}: scan shows keys {:?}, model has {:?}",
            show_keys(&got),
            show_keys(&all)
        );
        let mut back = collect(db.iter().rev());
        back.reverse();
        assert!(back == all, "after step {n}: reverse scan differs");
        assert_eq!(
            db.stats().expect("stats failed").pairs,
            self.model.len() as u64,
            "after step {n}: pair count"
        );
        for (i, (snap, m)) in self.snaps.iter().enumerate() {
            let want: Pairs = m.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            let got = collect(snap.iter());
            assert!(
                got == want,
                "after step {n}: snapshot {i} shows keys {:?}, had {:?}",
                show_keys(&got),
                show_keys(&want)
            );
            assert_eq!(
                snap.len().expect("len failed"),
                m.len() as u64,
                "after step {n}: snapshot {i} len"
            );
            for k in keys() {
                assert_eq!(
                    snap.get(k).expect("snapshot get failed"),
                    m.get(k).cloned(),
                    "after step {n}: snapshot {i} get({})",
                    common::show(k)
                );
            }
        }
        let mut done = Vec::new();
        for (i, h) in self.iters.iter_mut().enumerate() {
            let item = if h.rev { h.it.next_back() } else { h.it.next() };
            let got = item.map(|r| r.expect("held iterator failed"));
            let want = h.expected.pop_front();
            assert!(
                got == want,
                "after step {n}: {} yielded {:?}, want {:?}",
                h.what,
                got.as_ref().map(|p| common::show(&p.0)),
                want.as_ref().map(|p| common::show(&p.0))
            );
            if want.is_none() {
                done.push(i);
            }
        }
        for i in done.into_iter().rev() {
            self.iters.remove(i);
        }
    }
}

fn run_steps(opts: &Options, steps: &[Step]) {
    let storage = MemoryStorage::new();
    let mut h = Harness {
        db: Some(Harness::open(&storage, opts)),
        storage,
        opts: opts.clone(),
        model: Model::new(),
        snaps: Vec::new(),
        iters: Vec::new(),
    };
    for (n, s) in steps.iter().enumerate() {
        h.step(n, s);
        h.verify(n);
    }
    common::assert_healthy(h.db(), h.model.len());
    if std::env::var("KIVI_TEST_VERBOSE").is_ok() {
        let st = h.db().stats().unwrap();
        eprintln!(
            "steps {} pairs {} height {} checkpoints {} commit segs {} page segs {} seq {}",
            steps.len(),
            st.pairs,
            st.tree_height,
            st.checkpoints,
            st.commit_segments,
            st.page_segments,
            st.seq
        );
    }
    // And once more from storage alone.
    h.snaps.clear();
    h.iters.clear();
    h.db = None;
    h.db = Some(Harness::open(&h.storage, opts));
    h.verify(steps.len());
    common::assert_healthy(h.db(), h.model.len());
}

fn run_model(name: &str, opts: Options, default_cases: u64, salt: u64) {
    common::watch_library_panics();
    let seed = env_u64("KIVI_TEST_SEED").unwrap_or(0x6b69_7669_0000 + salt);
    let config = Config {
        cases: cases(default_cases) as u32,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        max_shrink_iters: 400,
        max_shrink_time: 120_000,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let strategy = proptest::collection::vec(step(), 1..160);
    let result = runner.run(&strategy, |steps| {
        run_steps(&opts, &steps);
        let lib = common::take_library_panics();
        prop_assert!(lib.is_empty(), "library thread panicked: {:?}", lib);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{name}: proptest seed {seed} (rerun with KIVI_TEST_SEED={seed}): {e}");
    }
}

#[test]
fn model_default_options() {
    run_model("model_default_options", Options::default(), 256, 1);
}

#[test]
fn model_small_pages_segments_and_checkpoints() {
    run_model("model_small_pages", small_opts(), 512, 2);
}

/// Enough writes of large values that segments roll and background
/// checkpoints run while the model is checked.
#[test]
fn model_many_large_writes_small_options() {
    common::watch_library_panics();
    for seed in common::seeds(8, 3) {
        let mut steps = Vec::new();
        let mut x = seed;
        for _ in 0..600 {
            x = common::mix(x);
            let k = (x % keys().len() as u64) as usize;
            let len = if x % 3 == 0 {
                1025 + (x >> 20) as usize % 3000
            } else {
                (x >> 20) as usize % 200
            };
            let v = Val {
                len,
                seed: (x >> 8) as u8,
            };
            steps.push(match (x >> 40) % 23 {
                0 => Step::Delete(k),
                1 => Step::Reopen,
                2 => Step::Snapshot,
                3 => Step::Checkpoint,
                4 => Step::Range(
                    BSpec::Unbounded,
                    BSpec::Unbounded,
                    Scan::Mixed(vec![true, false, false]),
                ),
                5 => Step::Batch(vec![
                    BOp::Put(k, v.clone()),
                    BOp::Cas(k + 1, Expect::Current, v),
                ]),
                _ => Step::Put(k, v),
            });
        }
        let r = std::panic::catch_unwind(|| run_steps(&small_opts(), &steps));
        if let Err(e) = r {
            panic!(
                "seed {seed} (KIVI_TEST_SEED={seed}): {}",
                common::panic_message(e.as_ref())
            );
        }
        assert!(common::take_library_panics().is_empty());
    }
}
