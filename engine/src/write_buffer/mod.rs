//! The write buffer: recent commits held in memory, sorted by key, in front
//! of the tree.
//!
//! Why: a batch of random updates applied straight to the tree touches one
//! leaf per key (a thousand random keys of a 1M-pair store land in a
//! thousand different leaves), so each update paid for a descent, a new leaf
//! node and, at the next checkpoint, a page write. Gathered here first and
//! merged into the tree in one large sorted batch, each leaf is rewritten
//! once for the many updates it has gathered (`update_probe`: 6.7 us of CPU
//! per update with 1,000-update merges, 2.1 with 200,000).
//!
//! Shape: a short stack of sorted *runs*, each immutable. A commit's
//! operations arrive sorted by key, one per key, so they become a run as
//! they are: an array of entries and one block holding their bytes. A new
//! run is merged with the run below it while that one is no longer (a
//! binary counter: after k commits of about the same size there are at most
//! log2(k) + 1 runs, and each write has been copied about log2(k) times, in
//! sequential passes). A lookup binary-searches the runs, newest first; a
//! walk (a scan, a merge into the tree) merges them, the newest run's write
//! of a key hiding the older ones.
//!
//! The buffer itself is a value: adding a commit makes a new buffer that
//! shares the unchanged runs (a vector of a few `Arc`s), and the version
//! published with that commit holds it. So every version holds exactly the
//! commits it sees: nothing is filtered by sequence number, readers take no
//! lock, and a snapshot costs nothing. The group-commit leader is the only
//! writer and builds the new buffer after the commit's record is durable,
//! so no reader ever sees a commit that failed.
//!
//! Why not a skiplist (the buffer was crossbeam's until this design): every
//! insert searched from the top, a few cache misses per level of a list of
//! ~200,000 entries; in `update_probe` that search was the largest single
//! cost of random updates (20% of all samples, on the committing thread).
//! Here a commit's writes are copied once into their run and then moved in
//! sequential merges. See docs/decisions/0004-write-buffer-in-sorted-runs.md.
//!
//! This file is the buffer's public face, `WriteBuffer`; each structure
//! under it has a file of its own:
//!
//! - `run.rs`: a sorted run (its entries, key heads and blocks), its
//!   building from a commit, its merging with the run below, its searches.
//! - `spare_arrays.rs`: the arrays of dropped runs, kept for the next
//!   merges.
//! - `walk.rs`: the tournament walk over the runs in key order, and where a
//!   walk stands between a scan's chunks.
//! - `chunk.rs`: the pairs a scan takes from the buffer at a time.
//! - `filter.rs`: the Bloom filter of the buffer's keys.
//!
//! The small accessors these files call across one another (a run's `key`,
//! `value` and `len`, a chunk's `clear` and `push`, the filter's `insert`
//! and `may_hold`) are `#[inline]`: when this was one file they were in
//! one codegen unit with their callers, and they still inline into the
//! walks and lookups that call them once per key.

mod chunk;
mod filter;
mod run;
mod spare_arrays;
mod walk;

pub(crate) use chunk::Chunk;
pub(crate) use spare_arrays::SpareArrays;
pub(crate) use walk::WalkPosition;

use filter::Filter;
use kivi_log::{Deadline, OpRef, NO_DEADLINE};
use run::{Entry, Run, TREE_ABSENT, TREE_PRESENT, TREE_PRESENT_DEADLINE};
use std::ops::Bound;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use walk::Walk;

/// Memory a write costs beyond its key and value bytes: its entry and its
/// head, and the room a run's arrays leave unused (`SpareArrays` makes
/// them a power of two long), taken as half again (an estimate; it only
/// paces merges into the tree).
const ENTRY_OVERHEAD: u64 = (size_of::<Entry>() + size_of::<u64>()) as u64 * 3 / 2;

/// Memory a commit's block costs beyond its bytes: the `Arc`'s counts, the
/// allocator's rounding and its slot in every run that points into it (an
/// estimate, as `ENTRY_OVERHEAD` is).
///
/// Blocks are never copied together, even for commits of one write (single
/// puts), whose block costs more than its bytes: merged runs that copied
/// their small blocks into one took memory of sizes up to 64 KiB from
/// whichever writer's thread led the commit, and with 64 writers the
/// allocator's pages for them, one set per thread, doubled the process's
/// memory (`examples/concurrent_probe`: 856-874 MiB peak with the copies,
/// 504 without, 426-428 with the skiplist).
const BLOCK_OVERHEAD: u64 = 64;

/// A value as the engine holds it: its bytes and its deadline
/// (`NO_DEADLINE`: none).
pub(crate) type Stored<'a> = (&'a [u8], Deadline);

