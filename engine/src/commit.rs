//! The commit path: one group of queued requests (see `pipeline`) at a
//! time, under the writer lock, becomes one append to the commit log and
//! one newly published version.
//!
//! A group goes through these phases, in this order (the I/O ordering is
//! what makes commits durable and checkpoints safe):
//! 1. `base_for_group`: the published version, its write buffer merged
//!    first if due;
//! 2. `decide_group`: each write's outcome (conditions decided in order)
//!    and the group's operations, one per key, in key order;
//! 3. `route_group`: into the write buffer, or straight into the tree;
//! 4. `append_group`: one append (and sync) of the commit record and any
//!    checkpoint records;
//! 5. `next_version` and `release_checkpointed`: the version to publish,
//!    with what the group's checkpoints made durable released from memory;
//! 6. publish, answer the checkpoints, and after the writer lock is let
//!    go, `after_group`: free the old version, count, wake the checkpointer.

use crate::batch::{BatchOp, WriteBatch};
use crate::checkpointer::EARLY_CHECKPOINT_MIN_BYTES;
use crate::commit_log::CommitLog;
use crate::db::Inner;
use crate::error::{Error, Result};
use crate::options::Durability;
use crate::pipeline::{Reply, Request, Ticket, WriteOutcome};
use crate::version::{Epoch, Version};
use crate::write_buffer::WriteBuffer;
use kivi_log::{CheckpointRecord, CommitRecord, OpRef, RecordType};
use kivi_tree::{apply, compare_keys, keys_in_leaf_of, release_written, Applied, TreeWrite};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

/// Groups of at least this many operations go straight into the tree while
/// the write buffer is empty: they touch enough of each leaf they reach
/// that the buffer would save little.
const DIRECT_APPLY_OPS: usize = 1 << 16;

/// Groups of at least this many operations that would go straight into the
/// tree have a smaller write buffer merged first (see `route_group`).
const FLUSH_BEFORE_DIRECT_MIN_OPS: usize = 256;

/// Keys of a group sampled to tell whether they crowd into few leaves.
const DENSITY_SAMPLES: usize = 16;

/// Keys per leaf, on average over the samples, from which a group goes
/// straight into the tree while the write buffer is empty. Random updates of
/// a 1M-pair store put about one key in each leaf they touch; a load in key
/// order, a leaf's worth (about 50 kv40 pairs).
const DENSE_KEYS_PER_LEAF: usize = 8;

/// What the writer (the group-commit leader) owns.
pub(crate) struct Writer {
    pub log: CommitLog,
    pub seq: u64,
}

/// One operation of a group: a put (`Some(value)`) or a delete.
type Op<'a> = (&'a [u8], Option<&'a [u8]>);

/// One reply per ticket of the group, `None` until known.
type Replies = Vec<Option<Result<Reply>>>;

/// A checkpoint record the group commits (see `Request::Checkpoint`).
struct GroupCheckpoint<'g> {
    record: CheckpointRecord,
    generation: u64,
    moved: &'g TreeWrite,
    fresh_segment: bool,
}

/// What deciding a group yields (see `decide_group`).
struct Decided<'g> {
    replies: Replies,
    /// One per key, the last one written, in key order.
    ops: Vec<Op<'g>>,
    checkpoints: Vec<GroupCheckpoint<'g>>,
}

