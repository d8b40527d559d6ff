//! The tree against a `BTreeMap` model: random batches of puts and deletes,
//! point lookups, scans in both directions, checkpoints (with batches
//! applied while one is in flight), cleaning of old segments (which are then
//! deleted, so a read that still goes there fails), release to a tiny cache,
//! reads back from pages and the linking of cached nodes into the tree, all
//! compared with the model.

use kivi_log::{Deadline, OpRef, PageRef, RecordType, SegmentAppender, SegmentKind, NO_DEADLINE};
use kivi_storage::{MemoryStorage, Storage};
use kivi_tree::{
    apply, check_tree, expired_each, get_into, link_cached, release_written, write_tree, Cursor,
    Node, PageSink, Pager, TreeConfig, TreeWrite, ValueRef, WriteStats,
};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;

struct Sink(SegmentAppender);

impl PageSink for Sink {
    fn write_record(
        &mut self,
        ty: RecordType,
        body: &mut dyn FnMut(&mut Vec<u8>),
    ) -> Result<PageRef, kivi_log::Error> {
        let r = self.0.buffer_record(ty, |out| body(out));
        self.0.flush()?;
        Ok(r)
    }
}

struct Harness {
    storage: Arc<MemoryStorage>,
    pager: Pager,
    cfg: TreeConfig,
    root: Option<Arc<Node>>,
    pairs: i64,
    /// Values with a deadline, kept from `Applied::deadlines_delta`.
    deadlines_count: i64,
    generation: u64,
    next_segment: u64,
    /// A checkpoint written but not yet durable: its generation, what it
    /// wrote, its root's level, and whether batches were applied since.
    in_flight: Option<(u64, TreeWrite, u8, bool)>,
    /// Values get deadlines (`deadline_of`); off where page sizes are
    /// measured for plain values.
    deadlines: bool,
}

impl Harness {
    fn new(cache_bytes: u64, cfg: TreeConfig) -> Self {
        let storage = Arc::new(MemoryStorage::new());
        let pager = Pager::new(storage.clone(), cache_bytes);
        Harness {
            storage,
            pager,
            cfg,
            root: None,
            pairs: 0,
            deadlines_count: 0,
            generation: 0,
            next_segment: 1,
            in_flight: None,
            deadlines: true,
        }
    }

    fn apply(&mut self, ops: &[(Vec<u8>, Option<Vec<u8>>)]) {
        let refs: Vec<OpRef> = ops
            .iter()
            .map(|(k, v)| match v {
                Some(v) => OpRef::Put(k, v, self.deadline_of(v)),
                None => OpRef::Delete(k),
            })
            .collect();
        let out = apply(&self.pager, &self.cfg, self.root.as_ref(), &refs).unwrap();
        self.root = out.root;
        self.pairs += out.pairs_delta;
        self.deadlines_count += out.deadlines_delta;
        if let Some(f) = &mut self.in_flight {
            f.3 = true;
        }
    }

    /// Writes the current version, marks it durable, releases it to the
    /// cache, and continues from the root page read back from storage.
    fn checkpoint(&mut self, reload: bool) {
        self.begin_checkpoint(0);
        self.end_checkpoint(reload);
    }

    /// Writes the current version to a new segment as a new generation,
    /// cleaning the segments before `clean` of a hundred: every record the
    /// tree uses in the oldest `clean`% of the segments so far is copied.
    fn begin_checkpoint(&mut self, clean: u8) {
        if self.in_flight.is_some() {
            return;
        }
        let Some(root) = self.root.clone() else {
            return;
        };
        self.generation += 1;
        let app = SegmentAppender::create(
            self.storage.as_ref(),
            self.next_segment,
            [0; 16],
            SegmentKind::Pages,
            None,
        )
        .unwrap();
        let floor = (self.next_segment * u64::from(clean.min(100)) / 100) as u32;
        self.next_segment += 1;
        let mut sink = Sink(app);
        let mut stats = WriteStats::default();
        let written = write_tree(
            &self.pager,
            &root,
            self.generation,
            floor,
            &[],
            &mut sink,
            &mut stats,
        )
        .unwrap();
        let r = written.root.unwrap();
        assert!(r.oldest >= floor, "the tree still uses a cleaned segment");
        sink.0.sync().unwrap();
        self.in_flight = Some((self.generation, written, root.level(), false));
    }