/// One write of a commit: a key and its value (`None`: a delete).
pub(crate) type Write<'a> = (&'a [u8], Option<Stored<'a>>);

/// Bytes a write takes in a run's block: the key, and a value's deadline
/// (8 bytes, when it has one) and bytes.
pub(crate) fn write_bytes(key: &[u8], value: Option<Stored<'_>>) -> usize {
    key.len()
        + value.map_or(0, |(v, d)| {
            v.len() + if d == kivi_log::NO_DEADLINE { 0 } else { 8 }
        })
}

/// What the buffer says about a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// Not written since the tree under the buffer: ask the tree.
    NotHere,
    /// Deleted.
    Deleted,
    /// The value was copied out; it has this deadline.
    Found(Deadline),
}

/// Whether a key is in the tree under a buffer (`None`: absent), and its
/// value's deadline; for `counts_delta`.
pub(crate) type InTree<'a, E> = dyn FnMut(&[u8]) -> Result<Option<Deadline>, E> + 'a;

/// What a write buffer changes in its tree's counts (`counts_delta`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CountsDelta {
    /// Pairs.
    pub pairs: i64,
    /// Values with a deadline, expired or not.
    pub deadlines: i64,
}

/// The commits after the tree's, as one version sees them. Cheap to clone
/// (a few `Arc`s), never changed: `with_group` makes the next one.
#[derive(Default, Clone)]
pub(crate) struct WriteBuffer {
    /// Oldest first; each no shorter than the next (but for the runs that
    /// shrank when merging dropped replaced writes).
    runs: Vec<Arc<Run>>,
    /// Made with the first run (a buffer that stays empty costs nothing).
    filter: Option<Arc<Filter>>,
    /// Memory held, estimated.
    bytes: u64,
}

impl WriteBuffer {
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// What dropping this buffer releases once `next` has replaced it:
    /// (entries, commits) of its runs that `next` no longer holds. A commit
    /// adds one run and merges it with the small runs below, so this is
    /// usually a few small runs, now and then a large one.
    pub fn released_beside(&self, next: &WriteBuffer) -> (usize, usize) {
        self.runs
            .iter()
            .filter(|r| !next.runs.iter().any(|n| Arc::ptr_eq(r, n)))
            .fold((0, 0), |(e, b), r| {
                (e + r.entries.len(), b + r.blocks.len())
            })
    }

