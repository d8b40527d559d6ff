//! Crash simulation: a store on `SimStorage` runs a random workload (batches
//! of puts, some with deadlines far after the test, and deletes, some
//! conditional, sometimes from several threads at
//! once so group commit merges them, explicit checkpoints, injected EIO and
//! ENOSPC), then the simulated machine loses power at a random moment:
//! un-synced writes are dropped, reordered or torn. The store reopened on
//! what the "rebooted" disk holds must hold every acknowledged batch, no
//! batch in part, nothing that was never written; `check()` must be clean;
//! and it must take new writes and survive the next crash.
//!
//! Every value carries the id of the batch that wrote it, so what survived
//! can be traced to batches (see `common::check_recovered`).
//!
//! `KIVI_TEST_CASES` sets the number of cases of each test, `KIVI_TEST_SEED`
//! runs one seed. Cases are deterministic given their seed except for thread
//! scheduling (the background checkpointer, multi-threaded writers) and the
//! prefix a failed append leaves behind (the simulator draws it from the
//! thread RNG).

mod common;

use common::{
    assert_healthy, batch_value, cases, check_recovered, dump, env_u64, mix, run_seeds, seeds,
    BatchRec, Model, Status, WriterHistory,
};
use kivi::storage::Storage;
use kivi::{Db, Durability, Error, Options, WriteBatch, WriteOutcome};
use kivi_storage::{Fault, IoError, SegmentId, SegmentReader, SegmentWriter, SimOp, SimStorage};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const MAX_WRITERS: usize = 4;

/// What a batch does, one operation per key.
type Effects = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

/// What the cases exercised, printed at the end of each test (visible with
/// `--nocapture`), to see that the interesting paths are reached.
#[derive(Default)]
struct Tally {
    cases: AtomicU64,
    crashes: AtomicU64,
    acked: AtomicU64,
    no_effect: AtomicU64,
    failed: AtomicU64,
    in_doubt: AtomicU64,
    failed_present: AtomicU64,
    in_doubt_present: AtomicU64,
    healed: AtomicU64,
    torn_tails: AtomicU64,
    checkpoints: AtomicU64,
    max_segments: AtomicU64,
    failed_opens: AtomicU64,
    /// Batches committed and the group commits that carried them.
    batches: AtomicU64,
    groups: AtomicU64,
    /// Calls the injected faults failed, per kind of call and fault, and
    /// appends the quota failed (summed over every simulated disk).
    fired: Mutex<BTreeMap<(SimOp, Fault), u64>>,
    quota_hits: AtomicU64,
}

impl Tally {
    fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    fn before_crash(&self, db: &Db) {
        if let Ok(s) = db.stats() {
            Tally::add(&self.checkpoints, s.checkpoints);
            Tally::add(&self.batches, s.batches);
            Tally::add(&self.groups, s.group_commits);
        }
    }

    /// Adds up the faults `sim` fired: call once per disk, when done with it
    /// (before a crash replaces it, or at the end of a case).
    fn disk(&self, sim: &SimStorage) {
        let mut fired = self.fired.lock().unwrap();
        for (k, n) in sim.faults_fired() {
            *fired.entry(k).or_default() += n;
        }
        Tally::add(&self.quota_hits, sim.quota_hits());
    }

    fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }

    /// Faults fired on calls of kind `op`, of any fault.
    fn fired_on(&self, op: SimOp) -> u64 {
        let fired = self.fired.lock().unwrap();
        fired
            .iter()
            .filter(|((o, _), _)| *o == op)
            .map(|(_, n)| n)
            .sum()
    }

    /// Faults of kind `fault` fired, on any call.
    fn fired_as(&self, fault: Fault) -> u64 {
        let fired = self.fired.lock().unwrap();
        fired
            .iter()
            .filter(|((_, f), _)| *f == fault)
            .map(|(_, n)| n)
            .sum()
    }

    /// Fails unless every counter in `reached` is above zero: what `test`
    /// claims to exercise was exercised. A cut-down run (`KIVI_TEST_SEED`,
    /// or fewer cases than the test's `default`) need not reach everything.
    fn assert_reached(&self, test: &str, default: u64, reached: &[(&str, u64)]) {
        if env_u64("KIVI_TEST_SEED").is_some() || cases(default) < default {
            return;
        }
        let missed: Vec<&str> = reached
            .iter()
            .filter(|(_, n)| *n == 0)
            .map(|(what, _)| *what)
            .collect();
        assert!(
            missed.is_empty(),
            "{test}: {default} cases never exercised: {}",
            missed.join(", ")
        );
    }

    /// What every test with faults must have injected: both faults, on
    /// every kind of call its plans aim at (`ops`), and the quota.
    fn faults_reached(&self, ops: &[SimOp]) -> Vec<(String, u64)> {
        let mut v = vec![
            ("an injected EIO".to_string(), self.fired_as(Fault::Io)),
            (
                "an injected ENOSPC".to_string(),
                self.fired_as(Fault::NoSpace),
            ),
            (
                "an append over the quota".to_string(),
                Tally::get(&self.quota_hits),
            ),
        ];
        for &op in ops {
            v.push((format!("a fault on {op:?}"), self.fired_on(op)));
        }
        v
    }

    fn print(&self, test: &str) {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        println!(
            "{test}: {} cases, {} crashes; batches: {} acked, {} condition failed, {} failed, \
             {} in doubt; after crashes {} failed and {} in-doubt batches were present; \
             {} heals; {} torn tails cut; {} checkpoints; up to {} segments; {} batches in {} \
             group commits; {} opens failed on a fault; faults fired: {:?}; {} appends over \
             the quota",
            g(&self.cases),
            g(&self.crashes),
            g(&self.acked),
            g(&self.no_effect),
            g(&self.failed),
            g(&self.in_doubt),
            g(&self.failed_present),
            g(&self.in_doubt_present),
            g(&self.healed),
            g(&self.torn_tails),
            g(&self.checkpoints),
            g(&self.max_segments),
            g(&self.batches),
            g(&self.groups),
            g(&self.failed_opens),
            self.fired.lock().unwrap(),
            g(&self.quota_hits),
        );
    }
}
const KEYS_PER_WRITER: usize = 24;