    /// Makes the checkpoint in flight durable: releases what it wrote,
    /// re-points what it moved, deletes every segment its tree no longer
    /// uses (no older version is kept here), and optionally continues from
    /// the root page read back from storage.
    fn end_checkpoint(&mut self, reload: bool) {
        let Some((generation, written, level, changed)) = self.in_flight.take() else {
            return;
        };
        self.pager.set_durable_generation(generation);
        let written_root = written.root.unwrap();
        if let Some(root) = &self.root {
            if let Some(released) = release_written(&self.pager, root, &written) {
                self.root = Some(released);
            }
        }
        for id in self.storage.list_segments().unwrap() {
            if id < u64::from(written_root.oldest) {
                self.storage.delete_segment(id).unwrap();
                self.pager.close_segment(id as u32);
            }
        }
        if reload && !changed {
            // The written version, as a restart would load it.
            self.pager.clear_cache();
            self.root = Some(self.pager.load(written_root, level).unwrap());
        }
    }

    /// The checkpoint in flight fails, as when its sync or its record's
    /// commit hits an I/O error: it is never durable, and what it wrote is
    /// deleted. Later checkpoints are newer generations, and must not take
    /// its marks for durable ones.
    fn fail_checkpoint(&mut self) {
        let Some((generation, _, _, _)) = self.in_flight.take() else {
            return;
        };
        self.pager.set_failed_generation(generation);
        // The segment `begin_checkpoint` created for it.
        let id = self.next_segment - 1;
        self.storage.delete_segment(id).unwrap();
        self.pager.close_segment(id as u32);
        self.pager.clear_cache();
    }

    /// Links the nodes the cache holds into the tree (`link_cached`), as
    /// a follower does between polls.
    fn link(&mut self) {
        if let Some(root) = &self.root {
            if let Some(linked) = link_cached(&self.pager, root, None) {
                self.root = Some(linked);
            }
        }
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        let root = self.root.as_ref()?;
        let deadline = get_into(&self.pager, root, key, &mut out).unwrap()?;
        assert_eq!(deadline, self.deadline_of(&out), "deadline of {key:?}");
        Some(out)
    }

    fn deadline_of(&self, v: &[u8]) -> Deadline {
        if self.deadlines {
            deadline_of(v)
        } else {
            NO_DEADLINE
        }
    }

    fn value(&self, v: ValueRef<'_>) -> Vec<u8> {
        match v {
            ValueRef::Inline(v) => v.to_vec(),
            ValueRef::Big(b) => self.pager.read_big(b).unwrap(),
        }
    }

    /// The pair the cursor is on, its deadline checked against its value's.
    fn pair_at(&self, c: &Cursor) -> (Vec<u8>, Vec<u8>) {
        let v = self.value(c.value());
        assert_eq!(
            c.deadline(),
            self.deadline_of(&v),
            "deadline of {:?}",
            c.key()
        );
        (c.key().to_vec(), v)
    }