    /// Memory a group of writes (sorted, one per key) adds to a buffer, as
    /// `bytes` counts it.
    pub fn group_cost(ops: &[Write<'_>]) -> u64 {
        let bytes: usize = ops.iter().map(|&(k, v)| write_bytes(k, v)).sum();
        bytes as u64 + ops.len() as u64 * ENTRY_OVERHEAD + BLOCK_OVERHEAD
    }

    /// Memory held, estimated: every write added since the buffer was
    /// empty (replaced ones too: their bytes stay in their blocks).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Writes held in the runs (a key may be written in several).
    pub fn writes(&self) -> usize {
        self.runs.iter().map(|r| r.len()).sum()
    }

    /// Distinct keys held; a walk over the runs.
    pub fn keys(&self) -> usize {
        if let [run] = self.runs.as_slice() {
            return run.len();
        }
        let mut walk = Walk::new(&self.runs, Bound::Unbounded, Bound::Unbounded, true);
        std::iter::from_fn(|| walk.next()).count()
    }

    /// This buffer with a commit's operations (`None`: a delete) added on
    /// top. `ops` is sorted by key, one per key. Only the group-commit
    /// leader calls this, after the commit is durable.
    #[must_use]
    pub fn with_group(&self, ops: &[Write<'_>], spares: &Arc<SpareArrays>) -> WriteBuffer {
        if ops.is_empty() {
            return self.clone();
        }
        let filter = self
            .filter
            .clone()
            .unwrap_or_else(|| Arc::new(Filter::new()));
        for (key, _) in ops {
            filter.insert(key);
        }
        let added = Self::group_cost(ops);
        let mut run = Run::of_group(ops, spares);
        let mut runs = self.runs.clone();
        while let Some(below) = runs.last() {
            if below.len() > run.len() {
                break;
            }
            run = Run::merge(below, &run);
            runs.pop();
        }
        runs.push(Arc::new(run));
        WriteBuffer {
            runs,
            filter: Some(filter),
            bytes: self.bytes + added,
        }
    }

    /// Records one write, as a commit of its own would (tests build
    /// buffers with it).
    #[cfg(test)]
    pub fn with(&self, key: &[u8], value: Option<&[u8]>) -> WriteBuffer {
        let value = value.map(|v| (v, kivi_log::NO_DEADLINE));
        self.with_group(&[(key, value)], &SpareArrays::new(1 << 20))
    }

    /// Looks `key` up, copying a value found into `out`. (An expired value
    /// is found like any other: the caller knows the time.)
    pub fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> Lookup {
        match self.find(key) {
            None => Lookup::NotHere,
            Some(None) => Lookup::Deleted,
            Some(Some((v, deadline))) => {
                out.clear();
                out.extend_from_slice(v);
                Lookup::Found(deadline)
            }
        }
    }

    /// The newest write of `key` here: `None` if not written since the
    /// tree under the buffer, `Some(None)` if deleted, else its value.
    pub fn find(&self, key: &[u8]) -> Option<Option<Stored<'_>>> {
        match &self.filter {
            Some(f) if f.may_hold(key) => {}
            _ => return None,
        }
        self.runs
            .iter()
            .rev()
            .find_map(|run| run.find(key).map(|i| run.value(i)))
    }

    /// Calls `f` with every key's newest write, in key order: what merging
    /// the buffer into the tree applies. The writes are lent, not copied.
    pub fn with_newest<R>(&self, f: impl FnOnce(&[OpRef<'_>]) -> R) -> R {
        let mut out: Vec<OpRef<'_>> = Vec::with_capacity(self.writes());
        let mut walk = Walk::new(&self.runs, Bound::Unbounded, Bound::Unbounded, true);
        while let Some(m) = walk.next() {
            let key = m.run.key(m.at);
            out.push(match m.run.value(m.at) {
                Some((v, deadline)) => OpRef::Put(key, v, deadline),
                None => OpRef::Delete(key),
            });
        }
        f(&out)
    }

    /// Keys whose newest write here is a put with a deadline before `now`
    /// (expired; `Store::pairs` counts them out). A walk, nothing copied.
    pub fn expired_puts(&self, now: Deadline) -> u64 {
        let mut n = 0;
        let mut walk = Walk::new(&self.runs, Bound::Unbounded, Bound::Unbounded, true);
        while let Some(m) = walk.next() {
            let value = m.run.value(m.at);
            n += u64::from(value.is_some_and(|(_, d)| !crate::expiry::is_live(d, now)));
        }
        n
    }

    /// The change the buffer makes to the tree's counts: keys it holds
    /// that the tree does not, minus keys it deleted that the tree holds;
    /// and values with a deadline it holds, minus the tree's it replaced or
    /// deleted. `in_tree` answers for the tree under the buffer (which
    /// never changes while the buffer lives): `None` if the key is absent,
    /// else its value's deadline. Each answer is kept on the write, so
    /// counting again costs a walk over the buffer, not a tree lookup per
    /// key.
    pub fn counts_delta<E>(&self, in_tree: &mut InTree<'_, E>) -> Result<CountsDelta, E> {
        let mut delta = CountsDelta::default();
        let mut walk = Walk::new(&self.runs, Bound::Unbounded, Bound::Unbounded, true);
        while let Some(m) = walk.next() {
            let tree = match m.tree {
                TREE_ABSENT | TREE_PRESENT | TREE_PRESENT_DEADLINE => m.tree,
                _ => {
                    let tree = match in_tree(m.run.key(m.at))? {
                        None => TREE_ABSENT,
                        Some(NO_DEADLINE) => TREE_PRESENT,
                        Some(_) => TREE_PRESENT_DEADLINE,
                    };
                    m.run.entries[m.at].tree.store(tree, Ordering::Relaxed);
                    tree
                }
            };
            let value = m.run.value(m.at);
            delta.pairs += i64::from(value.is_some()) - i64::from(tree != TREE_ABSENT);
            delta.deadlines += i64::from(value.is_some_and(|(_, d)| d != NO_DEADLINE))
                - i64::from(tree == TREE_PRESENT_DEADLINE);
        }
        Ok(delta)
    }

    /// Where a walk over the writes within (`low`, `high`) starts,
    /// forward or backward, for [`take`](Self::take).
    pub fn walk_from(&self, low: Bound<&[u8]>, high: Bound<&[u8]>, forward: bool) -> WalkPosition {
        Walk::new(&self.runs, low, high, forward).at
    }

    /// Replaces what `out` holds with the next (up to) `max` writes from
    /// `at`, one per key, the newest (puts and deletes), and moves `at`
    /// past them. A put whose deadline is before `now` is taken as a
    /// delete: it hides the tree's older value all the same. `at` must come
    /// from this buffer's [`walk_from`](Self::walk_from).
    pub fn take(&self, at: &mut WalkPosition, max: usize, out: &mut Chunk, now: Deadline) {
        assert!(max > 0, "a chunk holds at least one pair");
        out.clear();
        let mut walk = Walk::resume(&self.runs, std::mem::take(at));
        while out.pairs.len() < max {
            let Some(m) = walk.next() else { break };
            let value = m
                .run
                .value(m.at)
                .filter(|&(_, d)| crate::expiry::is_live(d, now));
            out.push(m.run.key(m.at), value.map(|(v, _)| v));
        }
        *at = walk.at;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// One buffered pair: key, and value (`None`: deleted).
    type BufferedPair = (Vec<u8>, Option<Vec<u8>>);

    fn drain(c: &mut Chunk, into: &mut Vec<BufferedPair>) {
        while !c.is_empty() {
            let key = c.front_key().unwrap().to_vec();
            let i = c.pop();
            let value = (!c.is_delete(i)).then(|| c.pair(i).1.to_vec());
            into.push((key, value));
        }
    }

    pub(super) fn get(b: &WriteBuffer, k: &[u8]) -> Option<Option<Vec<u8>>> {
        let mut out = Vec::new();
        match b.get_into(k, &mut out) {
            Lookup::NotHere => None,
            Lookup::Deleted => Some(None),
            Lookup::Found(_) => Some(Some(out)),
        }
    }

    #[test]
    fn each_buffer_holds_the_writes_it_was_made_with() {
        let b0 = WriteBuffer::default();
        let b1 = b0.with(b"a", Some(b"1"));
        let b2 = b1.with(b"a", None);
        let b3 = b2.with(b"a", Some(b"3"));
        assert_eq!(get(&b0, b"a"), None);
        assert_eq!(get(&b1, b"a"), Some(Some(b"1".to_vec())));
        assert_eq!(get(&b2, b"a"), Some(None));
        assert_eq!(get(&b3, b"a"), Some(Some(b"3".to_vec())));
        assert_eq!(get(&b3, b"b"), None);
        assert_eq!((b3.keys(), b0.keys()), (1, 0));
    }

    #[test]
    fn runs_stay_few_and_memory_counts_every_commit() {
        let mut b = WriteBuffer::default();
        for i in 0u32..1000 {
            b = b.with(&i.to_be_bytes(), Some(b"v"));
            // A binary counter: one run per bit of the commits so far.
            assert_eq!(b.runs.len(), (i + 1).count_ones() as usize);
        }
        assert_eq!((b.keys(), b.writes()), (1000, 1000));
        // Each commit's five bytes, its entry and its block.
        assert_eq!(b.bytes(), 1000 * (5 + ENTRY_OVERHEAD + BLOCK_OVERHEAD));
        // Merged runs point into the commits' blocks, in order.
        let blocks: usize = b.runs.iter().map(|r| r.blocks.len()).sum();
        assert_eq!(blocks, 1000);
        for i in 0u32..1000 {
            assert_eq!(get(&b, &i.to_be_bytes()), Some(Some(b"v".to_vec())));
        }
    }

    /// A write buffer against a model: a `BTreeMap` per commit.
    #[derive(Debug, Clone)]
    enum Op {
        Put(u8, u8),
        Delete(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..24, any::<u8>()).prop_map(|(k, v)| Op::Put(k, v)),
            (0u8..24).prop_map(Op::Delete),
        ]
    }

    /// The model test's keys: short ones, and longer ones that share their
    /// eight-byte head, so order is settled by the heads and by the rest.
    fn key_of(k: u8) -> Vec<u8> {
        match k % 3 {
            0 => vec![k],
            1 => [[1u8; 8].as_slice(), &[k]].concat(),
            _ => [[1u8; 8].as_slice(), &[k, 0, k]].concat(),
        }
    }

    /// The model test's deadlines: by the value's byte, none, past (before
    /// `NOW`) or to come.
    fn deadline_of(v: &[u8]) -> Deadline {
        match v[0] % 3 {
            0 => kivi_log::NO_DEADLINE,
            1 => NOW - 1 - u64::from(v[0]),
            _ => NOW + u64::from(v[0]),
        }
    }

    const NOW: Deadline = 1_000_000;

    /// Whether the tree under the buffer holds `key` (in the model test).
    fn in_tree(key: &[u8]) -> bool {
        key.last().is_some_and(|b| b % 2 == 0)
    }

    /// The tree under the buffers: the even keys, every other one of them
    /// with a deadline.
    fn tree_entry(key: &[u8]) -> Option<Deadline> {
        match key.last() {
            Some(b) if b % 4 == 0 => Some(1_000),
            Some(b) if b % 2 == 0 => Some(NO_DEADLINE),
            _ => None,
        }
    }

    proptest! {
        #[test]
        fn matches_a_model_at_every_commit(commits in prop::collection::vec(prop::collection::vec(op(), 1..12), 1..40)) {
            // The buffers and the model (key -> newest write) after each commit.
            let mut buffers = vec![WriteBuffer::default()];
            // Small, so arrays are kept and reused (at least MIN_SPARE_ENTRIES long).
            let spares = SpareArrays::new(1 << 20);
            let mut models: Vec<BTreeMap<Vec<u8>, Option<Vec<u8>>>> = vec![BTreeMap::new()];
            for ops in &commits {
                let mut next = models.last().unwrap().clone();
                let mut group = BTreeMap::new();
                for op in ops {
                    match *op {
                        Op::Put(k, v) => group.insert(key_of(k), Some(vec![v])),
                        Op::Delete(k) => group.insert(key_of(k), None),
                    };
                }
                let group_ops: Vec<Write> = group
                    .iter()
                    .map(|(k, v)| (k.as_slice(), v.as_deref().map(|v| (v, deadline_of(v)))))
                    .collect();
                buffers.push(buffers.last().unwrap().with_group(&group_ops, &spares));
                next.extend(group);
                models.push(next);
            }
            // Every buffer still answers for its own commits, after the
            // later ones merged runs it shares.
            for (b, model) in buffers.iter().zip(&models) {
                for k in 0u8..24 {
                    prop_assert_eq!(get(b, &key_of(k)), model.get(&key_of(k)).cloned());
                }
                prop_assert_eq!(b.keys(), model.len());
                // Scans in both directions, in small steps, over a sub-range.
                let (lo, hi) = ([[1u8; 8].as_slice(), &[5]].concat(), vec![20u8]);
                let want: Vec<BufferedPair> = model
                    .range(lo.clone()..hi.clone())
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                for forward in [true, false] {
                    let mut got = Vec::new();
                    let mut chunk = Chunk::default();
                    let mut walk = b.walk_from(Bound::Included(&lo), Bound::Excluded(&hi), forward);
                    while !walk.is_done() {
                        b.take(&mut walk, 3, &mut chunk, NOW);
                        prop_assert!(!chunk.is_empty(), "a walk not done takes something");
                        drain(&mut chunk, &mut got);
                    }
                    b.take(&mut walk, 3, &mut chunk, NOW);
                    prop_assert!(chunk.is_empty());
                    // Values expired at `NOW` come out as deletes.
                    let mut want: Vec<BufferedPair> = want
                        .iter()
                        .map(|(k, v)| {
                            let live = v.as_ref().filter(|v| crate::expiry::is_live(deadline_of(v), NOW));
                            (k.clone(), live.cloned())
                        })
                        .collect();
                    if !forward {
                        want.reverse();
                    }
                    prop_assert_eq!(got, want);
                }
                let want_expired = model
                    .values()
                    .filter(|v| {
                        v.as_ref()
                            .is_some_and(|v| !crate::expiry::is_live(deadline_of(v), NOW))
                    })
                    .count() as u64;
                prop_assert_eq!(b.expired_puts(NOW), want_expired);
                // The counts against a tree that holds the even keys,
                // twice: the second time from the notes the first left.
                let want_pairs: i64 = model
                    .iter()
                    .map(|(k, v)| i64::from(v.is_some()) - i64::from(in_tree(k)))
                    .sum();
                let want_deadlines: i64 = model
                    .iter()
                    .map(|(k, v)| {
                        i64::from(v.as_ref().is_some_and(|v| deadline_of(v) != NO_DEADLINE))
                            - i64::from(tree_entry(k).is_some_and(|d| d != NO_DEADLINE))
                    })
                    .sum();
                for _ in 0..2 {
                    let delta = b.counts_delta::<()>(&mut |k| Ok(tree_entry(k))).unwrap();
                    prop_assert_eq!(delta, CountsDelta { pairs: want_pairs, deadlines: want_deadlines });
                }
                let newest: Vec<BufferedPair> = b.with_newest(|newest| {
                    newest
                        .iter()
                        .map(|op| match *op {
                            OpRef::Put(k, v, d) => {
                                assert_eq!(d, deadline_of(v), "the deadline stays with its value");
                                (k.to_vec(), Some(v.to_vec()))
                            }
                            OpRef::Delete(k) => (k.to_vec(), None),
                        })
                        .collect()
                });
                let all: Vec<BufferedPair> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                prop_assert_eq!(newest, all);
            }
        }
    }
}