fn writer_key(w: usize, i: usize) -> Vec<u8> {
    if i == KEYS_PER_WRITER - 1 {
        // One long key per writer, so pages hold few entries.
        let mut k = format!("w{w}/").into_bytes();
        k.resize(700, b'x');
        k
    } else {
        format!("w{w}/{i:02}").into_bytes()
    }
}

/// Shared between the writers of a round and the thread that crashes it.
struct Shared {
    clock: AtomicU64,
    crashed: AtomicBool,
    /// Faults are armed: errors are allowed.
    faults: bool,
    /// Every armed fault is ENOSPC: every error must say the disk is full.
    only_full: bool,
}

impl Shared {
    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::SeqCst) + 1
    }
}

/// One writer: owns its keys, knows their values in the running process
/// (acknowledged batches applied, failed ones not) and records its history.
struct Writer {
    w: usize,
    rng: StdRng,
    state: Model,
    history: WriterHistory,
    next_id: u64,
    errors: Vec<String>,
    /// Chance of an explicit checkpoint before each batch.
    checkpoint_chance: f64,
}

impl Writer {
    fn new(w: usize, round: usize, seed: u64, base: &Model, opts: &Options) -> Writer {
        let state = (0..KEYS_PER_WRITER)
            .filter_map(|i| {
                let k = writer_key(w, i);
                base.get(&k).map(|v| (k, v.clone()))
            })
            .collect();
        Writer {
            w,
            rng: StdRng::seed_from_u64(mix(seed ^ ((round as u64) << 32) ^ ((w as u64) << 48))),
            state,
            history: WriterHistory::default(),
            // Ids unique across writers and rounds.
            next_id: ((round as u64 + 1) << 40) | ((w as u64) << 32),
            errors: Vec::new(),
            checkpoint_chance: if opts.checkpoint_bytes == NO_BACKGROUND_CHECKPOINTS {
                0.08
            } else {
                0.03
            },
        }
    }

    fn key(&mut self) -> Vec<u8> {
        let i = self.rng.random_range(0..KEYS_PER_WRITER);
        writer_key(self.w, i)
    }

    /// Builds a batch and what it must do: `(batch, outcome, effects)`.
    fn build(&mut self, id: u64) -> (WriteBatch, WriteOutcome, Effects) {
        let mut b = WriteBatch::new();
        let mut view = self.state.clone();
        let mut effects = BTreeMap::new();
        let mut failed = None;
        let n = self.rng.random_range(1..=6);
        let conditional = self.rng.random_bool(0.25);
        for i in 0..n {
            let k = self.key();
            let v = batch_value(id, &k);
            let cond = conditional && (i == n - 1 || self.rng.random_bool(0.3));
            let ok = if !cond {
                if self.rng.random_bool(0.8) {
                    b.put(k.clone(), v.clone()).unwrap();
                    if self.rng.random_bool(0.3) {
                        // A deadline long after the test: the value lives
                        // on, but goes through the log and pages with one.
                        let far = 4_102_444_800_000 + self.rng.random_range(0..1_000_000);
                        b.with_deadline(Some(kivi::Deadline::from_unix_millis(far)))
                            .unwrap();
                    }
                    view.insert(k.clone(), v.clone());
                    effects.insert(k, Some(v));
                } else {
                    b.delete(k.clone()).unwrap();
                    view.remove(&k);
                    effects.insert(k, None);
                }
                true
            } else {
                let current = view.get(&k).cloned();
                let wrong = self.rng.random_bool(0.25);
                let exp = match (&current, wrong) {
                    (Some(c), false) => c.clone(),
                    _ => b"no such value".to_vec(),
                };
                let (ok, delete) = match self.rng.random_range(0..4) {
                    0 => {
                        b.insert_if_absent(k.clone(), v.clone()).unwrap();
                        (current.is_none(), false)
                    }
                    1 => {
                        b.update_if_present(k.clone(), v.clone()).unwrap();
                        (current.is_some(), false)
                    }
                    2 => {
                        b.compare_and_swap(k.clone(), exp.clone(), v.clone())
                            .unwrap();
                        (current.as_ref() == Some(&exp), false)
                    }
                    _ => {
                        b.compare_and_delete(k.clone(), exp.clone()).unwrap();
                        (current.as_ref() == Some(&exp), true)
                    }
                };
                if ok && delete {
                    view.remove(&k);
                    effects.insert(k, None);
                } else if ok {
                    view.insert(k.clone(), v.clone());
                    effects.insert(k, Some(v));
                }
                ok
            };
            if !ok && failed.is_none() {
                failed = Some(i);
            }
        }
        match failed {
            Some(op) => (b, WriteOutcome::ConditionFailed { op }, BTreeMap::new()),
            None => (b, WriteOutcome::Applied, effects),
        }
    }