    fn scan_forward(&self, from: Option<&[u8]>) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut c = Cursor::new(self.root.clone());
        c.seek_forward(&self.pager, from).unwrap();
        let mut out = Vec::new();
        while c.is_valid() {
            out.push(self.pair_at(&c));
            c.next(&self.pager).unwrap();
        }
        out
    }

    fn scan_backward(&self, before: Option<&[u8]>) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut c = Cursor::new(self.root.clone());
        c.seek_backward(&self.pager, before).unwrap();
        let mut out = Vec::new();
        while c.is_valid() {
            out.push(self.pair_at(&c));
            c.prev(&self.pager).unwrap();
        }
        out
    }

    fn assert_matches(&self, model: &BTreeMap<Vec<u8>, Vec<u8>>, probes: &[Vec<u8>]) {
        assert_eq!(self.pairs, model.len() as i64, "pair count");
        let with_deadline = model
            .values()
            .filter(|v| self.deadline_of(v) != NO_DEADLINE)
            .count();
        assert_eq!(
            self.deadlines_count, with_deadline as i64,
            "values with a deadline"
        );
        let all: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        assert_eq!(self.scan_forward(None), all, "forward scan");
        let mut rev = all.clone();
        rev.reverse();
        assert_eq!(self.scan_backward(None), rev, "backward scan");
        for p in probes {
            assert_eq!(self.get(p), model.get(p).cloned(), "get {p:?}");
            let fwd: Vec<_> = model
                .range(p.clone()..)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            assert_eq!(self.scan_forward(Some(p)), fwd, "forward from {p:?}");
            let back: Vec<_> = model
                .range(..p.clone())
                .rev()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            assert_eq!(self.scan_backward(Some(p)), back, "backward before {p:?}");
        }
        // The expired values, found by the pruned walk, from the start and
        // from each probe: exactly the model's (a figure that errs late
        // would hide some).
        for now in [1, 300_000_000, 700_000_000, 1_000_000_008] {
            for after in std::iter::once(None).chain(probes.iter().map(Some)) {
                let want: Vec<(Vec<u8>, Deadline)> = model
                    .iter()
                    .filter(|(k, _)| after.is_none_or(|a| k.as_slice() > a.as_slice()))
                    .map(|(k, v)| (k.clone(), self.deadline_of(v)))
                    .filter(|&(_, d)| d != NO_DEADLINE && d < now)
                    .collect();
                let mut got = Vec::new();
                if let Some(root) = &self.root {
                    let after = after.map(|a| a.as_slice());
                    let flow = expired_each(&self.pager, root, after, now, &mut |k, d| {
                        got.push((k.to_vec(), d));
                        std::ops::ControlFlow::Continue(())
                    });
                    assert!(flow.unwrap().is_continue());
                }
                assert_eq!(got, want, "expired at {now} after {after:?}");
            }
        }
        if let Some(root) = &self.root {
            let report = check_tree(&self.pager, root);
            assert!(report.problems.is_empty(), "{:?}", report.problems);
            assert_eq!(report.pairs, model.len() as u64);
            assert_eq!(
                report.deadlines as i64, self.deadlines_count,
                "deadlines checked"
            );
        }
    }
}

/// The deadline the harness gives each value, a function of its bytes: a
/// third of the values have none, the rest one of many, so that a deadline
/// that does not travel with its value (through deltas, pages, consolidation,
/// the cleaner's copies) shows up as a mismatch.
fn deadline_of(v: &[u8]) -> Deadline {
    let h = v.iter().fold(v.len() as u64, |h, &b| {
        h.wrapping_mul(31).wrapping_add(u64::from(b))
    });
    if h.is_multiple_of(3) {
        NO_DEADLINE
    } else {
        1 + h % 1_000_000_007
    }
}

fn key(k: u16) -> Vec<u8> {
    // Shared prefixes, varying lengths: exercises prefix compression and heads.
    let mut v = b"key/".to_vec();
    v.extend_from_slice(format!("{k:05}").as_bytes());
    if k.is_multiple_of(7) {
        v.extend_from_slice(b"/long-suffix-for-variety");
    }
    v
}

fn value(k: u16, version: u8, big: bool) -> Vec<u8> {
    let len = if big {
        1500 + usize::from(k % 100)
    } else {
        usize::from(k % 50)
    };
    (0..len)
        .map(|i| (i as u8).wrapping_add(version).wrapping_mul(31))
        .collect()
}