impl Inner {
    pub(crate) fn submit(&self, request: Request) -> Result<Reply> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        if matches!(request, Request::Write(_)) {
            self.wait_for_write_buffer();
        }
        self.pipeline
            .submit(request, &|group| self.commit_group(group))
    }

    /// Commits one group: decides conditional writes in order, applies the
    /// resulting operations to a new tree version, appends one commit record
    /// (and any checkpoint records) in one write, syncs, publishes. The
    /// phases are described at the top of this module.
    pub(crate) fn commit_group(&self, group: &[Arc<Ticket>]) -> Vec<Result<Reply>> {
        let mut guard = self.writer.lock();
        let Some(w) = guard.as_mut() else {
            return group.iter().map(|_| Err(Error::ReadOnly)).collect();
        };
        if self.closed.load(Ordering::Acquire) {
            return group.iter().map(|_| Err(Error::Closed)).collect();
        }
        let base = match self.base_for_group() {
            Ok(base) => base,
            Err(e) => {
                self.counters.failed_commits.fetch_add(1, Ordering::Relaxed);
                return group.iter().map(|_| Err(e.duplicate())).collect();
            }
        };
        let Decided {
            mut replies,
            ops,
            checkpoints,
        } = self.decide_group(group, &base);
        let op_refs: Vec<OpRef<'_>> = ops
            .iter()
            .map(|&(k, v)| match v {
                Some(v) => OpRef::Put(k, v),
                None => OpRef::Delete(k),
            })
            .collect();
        if op_refs.is_empty() && checkpoints.is_empty() {
            return replies
                .into_iter()
                .map(|r| r.expect("every write decided"))
                .collect();
        }
        let (base, buffered) = self.route_group(base, &ops, op_refs.len());
        let applied = if op_refs.is_empty() || buffered {
            None
        } else {
            match apply(&self.pager, &self.tree_cfg, base.root.as_ref(), &op_refs) {
                Ok(a) => Some(a),
                Err(e) => return self.fail_group(replies, &Error::from(e)),
            }
        };
        let committing = applied.is_some() || buffered;
        let seq = w.seq + u64::from(committing);
        let appended = match self.append_group(w, seq, committing, &op_refs, &checkpoints) {
            Ok(appended) => appended,
            Err(e) => {
                *self.last_error.lock() = Some(e.to_string());
                return self.fail_group(replies, &e);
            }
        };
        let visible_log_bytes = base.visible_log_bytes + appended;
        if committing {
            w.seq = seq;
            self.counters
                .last_commit_ms
                .store(self.now_ms(), Ordering::Relaxed);
        }
        let mut next = self.next_version(&base, applied, buffered, seq, visible_log_bytes, &ops);
        let old_epoch = self.release_checkpointed(&mut next, &checkpoints);
        let next = Arc::new(next);
        let old = self.published.swap(next.clone());
        drop(base);
        for (r, t) in replies.iter_mut().zip(group) {
            if let Request::Checkpoint { record, .. } = &t.request {
                *r = Some(Ok(Reply::Checkpoint {
                    obsolete: w.log.release_through(record.replay_from),
                    old_epoch: old_epoch.clone().expect("a checkpoint in the group"),
                }));
            }
        }
        let log_file_bytes = w.log.bytes();
        drop(guard);
        // Outside the writer lock: the next group's leader need not wait
        // for it.
        self.reclaimer.superseded(old, &next);
        drop(next);
        self.after_group(group.len(), log_file_bytes);
        replies.into_iter().map(|r| r.expect("filled")).collect()
    }

    /// The version a group starts from: the published one, its write
    /// buffer merged into the tree first when due. `Err` fails the group.
    fn base_for_group(&self) -> Result<Arc<Version>> {
        let base = self.published.load_full();
        if !self.buffer_wants_merge(&base) {
            return Ok(base);
        }
        match self.merge_buffer(&base, false) {
            Ok(merged) => Ok(merged),
            Err(e) => {
                *self.last_error.lock() = Some(format!("merging the write buffer: {e}"));
                // Past twice its bound the buffer takes no more: writes
                // fail with the error until a merge succeeds.
                if base.buffer.bytes() >= self.buffer_limit().saturating_mul(2) {
                    return Err(e);
                }
                Ok(base)
            }
        }
    }

    /// Decides each request of the group in order: unconditional writes are
    /// applied, conditional ones decided against `base` and the writes
    /// before them, checkpoints set aside (their replies come at publishing).
    fn decide_group<'g>(&self, group: &'g [Arc<Ticket>], base: &Version) -> Decided<'g> {
        let mut replies: Replies = Vec::with_capacity(group.len());
        let mut ops: Vec<Op<'g>> = Vec::new();
        let mut checkpoints = Vec::new();
        let conditional = group
            .iter()
            .any(|t| matches!(&t.request, Request::Write(b) if b.conditional));
        let mut overlay: HashMap<&[u8], Option<&[u8]>> = HashMap::new();
        for t in group {
            match &t.request {
                Request::Write(batch) if !batch.conditional => {
                    for op in &batch.ops {
                        let effect = match op {
                            BatchOp::Put { key, value } => (key.as_slice(), Some(value.as_slice())),
                            BatchOp::Delete { key } => (key.as_slice(), None),
                            _ => unreachable!("unconditional batch"),
                        };
                        if conditional {
                            overlay.insert(effect.0, effect.1);
                        }
                        ops.push(effect);
                    }
                    replies.push(Some(Ok(Reply::Write(WriteOutcome::Applied))));
                }
                Request::Write(batch) => {
                    let outcome = self.decide(batch, base, &mut overlay, &mut ops);
                    replies.push(Some(outcome.map(Reply::Write)));
                }
                Request::Checkpoint {
                    record,
                    generation,
                    moved,
                    fresh_segment,
                } => {
                    checkpoints.push(GroupCheckpoint {
                        record: *record,
                        generation: *generation,
                        moved,
                        fresh_segment: *fresh_segment,
                    });
                    replies.push(None);
                }
            }
        }
        Decided {
            replies,
            ops: one_op_per_key(ops),
            checkpoints,
        }
    }

    /// Whether the group goes into the write buffer (`true`) or straight
    /// into the tree, and the version it then goes on from: groups whose
    /// keys crowd into few leaves (a load in key order, an ordered rewrite
    /// of a range) and large groups gain nothing from the buffer (each leaf
    /// they touch gets many keys anyway), so they go to the tree while the
    /// buffer is empty. A buffer holding less than such a group is merged
    /// into the tree first: else one small group ahead of an ordered load
    /// (a server's first short read) would send every group after it
    /// through the buffer and its merge, twice the work.
    fn route_group(
        &self,
        mut base: Arc<Version>,
        ops: &[Op<'_>],
        op_count: usize,
    ) -> (Arc<Version>, bool) {
        let crowded = |base: &Version| op_count >= DIRECT_APPLY_OPS || self.dense(base, ops);
        let mut buffered = op_count > 0 && (!base.buffer.is_empty() || !crowded(&base));
        if buffered
            && op_count >= FLUSH_BEFORE_DIRECT_MIN_OPS
            && !base.buffer.is_empty()
            && base.buffer.bytes() <= WriteBuffer::group_cost(ops)
            && crowded(&base)
        {
            // On failure the group is buffered, as before.
            match self.merge_buffer(&base, false) {
                Ok(merged) => {
                    base = merged;
                    buffered = false;
                }
                Err(e) => {
                    *self.last_error.lock() = Some(format!("merging the write buffer: {e}"));
                }
            }
        }
        (base, buffered)
    }

    /// Appends the group's commit record (if `committing`, as commit
    /// `seq`) and checkpoint records in one write, synced when durability
    /// asks for it or a checkpoint is among them. Returns the bytes
    /// appended.
    fn append_group(
        &self,
        w: &mut Writer,
        seq: u64,
        committing: bool,
        op_refs: &[OpRef<'_>],
        checkpoints: &[GroupCheckpoint<'_>],
    ) -> Result<u64> {
        let sync = self.opts.durability == Durability::Fsync || !checkpoints.is_empty();
        let appended_before = w.log.appended;
        w.log.append_group(
            committing.then_some(seq),
            checkpoints
                .iter()
                .map(|c| (c.record.seq, c.fresh_segment))
                .max_by_key(|c| c.0),
            &mut |emit, synced| {
                if committing {
                    emit(RecordType::Commit, &mut |out| {
                        CommitRecord::encode(out, synced, seq, op_refs.iter().copied())
                    });
                }
                for c in checkpoints {
                    // The last commit in the log precedes the record: this
                    // group's, if it has one.
                    let record = CheckpointRecord {
                        log_seq: seq,
                        ..c.record
                    };
                    emit(RecordType::Checkpoint, &mut |out| {
                        record.encode(out, synced)
                    });
                }
            },
            sync,
        )?;
        Ok(w.log.appended - appended_before)
    }

    /// The version after the group: the new tree (`applied`), or `base`
    /// with the group in its write buffer (`buffered`) or with nothing new
    /// but the log (a group of checkpoints only).
    fn next_version(
        &self,
        base: &Version,
        applied: Option<Applied>,
        buffered: bool,
        seq: u64,
        visible_log_bytes: u64,
        ops: &[Op<'_>],
    ) -> Version {
        match applied {
            Some(a) => {
                debug_assert!(base.buffer.is_empty());
                let pairs = (base.pairs as i64 + a.pairs_delta) as u64;
                Version {
                    epoch: base.epoch.clone(),
                    // A new buffer for the new tree: what a buffer learns
                    // about the tree under it must stay true while it lives.
                    ..Version::of_tree(a.root, seq, pairs, visible_log_bytes)
                }
            }
            None => {
                let mut next = Version {
                    visible_seq: seq.max(base.visible_seq),
                    visible_log_bytes,
                    ..base.clone()
                };
                if buffered {
                    next.buffer = Arc::new(base.buffer.with_group(ops, &self.run_spares));
                }
                if next.buffer.is_empty() {
                    next.log_bytes = visible_log_bytes;
                }
                next
            }
        }
    }

    /// For each checkpoint the group made durable: what it wrote may leave
    /// memory, and `next` starts a new epoch. Returns the epoch before, for
    /// the checkpointer to wait on (`None` without a checkpoint).
    fn release_checkpointed(
        &self,
        next: &mut Version,
        checkpoints: &[GroupCheckpoint<'_>],
    ) -> Option<Weak<Epoch>> {
        let mut old_epoch = None;
        for c in checkpoints {
            // The checkpoint is durable: what it wrote may now leave memory,
            // and what the cleaner copied is read from its copy.
            self.pager.set_durable_generation(c.generation);
            if let Some(root) = next
                .root
                .as_ref()
                .and_then(|r| release_written(&self.pager, r, c.moved))
            {
                next.root = Some(root);
            }
            // Versions from here on reference nothing the checkpoint left
            // behind; the ones before may, until they are dropped.
            old_epoch = Some(Arc::downgrade(&next.epoch));
            next.epoch = Arc::new(Epoch);
        }
        old_epoch
    }

    /// Fails every write of the group not already failed with `e` (the
    /// group's commit failed: nothing of it is in the log).
    fn fail_group(&self, mut replies: Replies, e: &Error) -> Vec<Result<Reply>> {
        for r in replies.iter_mut() {
            if matches!(r, None | Some(Ok(_))) {
                *r = Some(Err(e.duplicate()));
            }
        }
        self.counters.failed_commits.fetch_add(1, Ordering::Relaxed);
        replies.into_iter().map(|r| r.expect("filled")).collect()
    }

    /// After a group is published and the writer lock let go: counts it,
    /// paces page writes, and wakes the checkpointer when one is due.
    fn after_group(&self, batches: usize, log_file_bytes: u64) {
        self.counters.group_commits.fetch_add(1, Ordering::Relaxed);
        self.counters
            .batches
            .fetch_add(batches as u64, Ordering::Relaxed);
        // A checkpoint writes the tree: the commits still in the write
        // buffer are not yet its to retire.
        let log_bytes = self.published.load().log_bytes;
        let redo =
            log_bytes.saturating_sub(self.counters.checkpointed_log_bytes.load(Ordering::Relaxed));
        let replayable =
            log_bytes.saturating_sub(self.counters.replayable_log_from.load(Ordering::Relaxed));
        let buffer_full = self.write_buffer_full();
        // Page writes are paced for commit latency only while few changes
        // wait for a checkpoint (a quarter of the write buffer): past that,
        // memory waits on them. (Paced throughout, a 10M-pair load gathered
        // over 1 GiB of unwritten changes, and random updates held 100 MiB
        // more at their peak; docs/benchmarks.md, "Memory".)
        self.storage
            .set_bulk_urgent(self.pager.dirty_bytes() >= self.opts.write_buffer_bytes / 4);
        if replayable >= self.opts.checkpoint_bytes
            || buffer_full
            || (redo >= EARLY_CHECKPOINT_MIN_BYTES && self.log_over_target(log_file_bytes))
        {
            self.background.wake();
        }
    }

    /// Whether the keys of `ops` (sorted, unique) crowd into the leaves of
    /// `v`'s tree: sampled at up to `DENSITY_SAMPLES` evenly spaced keys,
    /// the leaf each falls in holds `DENSE_KEYS_PER_LEAF` of them or more
    /// on average. `false` when a page read fails (the buffer needs none).
    fn dense(&self, v: &Version, ops: &[Op<'_>]) -> bool {
        let Some(root) = &v.root else {
            return true;
        };
        // Fewer keys than the bar cannot reach it (single puts, mostly).
        if ops.len() < DENSE_KEYS_PER_LEAF {
            return false;
        }
        let keys: Vec<&[u8]> = ops.iter().map(|op| op.0).collect();
        let samples = keys.len().min(DENSITY_SAMPLES);
        let mut total = 0;
        for s in 0..samples {
            match keys_in_leaf_of(&self.pager, root, &keys, s * keys.len() / samples) {
                Ok(n) => total += n,
                Err(_) => return false,
            }
        }
        total >= DENSE_KEYS_PER_LEAF * samples
    }

    /// Decides a batch with conditions against the tree plus the effects of
    /// earlier batches of the group (`overlay`); appends its effects to `ops`
    /// if every condition holds.
    fn decide<'a>(
        &self,
        batch: &'a WriteBatch,
        base: &Version,
        overlay: &mut HashMap<&'a [u8], Option<&'a [u8]>>,
        ops: &mut Vec<Op<'a>>,
    ) -> Result<WriteOutcome> {
        let mut local: HashMap<&'a [u8], Option<&'a [u8]>> = HashMap::new();
        let mut effects = Vec::with_capacity(batch.ops.len());
        let mut buf = Vec::new();
        for (i, op) in batch.ops.iter().enumerate() {
            let key = op.key();
            // The value this op sees: this batch's, then the group's, then the tree's.
            let current: Option<&[u8]> = match local.get(key).or_else(|| overlay.get(key)) {
                Some(v) => *v,
                None => {
                    let found = self.read(base, key, &mut buf)?;
                    found.then_some(buf.as_slice())
                }
            };
            let effect: Option<Option<&'a [u8]>> = match op {
                BatchOp::Put { value, .. } => Some(Some(value)),
                BatchOp::Delete { .. } => Some(None),
                BatchOp::InsertIfAbsent { value, .. } => current.is_none().then_some(Some(value)),
                BatchOp::UpdateIfPresent { value, .. } => current.is_some().then_some(Some(value)),
                BatchOp::CompareAndSwap {
                    expected, value, ..
                } => (current == Some(expected.as_slice())).then_some(Some(value)),
                BatchOp::CompareAndDelete { expected, .. } => {
                    (current == Some(expected.as_slice())).then_some(None)
                }
            };
            match effect {
                Some(e) => {
                    local.insert(key, e);
                    effects.push((key, e));
                }
                None => return Ok(WriteOutcome::ConditionFailed { op: i }),
            }
        }
        for (k, v) in effects {
            overlay.insert(k, v);
            ops.push((k, v));
        }
        Ok(WriteOutcome::Applied)
    }
}

/// One operation per key, the last one written, in key order. Left as it
/// is when already so (the common case: one batch, or keys in order).
fn one_op_per_key(ops: Vec<Op<'_>>) -> Vec<Op<'_>> {
    if ops.windows(2).all(|p| compare_keys(p[0].0, p[1].0).is_lt()) {
        return ops;
    }
    let mut ops = ops;
    // Stable, so the last write to a key stays last.
    ops.sort_by(|a, b| compare_keys(a.0, b.0));
    let mut deduped: Vec<Op<'_>> = Vec::with_capacity(ops.len());
    for op in ops {
        match deduped.last_mut() {
            Some(last) if last.0 == op.0 => *last = op,
            _ => deduped.push(op),
        }
    }
    deduped
}