    /// Runs one batch. Returns false once the machine has crashed.
    fn step(&mut self, db: &Db, shared: &Shared) -> bool {
        if self.rng.random_bool(self.checkpoint_chance) {
            // Now and then a compaction: every live page copied, every other
            // segment deleted.
            let r = if self.rng.random_bool(0.2) {
                db.compact()
            } else {
                db.checkpoint()
            };
            if let Err(e) = r {
                if !shared.crashed.load(Ordering::SeqCst) {
                    assert!(shared.faults, "checkpoint failed with no fault armed: {e}");
                    self.check_error(&e, shared);
                }
            }
        }
        let id = self.next_id;
        self.next_id += 1;
        let (batch, outcome, effects) = self.build(id);
        let start = shared.tick();
        let r = db.write(batch);
        let finish = shared.tick();
        let status = match r {
            Ok(got) => {
                assert_eq!(
                    got, outcome,
                    "writer {}: batch {id} decided differently than its writer's view says",
                    self.w
                );
                if outcome == WriteOutcome::Applied {
                    for (k, v) in &effects {
                        match v {
                            Some(v) => self.state.insert(k.clone(), v.clone()),
                            None => self.state.remove(k),
                        };
                    }
                    Status::Acked
                } else {
                    Status::NoEffect
                }
            }
            Err(_) if shared.crashed.load(Ordering::SeqCst) => Status::InDoubt,
            Err(e) => {
                assert!(shared.faults, "write failed with no fault armed: {e}");
                self.check_error(&e, shared);
                self.errors.push(e.to_string());
                Status::Failed
            }
        };
        self.history.batches.push(BatchRec {
            id,
            ops: effects,
            status,
            start,
            finish,
        });
        status != Status::InDoubt
    }