#[derive(Debug, Clone)]
enum Step {
    Batch(Vec<(u16, Option<(u8, bool)>)>),
    Checkpoint {
        reload: bool,
    },
    /// Write a checkpoint cleaning the oldest `clean`% of the segments;
    /// batches may follow before it is durable.
    Begin {
        clean: u8,
    },
    End {
        reload: bool,
    },
    /// The checkpoint in flight fails: it never becomes durable and its
    /// segment is deleted, so anything still pointing there fails its reads.
    Fail,
    /// Link what the cache holds into the tree.
    Link,
}

fn step(max_key: u16) -> impl Strategy<Value = Step> {
    step_sized(max_key, 200)
}

fn step_sized(max_key: u16, max_batch: usize) -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => proptest::collection::vec(
            (0..max_key, proptest::option::weighted(0.7, (any::<u8>(), proptest::bool::weighted(0.03)))),
            1..max_batch
        ).prop_map(Step::Batch),
        1 => any::<bool>().prop_map(|reload| Step::Checkpoint { reload }),
        1 => (0u8..=100).prop_map(|clean| Step::Begin { clean }),
        1 => any::<bool>().prop_map(|reload| Step::End { reload }),
        1 => Just(Step::Fail),
        1 => Just(Step::Link),
    ]
}

fn run(steps: Vec<Step>, cache_bytes: u64, cfg: TreeConfig, max_key: u16) {
    run_with(Harness::new(cache_bytes, cfg), steps, max_key);
}