    fn check_error(&self, e: &Error, shared: &Shared) {
        assert!(
            matches!(e, Error::Io(_)),
            "an injected I/O fault must surface as Error::Io, got: {e:?}"
        );
        if shared.only_full {
            assert!(e.is_full(), "ENOSPC must give is_full(): {e}");
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Plan {
    None,
    Inject {
        op: Option<SimOp>,
        skip: u64,
        fault: Fault,
        sticky: bool,
    },
    Quota {
        extra: u64,
    },
}

impl Plan {
    fn random(rng: &mut StdRng) -> Plan {
        let fault = if rng.random_bool(0.3) {
            Fault::NoSpace
        } else {
            Fault::Io
        };
        let sticky = rng.random_bool(0.3);
        let (op, skip) = match rng.random_range(0..10) {
            0..=3 => return Plan::None,
            4 => (Some(SimOp::Sync), rng.random_range(0..40)),
            5 => (Some(SimOp::Append), rng.random_range(0..60)),
            6 => (Some(SimOp::Create), rng.random_range(0..4)),
            7 => (Some(SimOp::Read), rng.random_range(0..200)),
            8 => {
                return Plan::Quota {
                    extra: rng.random_range(0..200_000),
                }
            }
            _ => (
                [None, Some(SimOp::Delete), Some(SimOp::Sync)][rng.random_range(0..3)],
                rng.random_range(0..150),
            ),
        };
        Plan::Inject {
            op,
            skip,
            fault,
            sticky,
        }
    }

    fn arm(&self, sim: &SimStorage) {
        match *self {
            Plan::None => {}
            Plan::Inject {
                op,
                skip,
                fault,
                sticky,
            } => sim.inject(op, skip, fault, sticky),
            Plan::Quota { extra } => sim.set_quota(Some(sim.total_bytes() + extra)),
        }
    }

    fn only_full(&self) -> bool {
        matches!(
            self,
            Plan::Quota { .. }
                | Plan::Inject {
                    fault: Fault::NoSpace,
                    ..
                }
        )
    }
}

#[derive(Debug, Clone)]
struct CaseConfig {
    durability: Durability,
    /// Writer threads per round: a range drawn from per round.
    max_writers: usize,
    faults: bool,
    rounds: std::ops::RangeInclusive<usize>,
    batches: std::ops::Range<usize>,
}

/// Background checkpoints off: the test's own checkpoints are the only ones.
const NO_BACKGROUND_CHECKPOINTS: u64 = 1 << 40;

fn opts(rng: &mut StdRng, durability: Durability) -> Options {
    Options {
        page_size: [256, 512, 1024, 4096][rng.random_range(0..4)],
        cache_bytes: 64 << 10,
        // Half the cases checkpoint in the background (as configured in
        // production, at small sizes), half only when the writer asks, which
        // keeps a single-writer case's sequence of storage calls, and so the
        // calls its faults hit, the same from run to run.
        checkpoint_bytes: if rng.random_bool(0.5) {
            64 << 10
        } else {
            NO_BACKGROUND_CHECKPOINTS
        },
        segment_bytes: 64 << 10,
        // Half the cases clean as hard as they may: the cleaner copies
        // pages at nearly every checkpoint.
        space_amplification_max: if rng.random_bool(0.5) { 1.25 } else { 2.0 },
        durability,
        ..Default::default()
    }
}

fn open(sim: &SimStorage, opts: &Options) -> kivi::Result<Db> {
    Db::open_with_storage(Arc::new(sim.clone()), opts.clone())
}

/// The simulator with fdatasync taking real time, as on a disk, so that
/// concurrent writers queue up behind a sync and group commit merges them.
#[derive(Debug)]
struct SlowSync {
    sim: SimStorage,
    delay: Duration,
}

struct SlowWriter {
    inner: Box<dyn SegmentWriter>,
    delay: Duration,
}

impl SegmentWriter for SlowWriter {
    fn append(&mut self, bytes: &[u8]) -> Result<(), IoError> {
        self.inner.append(bytes)
    }
    fn sync(&mut self) -> Result<(), IoError> {
        std::thread::sleep(self.delay);
        self.inner.sync()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
}

impl Storage for SlowSync {
    fn list_segments(&self) -> Result<Vec<SegmentId>, IoError> {
        self.sim.list_segments()
    }
    fn create_segment(&self, id: SegmentId) -> Result<Box<dyn SegmentWriter>, IoError> {
        Ok(Box::new(SlowWriter {
            inner: self.sim.create_segment(id)?,
            delay: self.delay,
        }))
    }
    fn open_segment(&self, id: SegmentId) -> Result<Arc<dyn SegmentReader>, IoError> {
        self.sim.open_segment(id)
    }
    fn delete_segment(&self, id: SegmentId) -> Result<(), IoError> {
        self.sim.delete_segment(id)
    }
    fn read_meta(&self, name: &str) -> Result<Option<Vec<u8>>, IoError> {
        self.sim.read_meta(name)
    }
    fn write_meta(&self, name: &str, bytes: &[u8]) -> Result<(), IoError> {
        self.sim.write_meta(name, bytes)
    }
    fn segment_name(&self, id: SegmentId) -> String {
        self.sim.segment_name(id)
    }
}

/// Opens the store a crash left, checks it against the history, and
/// returns it with its contents.
fn recover_and_verify(
    sim: &SimStorage,
    opts: &Options,
    base: &Model,
    histories: &[WriterHistory],
    durable: bool,
    what: &str,
    tally: &Tally,
) -> (Db, Model) {
    let db = open(sim, opts).unwrap_or_else(|e| panic!("{what}: reopening failed: {e}"));
    let observed = dump(&db);
    if let Err(msg) = check_recovered(base, histories, &observed, durable) {
        panic!("{what}: recovered state is wrong: {msg}");
    }
    let report = db.check().expect("check failed to run");
    assert!(
        report.is_healthy(),
        "{what}: check after recovery: {:?}",
        report.problems
    );
    assert_eq!(
        report.pairs,
        observed.len() as u64,
        "{what}: check's pair count"
    );
    let stats = db.stats().unwrap();
    assert_eq!(stats.pairs, observed.len() as u64, "{what}: stats pairs");
    Tally::add(&tally.torn_tails, u64::from(stats.torn_tail.is_some()));
    tally.max_segments.fetch_max(
        stats.commit_segments + stats.page_segments,
        Ordering::Relaxed,
    );
    for h in histories {
        for b in &h.batches {
            let c = match b.status {
                Status::Acked => &tally.acked,
                Status::NoEffect => &tally.no_effect,
                Status::Failed => &tally.failed,
                Status::InDoubt => &tally.in_doubt,
            };
            Tally::add(c, 1);
            let present = b
                .ops
                .iter()
                .any(|(k, v)| v.is_some() && observed.get(k) == v.as_ref());
            if present && b.status == Status::Failed {
                Tally::add(&tally.failed_present, 1);
            }
            if present && b.status == Status::InDoubt {
                Tally::add(&tally.in_doubt_present, 1);
            }
        }
    }
    (db, observed)
}

/// Opens the crashed store while a fault is armed: opening must fail with
/// an I/O error (never report corruption, never panic) or succeed with the
/// right contents.
#[allow(clippy::too_many_arguments)]
fn open_with_fault(
    rng: &mut StdRng,
    sim: &SimStorage,
    opts: &Options,
    base: &Model,
    histories: &[WriterHistory],
    durable: bool,
    what: &str,
    tally: &Tally,
) {
    let ops = [
        None,
        Some(SimOp::List),
        Some(SimOp::Open),
        Some(SimOp::Read),
        Some(SimOp::ReadMeta),
        Some(SimOp::Delete),
        Some(SimOp::Create),
        Some(SimOp::Append),
        Some(SimOp::Sync),
    ];
    let op = ops[rng.random_range(0..ops.len())];
    let skip = rng.random_range(0..40);
    let fault = if rng.random_bool(0.5) {
        Fault::Io
    } else {
        Fault::NoSpace
    };
    let sticky = rng.random_bool(0.5);
    sim.inject(op, skip, fault, sticky);
    let what = format!("{what}: open with {op:?} fault after {skip} calls (sticky {sticky})");
    match open(sim, opts) {
        Err(e) => {
            Tally::add(&tally.failed_opens, 1);
            assert!(
                matches!(e, Error::Io(_)),
                "{what}: an injected I/O fault must fail the open with Error::Io, got: {e:?}"
            );
            sim.heal();
        }
        Ok(db) => {
            sim.heal();
            let observed = dump(&db);
            if let Err(msg) = check_recovered(base, histories, &observed, durable) {
                panic!("{what}: opened despite the fault, with the wrong contents: {msg}");
            }
        }
    }
}

fn run_case(seed: u64, cfg: &CaseConfig, tally: &Tally) {
    Tally::add(&tally.cases, 1);
    let mut rng = StdRng::seed_from_u64(seed);
    let opts = opts(&mut rng, cfg.durability);
    let durable = cfg.durability == Durability::Fsync;
    let mut sim = SimStorage::with_seed(seed);
    let mut base = Model::new();
    let mut histories: Vec<WriterHistory> = Vec::new();
    let rounds = rng.random_range(cfg.rounds.clone());
    // What the earlier rounds did, for failure messages.
    let mut story = format!("page size {}", opts.page_size);
    for round in 0..=rounds {
        let what = format!("seed {seed} round {round} (after: {story})");
        if round > 0 && cfg.faults && rng.random_bool(0.3) {
            open_with_fault(
                &mut rng, &sim, &opts, &base, &histories, durable, &what, tally,
            );
        }
        let (db, observed) =
            recover_and_verify(&sim, &opts, &base, &histories, durable, &what, tally);
        base = observed;
        if round == rounds {
            // The last recovery must take writes again.
            db.put(b"after/last", b"crash")
                .expect("write after recovery");
            assert_eq!(
                db.get(b"after/last").unwrap().as_deref(),
                Some(&b"crash"[..])
            );
            assert_healthy(
                &db,
                base.len() + usize::from(!base.contains_key(&b"after/last"[..])),
            );
            tally.disk(&sim);
            break;
        }

        let plan = if cfg.faults {
            Plan::random(&mut rng)
        } else {
            Plan::None
        };
        let shared = Arc::new(Shared {
            clock: AtomicU64::new(0),
            crashed: AtomicBool::new(false),
            faults: !matches!(plan, Plan::None),
            only_full: plan.only_full(),
        });
        let nwriters = rng.random_range(1..=cfg.max_writers);
        let batches = rng.random_range(cfg.batches.clone());
        let writers: Vec<Writer> = (0..nwriters)
            .map(|w| Writer::new(w, round, seed, &base, &opts))
            .collect();
        let context = format!("{what} plan {plan:?} writers {nwriters} batches {batches}");
        story.push_str(&format!(
            "; round {round}: {plan:?}, {nwriters} writers, {batches} batches"
        ));
        let db = if nwriters > 1 {
            // Concurrent writers: reopen with syncs that take time.
            drop(db);
            let slow = SlowSync {
                sim: sim.clone(),
                delay: Duration::from_micros(rng.random_range(20..400)),
            };
            Db::open_with_storage(Arc::new(slow), opts.clone())
                .unwrap_or_else(|e| panic!("{context}: reopening on slow syncs: {e}"))
        } else {
            db
        };
        plan.arm(&sim);

        let mut writers = if nwriters == 1 {
            let mut w = writers.into_iter().next().unwrap();
            for _ in 0..batches {
                w.step(&db, &shared);
            }
            vec![w]
        } else {
            // Several threads at once: they meet in group commits. The
            // crash comes while they run.
            let handles: Vec<_> = writers
                .into_iter()
                .map(|mut w| {
                    let db = db.clone();
                    let shared = shared.clone();
                    std::thread::spawn(move || {
                        for _ in 0..batches {
                            if shared.crashed.load(Ordering::SeqCst) || !w.step(&db, &shared) {
                                break;
                            }
                        }
                        w
                    })
                })
                .collect();
            let target = rng.random_range(1..=(batches * nwriters * 2) as u64);
            let deadline = Instant::now() + Duration::from_secs(20);
            while shared.clock.load(Ordering::SeqCst) < target
                && !handles.iter().all(|h| h.is_finished())
                && Instant::now() < deadline
            {
                std::thread::yield_now();
            }
            tally.before_crash(&db);
            shared.crashed.store(true, Ordering::SeqCst);
            let after = sim.crash(&mut rng);
            Tally::add(&tally.crashes, 1);
            let writers: Vec<Writer> = handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                .collect();
            drop(db);
            tally.disk(&sim);
            sim = after;
            histories = writers.into_iter().map(|w| w.history).collect();
            continue;
        };

        // Single writer: sometimes the disk is healed before the crash and
        // the running store must show exactly the acknowledged state, take
        // new writes, and pass check.
        if shared.faults && rng.random_bool(0.5) {
            sim.heal();
            Tally::add(&tally.healed, 1);
            story.push_str(", healed");
            let w = &mut writers[0];
            let mut expected = base.clone();
            for i in 0..KEYS_PER_WRITER {
                let k = writer_key(0, i);
                match w.state.get(&k) {
                    Some(v) => expected.insert(k, v.clone()),
                    None => expected.remove(&k),
                };
            }
            let now = dump(&db);
            assert!(
                now == expected,
                "{context}: after heal() the running store differs from the acknowledged \
                 writes: {}",
                first_difference(&now, &expected)
            );
            let healthy = Shared {
                clock: AtomicU64::new(shared.clock.load(Ordering::SeqCst)),
                crashed: AtomicBool::new(false),
                faults: false,
                only_full: false,
            };
            for _ in 0..rng.random_range(1..6) {
                w.step(&db, &healthy);
            }
            let r = db.check().expect("check failed to run");
            assert!(
                r.is_healthy(),
                "{context}: check after heal: {:?}",
                r.problems
            );
        }
        tally.before_crash(&db);
        shared.crashed.store(true, Ordering::SeqCst);
        let after = sim.crash(&mut rng);
        Tally::add(&tally.crashes, 1);
        drop(db);
        tally.disk(&sim);
        sim = after;
        histories = writers.into_iter().map(|w| w.history).collect();
        let _ = &context;
    }
}

fn first_difference(a: &Model, b: &Model) -> String {
    for (k, v) in a {
        match b.get(k) {
            None => return format!("{} present, expected absent", common::show(k)),
            Some(w) if w != v => {
                return format!(
                    "{} = {}, expected {}",
                    common::show(k),
                    common::show(v),
                    common::show(w)
                )
            }
            _ => {}
        }
    }
    for k in b.keys() {
        if !a.contains_key(k) {
            return format!("{} absent, expected present", common::show(k));
        }
    }
    "none".into()
}

#[test]
fn crash_single_writer_with_faults() {
    let cfg = CaseConfig {
        durability: Durability::Fsync,
        max_writers: 1,
        faults: true,
        rounds: 1..=3,
        batches: 5..80,
    };
    let tally = Tally::default();
    run_seeds(
        "crash_single_writer_with_faults",
        &seeds(3000, 11),
        |seed| run_case(seed, &cfg, &tally),
    );
    tally.print("crash_single_writer_with_faults");
    let t = &tally;
    let mut reached: Vec<(String, u64)> = [
        ("a crash", Tally::get(&t.crashes)),
        ("an acknowledged batch", Tally::get(&t.acked)),
        ("a failed condition", Tally::get(&t.no_effect)),
        ("a batch failed by a fault", Tally::get(&t.failed)),
        (
            "a failed batch found whole after the crash",
            Tally::get(&t.failed_present),
        ),
        ("a heal", Tally::get(&t.healed)),
        ("a torn tail", Tally::get(&t.torn_tails)),
        ("a checkpoint", Tally::get(&t.checkpoints)),
        ("an open failed by a fault", Tally::get(&t.failed_opens)),
    ]
    .map(|(w, n)| (w.to_string(), n))
    .into();
    // The writers' plans and the faulty opens aim at every kind of call
    // but WriteMeta (written once, when a store is created).
    reached.extend(t.faults_reached(&[
        SimOp::List,
        SimOp::Create,
        SimOp::Open,
        SimOp::Delete,
        SimOp::ReadMeta,
        SimOp::Append,
        SimOp::Sync,
        SimOp::Read,
    ]));
    let reached: Vec<(&str, u64)> = reached.iter().map(|(w, n)| (w.as_str(), *n)).collect();
    t.assert_reached("crash_single_writer_with_faults", 3000, &reached);
}

#[test]
fn crash_single_writer_no_faults() {
    let cfg = CaseConfig {
        durability: Durability::Fsync,
        max_writers: 1,
        faults: false,
        rounds: 1..=3,
        batches: 1..120,
    };
    let tally = Tally::default();
    run_seeds("crash_single_writer_no_faults", &seeds(1000, 12), |seed| {
        run_case(seed, &cfg, &tally)
    });
    tally.print("crash_single_writer_no_faults");
    let t = &tally;
    t.assert_reached(
        "crash_single_writer_no_faults",
        1000,
        &[
            ("a crash", Tally::get(&t.crashes)),
            ("an acknowledged batch", Tally::get(&t.acked)),
            ("a failed condition", Tally::get(&t.no_effect)),
            ("a torn tail", Tally::get(&t.torn_tails)),
            ("a checkpoint", Tally::get(&t.checkpoints)),
        ],
    );
    assert!(
        t.fired.lock().unwrap().is_empty() && Tally::get(&t.quota_hits) == 0,
        "a fault fired in a test without faults"
    );
}

#[test]
fn crash_concurrent_writers_group_commit() {
    let cfg = CaseConfig {
        durability: Durability::Fsync,
        max_writers: MAX_WRITERS,
        faults: true,
        rounds: 1..=3,
        batches: 5..60,
    };
    let tally = Tally::default();
    run_seeds(
        "crash_concurrent_writers_group_commit",
        &seeds(600, 13),
        |seed| run_case(seed, &cfg, &tally),
    );
    tally.print("crash_concurrent_writers_group_commit");
    let t = &tally;
    let merged = Tally::get(&t.batches) - Tally::get(&t.groups);
    let mut reached: Vec<(String, u64)> = [
        ("a crash", Tally::get(&t.crashes)),
        ("an acknowledged batch", Tally::get(&t.acked)),
        ("a failed condition", Tally::get(&t.no_effect)),
        ("a batch failed by a fault", Tally::get(&t.failed)),
        ("a batch in flight at the crash", Tally::get(&t.in_doubt)),
        (
            "a batch in flight at the crash found whole after it",
            Tally::get(&t.in_doubt_present),
        ),
        ("a group commit of several batches", merged),
        ("a torn tail", Tally::get(&t.torn_tails)),
        ("a checkpoint", Tally::get(&t.checkpoints)),
        ("an open failed by a fault", Tally::get(&t.failed_opens)),
    ]
    .map(|(w, n)| (w.to_string(), n))
    .into();
    // The calls the writers' plans aim at (the faulty opens, too rare here
    // to reach every kind of call, are covered by the single-writer test).
    reached.extend(t.faults_reached(&[
        SimOp::Create,
        SimOp::Delete,
        SimOp::Append,
        SimOp::Sync,
        SimOp::Read,
    ]));
    let reached: Vec<(&str, u64)> = reached.iter().map(|(w, n)| (w.as_str(), *n)).collect();
    t.assert_reached("crash_concurrent_writers_group_commit", 600, &reached);
}

/// Without fsync a crash may lose the latest acknowledged writes, never
/// older ones, never part of a batch, and the store must open.
#[test]
fn crash_no_fsync() {
    let cfg = CaseConfig {
        durability: Durability::NoFsync,
        max_writers: 2,
        faults: false,
        rounds: 1..=3,
        batches: 5..80,
    };
    let tally = Tally::default();
    run_seeds("crash_no_fsync", &seeds(600, 14), |seed| {
        run_case(seed, &cfg, &tally)
    });
    tally.print("crash_no_fsync");
    let t = &tally;
    t.assert_reached(
        "crash_no_fsync",
        600,
        &[
            ("a crash", Tally::get(&t.crashes)),
            ("an acknowledged batch", Tally::get(&t.acked)),
            ("a batch in flight at the crash", Tally::get(&t.in_doubt)),
            (
                "a group commit of several batches",
                Tally::get(&t.batches) - Tally::get(&t.groups),
            ),
            ("a torn tail", Tally::get(&t.torn_tails)),
            ("a checkpoint", Tally::get(&t.checkpoints)),
        ],
    );
    assert!(
        t.fired.lock().unwrap().is_empty() && Tally::get(&t.quota_hits) == 0,
        "a fault fired in a test without faults"
    );
}

/// The smallest no-fsync case: a few single-put commits, then power loss.
/// What comes back must be a prefix of them, and the store must open.
#[test]
fn no_fsync_crash_keeps_a_prefix_of_small_commits() {
    run_seeds("no_fsync_crash_keeps_a_prefix", &seeds(200, 15), |seed| {
        let sim = SimStorage::new();
        let opts = Options {
            durability: Durability::NoFsync,
            ..Options::default()
        };
        let db = open(&sim, &opts).unwrap();
        let n = 2 + seed % 3;
        for i in 0..n {
            db.put(format!("k{i}").as_bytes(), b"v").unwrap();
        }
        let after = sim.crash(&mut StdRng::seed_from_u64(seed));
        drop(db);
        let db = open(&after, &opts).unwrap_or_else(|e| {
            panic!("{n} puts without fsync, then a crash: reopening failed: {e}")
        });
        let got: Vec<Vec<u8>> = dump(&db).into_keys().collect();
        let prefix: Vec<Vec<u8>> = (0..got.len())
            .map(|i| format!("k{i}").into_bytes())
            .collect();
        assert_eq!(got, prefix, "not a prefix of the {n} puts");
    });
}

/// Threads increment shared counters with compare-and-swap while group
/// commit merges their batches (conditions must see the effects of earlier
/// batches of the same group). Every successful swap is one increment; after
/// a crash the counters hold every acknowledged increment and at most the
/// ones in flight.
#[test]
fn concurrent_compare_and_swap_counters_survive_a_crash() {
    run_seeds("cas_counters", &seeds(100, 16), |seed| {
        let mut rng = StdRng::seed_from_u64(seed);
        let sim = SimStorage::new();
        let slow = SlowSync {
            sim: sim.clone(),
            delay: Duration::from_micros(rng.random_range(50..300)),
        };
        let db = Db::open_with_storage(Arc::new(slow), common::small_opts()).unwrap();
        const COUNTERS: usize = 3;
        for c in 0..COUNTERS {
            db.put(format!("counter{c}").as_bytes(), &0u64.to_le_bytes())
                .unwrap();
        }
        let crashed = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let threads = rng.random_range(2..=4);
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let db = db.clone();
                let crashed = crashed.clone();
                let stop = stop.clone();
                std::thread::spawn(move || {
                    // Per counter: acknowledged increments, and one in doubt.
                    let mut acked = [0u64; COUNTERS];
                    let mut in_doubt = [0u64; COUNTERS];
                    let mut x = mix(seed ^ t as u64);
                    while !crashed.load(Ordering::SeqCst) && !stop.load(Ordering::SeqCst) {
                        x = mix(x);
                        let c = (x % COUNTERS as u64) as usize;
                        let key = format!("counter{c}").into_bytes();
                        let cur = match db.get(&key) {
                            Ok(v) => u64::from_le_bytes(v.unwrap().try_into().unwrap()),
                            Err(_) => break,
                        };
                        let mut b = WriteBatch::new();
                        b.compare_and_swap(key, cur.to_le_bytes(), (cur + 1).to_le_bytes())
                            .unwrap();
                        match db.write(b) {
                            Ok(WriteOutcome::Applied) => acked[c] += 1,
                            Ok(WriteOutcome::ConditionFailed { .. }) => {}
                            Err(_) => {
                                assert!(crashed.load(Ordering::SeqCst), "write failed");
                                in_doubt[c] += 1;
                                break;
                            }
                        }
                    }
                    (acked, in_doubt)
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(rng.random_range(5..40)));
        // Half the time the writers stop first and the running store must
        // show exactly the acknowledged increments; else the crash comes
        // while they run.
        let quiesce = rng.random_bool(0.5);
        let mut after = None;
        if !quiesce {
            crashed.store(true, Ordering::SeqCst);
            after = Some(sim.crash(&mut rng));
        } else {
            stop.store(true, Ordering::SeqCst);
        }
        let mut acked = [0u64; COUNTERS];
        let mut in_doubt = [0u64; COUNTERS];
        for h in handles {
            let (a, d) = h.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
            for c in 0..COUNTERS {
                acked[c] += a[c];
                in_doubt[c] += d[c];
            }
        }
        if quiesce {
            for (c, &n) in acked.iter().enumerate() {
                let v = db.get(format!("counter{c}").as_bytes()).unwrap().unwrap();
                assert_eq!(
                    u64::from_le_bytes(v.try_into().unwrap()),
                    n,
                    "counter{c} in the running store vs its acknowledged increments"
                );
            }
            crashed.store(true, Ordering::SeqCst);
            after = Some(sim.crash(&mut rng));
        }
        let after = after.unwrap();
        drop(db);
        let db = open(&after, &common::small_opts()).unwrap();
        for c in 0..COUNTERS {
            let v = db.get(format!("counter{c}").as_bytes()).unwrap().unwrap();
            let v = u64::from_le_bytes(v.try_into().unwrap());
            assert!(
                v >= acked[c] && v <= acked[c] + in_doubt[c],
                "counter{c} is {v} after the crash; {} increments were acknowledged, {} in \
                 flight",
                acked[c],
                in_doubt[c]
            );
        }
        assert_healthy(&db, COUNTERS);
    });
}

/// A checkpoint makes several old commit segments obsolete and the first
/// deletion fails (EIO) while the later ones succeed: the store must still
/// open, with everything in it.
#[test]
fn a_failed_delete_of_an_obsolete_commit_segment_does_not_break_reopening() {
    let sim = SimStorage::new();
    let opts = Options {
        segment_bytes: 64 << 10,
        checkpoint_bytes: NO_BACKGROUND_CHECKPOINTS,
        ..Options::default()
    };
    let db = open(&sim, &opts).unwrap();
    let mut m = Model::new();
    for i in 0..200u32 {
        let (k, v) = (format!("k{i:04}").into_bytes(), vec![i as u8; 1000]);
        db.put(&k, &v).unwrap();
        m.insert(k, v);
    }
    let before = sim.list_segments().unwrap();
    assert!(before.len() >= 3, "several commit segments: {before:?}");
    sim.inject(Some(SimOp::Delete), 0, Fault::Io, false);
    db.checkpoint()
        .expect("the checkpoint itself is durable; only a cleanup failed");
    let after = sim.list_segments().unwrap();
    drop(db);
    for reopen in ["after a clean close", "after a crash"] {
        let sim = if reopen == "after a crash" {
            sim.crash(&mut StdRng::seed_from_u64(1))
        } else {
            sim.clone()
        };
        let db = open(&sim, &opts).unwrap_or_else(|e| {
            panic!(
                "reopening {reopen} failed: {e} (segments {before:?} before the checkpoint, \
                 {after:?} after it, whose first deletion failed)"
            )
        });
        assert!(dump(&db) == m, "{reopen}: contents differ");
        assert_healthy(&db, m.len());
    }
}