fn run_with(mut h: Harness, steps: Vec<Step>, max_key: u16) -> Harness {
    let mut model = BTreeMap::new();
    for s in steps {
        match s {
            Step::Batch(ops) => {
                let mut batch: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
                for (k, op) in ops {
                    batch.insert(key(k), op.map(|(ver, big)| value(k, ver, big)));
                }
                for (k, v) in &batch {
                    match v {
                        Some(v) => model.insert(k.clone(), v.clone()),
                        None => model.remove(k),
                    };
                }
                let ops: Vec<_> = batch.into_iter().collect();
                h.apply(&ops);
            }
            Step::Checkpoint { reload } => {
                h.end_checkpoint(false);
                h.checkpoint(reload);
            }
            Step::Begin { clean } => h.begin_checkpoint(clean),
            Step::End { reload } => h.end_checkpoint(reload),
            Step::Fail => h.fail_checkpoint(),
            Step::Link => h.link(),
        }
        let probes: Vec<Vec<u8>> = (0..max_key)
            .step_by(37)
            .map(key)
            .chain([b"".to_vec(), b"zzz".to_vec()])
            .collect();
        h.assert_matches(&model, &probes);
    }
    h
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn tree_matches_model(steps in proptest::collection::vec(step(2000), 1..25)) {
        run(steps, 64 << 20, TreeConfig::default(), 2000);
    }

    #[test]
    fn tree_matches_model_with_two_open_segments(steps in proptest::collection::vec(step(600), 1..25)) {
        // Every checkpoint writes a segment of its own and the cache holds a
        // few pages, so reads go to many segments through two open files.
        let cfg = TreeConfig { page_target: 256, delta_max: 4, patch_max: 3, parallel: true };
        let mut h = Harness::new(4096, cfg);
        h.pager = Pager::new(h.storage.clone(), 4096).with_open_limit(2);
        let h = run_with(h, steps, 600);
        prop_assert!(h.pager.open_segments() <= 2);
    }

    #[test]
    fn tree_matches_model_with_small_pages_and_a_tiny_cache(steps in proptest::collection::vec(step(600), 1..25)) {
        // Pages of a few entries, three-level trees, a cache of a few pages.
        let cfg = TreeConfig { page_target: 256, delta_max: 4, patch_max: 3, parallel: true };
        run(steps, 4096, cfg, 600);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn tree_matches_model_with_batches_applied_on_two_threads(
        steps in proptest::collection::vec(step_sized(6000, 2500), 1..8)
    ) {
        // Batches of 512 operations or more split the root's children
        // between two threads.
        let cfg = TreeConfig { page_target: 512, delta_max: 8, patch_max: 4, parallel: true };
        run(steps, 1 << 20, cfg, 6000);
    }
}

/// Cache lookups (hits and misses) so far.
fn lookups(p: &Pager) -> u64 {
    let s = p.stats();
    s.hits + s.misses
}

#[test]
fn a_tree_read_back_reaches_the_nodes_reads_cached_by_pointer_once_linked() {
    let mut h = Harness::new(64 << 20, TreeConfig::default());
    let mut model = BTreeMap::new();
    for batch in 0..20u16 {
        let ops: Vec<_> = (0..1000u16)
            .map(|i| {
                let k = key(batch * 1000 + i);
                let v = value(i, batch as u8, i % 97 == 0);
                model.insert(k.clone(), v.clone());
                (k, Some(v))
            })
            .collect();
        h.apply(&ops);
    }
    h.checkpoint(true);
    assert!(h.root.as_ref().unwrap().level() >= 2);
    let before = h.root.clone().unwrap();
    h.link();
    assert!(
        Arc::ptr_eq(&before, h.root.as_ref().unwrap()),
        "nothing cached yet, nothing to link"
    );

    // Every other key read: their leaves and the nodes above are cached.
    let keys: Vec<_> = model.keys().cloned().collect();
    // The model's checks scan from each probe: a few of them.
    let probes: Vec<_> = keys.iter().step_by(997).cloned().collect();
    for k in keys.iter().step_by(2) {
        h.get(k);
    }
    h.link();
    assert!(
        h.pager.stats().resident_bytes > 0,
        "linked nodes count as resident"
    );
    let at = lookups(&h.pager);
    for k in keys.iter().step_by(2) {
        assert_eq!(h.get(k).as_ref(), model.get(k));
    }
    // Out-of-line values are read through the pager; their lookups aside,
    // none: the linked leaves are reached without the cache.
    let big = keys
        .iter()
        .step_by(2)
        .filter(|k| model[*k].len() > 1000)
        .count() as u64;
    assert!(
        lookups(&h.pager) - at <= big,
        "{} cache lookups for keys whose leaves were linked ({big} big values)",
        lookups(&h.pager) - at
    );
    h.assert_matches(&model, &probes);

    // A change, a checkpoint and a read back after a linking, all as before.
    let ops: Vec<_> = keys.iter().step_by(5).map(|k| (k.clone(), None)).collect();
    for (k, _) in &ops {
        model.remove(k);
    }
    h.apply(&ops);
    h.assert_matches(&model, &probes);
    h.checkpoint(false);
    h.assert_matches(&model, &probes);
    h.link();
    h.checkpoint(true);
    h.assert_matches(&model, &probes);
}

#[test]
fn linking_stays_within_the_resident_budget() {
    // 256 KiB for cache and resident nodes: three quarters may be linked.
    let mut h = Harness::new(256 << 10, TreeConfig::default());
    let mut model = BTreeMap::new();
    let ops: Vec<_> = (0..6000u16)
        .map(|i| {
            model.insert(key(i), value(i, 1, false));
            (key(i), Some(value(i, 1, false)))
        })
        .collect();
    h.apply(&ops);
    h.checkpoint(true);
    let keys: Vec<_> = model.keys().cloned().collect();
    let probes: Vec<_> = keys.iter().step_by(997).cloned().collect();
    for round in 0..3 {
        for k in keys.iter().skip(round).step_by(3) {
            h.get(k);
        }
        h.link();
        let resident = h.pager.stats().resident_bytes;
        assert!(
            resident > 0 && resident <= (256 << 10) / 4 * 3,
            "{resident} bytes resident"
        );
    }
    h.assert_matches(&model, &probes);
}

#[test]
fn bulk_load_in_order_fills_pages() {
    let mut h = Harness::new(64 << 20, TreeConfig::default());
    h.deadlines = false;
    let mut model = BTreeMap::new();
    for batch in 0..100u32 {
        let ops: Vec<_> = (0..1000u32)
            .map(|i| {
                let n = batch * 1000 + i;
                let mut k = (n as u64).to_be_bytes().to_vec();
                k.extend_from_slice(&[n as u8; 32]);
                let v = vec![(n % 251) as u8; 40];
                model.insert(k.clone(), v.clone());
                (k, Some(v))
            })
            .collect();
        h.apply(&ops);
    }
    h.checkpoint(true);
    h.assert_matches(&model, &[]);
    let bytes: u64 = h
        .storage
        .list_segments()
        .unwrap()
        .iter()
        .map(|&s| h.storage.open_segment(s).unwrap().size().unwrap())
        .sum();
    let per_pair = bytes as f64 / 100_000.0;
    eprintln!(
        "bulk load: {per_pair:.1} bytes per pair, root level {}",
        h.root.as_ref().unwrap().level()
    );
    // Each 4 KiB block of the page log holds one full leaf and a tail of
    // about a tenth no other page fills (86 bytes a pair; 77 before pages
    // were packed into blocks; see `LeafData::size`).
    assert!(
        per_pair < 88.0,
        "{per_pair:.1} bytes per kv40 pair after a bulk load"
    );
}

#[test]
fn cleaning_copies_every_record_out_of_old_segments() {
    // Pages on disk (a cache of a few pages, so children are page
    // references), values in and out of line, several checkpoints; then one
    // that cleans everything before it, with a batch applied while it is in
    // flight. The old segments are deleted, so any reference left pointing
    // there fails the reads that follow.
    let cfg = TreeConfig {
        page_target: 256,
        delta_max: 4,
        patch_max: 3,
        parallel: true,
    };
    let mut h = Harness::new(4096, cfg);
    let mut model = BTreeMap::new();
    let batch =
        |h: &mut Harness, model: &mut BTreeMap<Vec<u8>, Vec<u8>>, from: u16, version: u8| {
            let ops: Vec<_> = (from..from + 300)
                .map(|k| {
                    let v = value(k, version, k % 10 == 0);
                    model.insert(key(k), v.clone());
                    (key(k), Some(v))
                })
                .collect();
            h.apply(&ops);
        };
    batch(&mut h, &mut model, 0, 1);
    h.checkpoint(true);
    batch(&mut h, &mut model, 200, 2);
    h.checkpoint(false);
    batch(&mut h, &mut model, 400, 3);
    h.checkpoint(true);
    let before = h.storage.list_segments().unwrap().len();
    h.begin_checkpoint(100);
    batch(&mut h, &mut model, 100, 4);
    h.end_checkpoint(false);
    let after = h.storage.list_segments().unwrap();
    assert!(
        before >= 3 && after.len() == 1,
        "{before} segments before, {after:?} after"
    );
    h.assert_matches(&model, &[key(0), key(150), key(650)]);
    h.checkpoint(true);
    h.assert_matches(&model, &[key(0), key(150), key(650)]);
}

#[test]
fn a_failed_checkpoint_leaves_no_reference_to_what_it_wrote() {
    // A checkpoint that copies everything (cleaning) fails; the next one
    // cleans nothing, so it writes only what changed and keeps the older
    // durable pages of the rest. Once it is durable, the tree must point at
    // those, not at the failed checkpoint's copies (deleted here).
    let cfg = TreeConfig {
        page_target: 256,
        delta_max: 4,
        patch_max: 3,
        parallel: true,
    };
    let mut h = Harness::new(1 << 20, cfg);
    let mut model = BTreeMap::new();
    let ops: Vec<_> = (0..400u16)
        .map(|k| {
            let v = value(k, 1, k % 10 == 0);
            model.insert(key(k), v.clone());
            (key(k), Some(v))
        })
        .collect();
    h.apply(&ops);
    h.checkpoint(false);
    h.begin_checkpoint(100);
    h.fail_checkpoint();
    h.apply(&[(key(7), Some(value(7, 2, false)))]);
    model.insert(key(7), value(7, 2, false));
    h.checkpoint(false);
    h.pager.clear_cache();
    h.assert_matches(&model, &[key(0), key(7), key(399)]);
}
