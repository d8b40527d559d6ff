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
//!
//! **Commits in flight.** On storage that overlaps syncs (an object store:
//! each sync is a request taking a round trip), phases 1-5 run under the
//! writer lock and start the sync without waiting for it; the group is then
//! *in flight*, and the next group is prepared on top of its version
//! (`Writer::ahead`) at once. Groups finish in the order they were
//! prepared: each waits for its sync, then for its turn, then publishes and
//! is answered. A group whose sync failed fails every group after it (they
//! were decided against its writes); the next group to be prepared first
//! waits for all of them and starts again from the published version, in a
//! new commit segment whose header cuts the failed groups off. Anything
//! else that publishes (a merge of the write buffer, a checkpoint taking
//! its version or committing its record, a clear, a new commit segment)
//! first waits until nothing is in flight.

use crate::backpressure::{log_over_target, Backpressure, EARLY_CHECKPOINT_MIN_BYTES};
use crate::batch::{BatchOp, WriteBatch};
use crate::commit_log::{Appended, CommitLog};
use crate::error::{Error, Result};
use crate::expiry::{is_live, Millis};
use crate::limits::MAX_GROUPS_IN_FLIGHT;
use crate::options::Durability;
use crate::pipeline::{Committed, Committer, Pipeline, Reply, Request, Ticket, WriteOutcome};
use crate::store::Store;
use crate::version::{Epoch, Version};
use crate::write_buffer::{Stored, WriteBuffer};
use kivi_log::{CheckpointRecord, CommitRecord, OpRef, RecordType};
use kivi_storage::{PendingSync, SegmentId};
use kivi_tree::{apply, compare_keys, keys_in_leaf_of, release_written, Applied, TreeWrite};
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

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
    log: CommitLog,
    /// The last commit's sequence number (of the last group prepared).
    seq: u64,
    /// The version of the last group put in flight: the next group starts
    /// from it. Set with the first group in flight and cleared when the
    /// writer next waits for all of them (`settle`): while it is `None`,
    /// nothing is in flight.
    ahead: Option<Arc<Version>>,
}

impl Writer {
    pub fn new(log: CommitLog, seq: u64) -> Writer {
        Writer {
            log,
            seq,
            ahead: None,
        }
    }
}

/// Groups in flight (see the module's doc), counted in the order they
/// were prepared.
#[derive(Default)]
struct Flight {
    /// Groups prepared so far.
    started: u64,
    /// Groups finished (published, or failed) so far; the next to finish
    /// is number `finished`.
    finished: u64,
    /// The first group in flight that failed, since the writer last
    /// started again: every later one fails with its error.
    failed: Option<Failed>,
}

struct Failed {
    error: Error,
    /// Where its records began: the commit segment is cut off there.
    segment: SegmentId,
    start: u64,
    /// The last commit before it: the published version's.
    seq_before: u64,
}

/// The commit path: the group-commit queue and the writer behind it.
pub(crate) struct CommitPath {
    pipeline: Pipeline,
    /// `None` when read-only. Held while a group is prepared (or commits),
    /// a checkpoint takes its version, or the write buffer is merged. The
    /// published version changes only under it, or, while groups are in
    /// flight, by those groups finishing in order (see `Flight`).
    writer: Mutex<Option<Writer>>,
    /// Groups in flight; `flight_done` is signalled as each finishes.
    flight: Mutex<Flight>,
    flight_done: Condvar,
    /// Groups that may be in flight at once; 1: each commits whole under
    /// the writer lock.
    max_in_flight: u64,
    /// How long a sync in flight takes, on average (nanoseconds, a moving
    /// average over the last few), and when the last group started: see
    /// `GroupCommitter::wait_for_room`.
    sync_nanos: AtomicU64,
    last_start: Mutex<Option<Instant>>,
}

/// While groups are in flight, the next one starts no sooner than this
/// after the one before (nor sooner than the syncs' average time divided by
/// the groups that may be in flight): a group then gathers the writes of
/// that time, rather than every writer that arrives starting a request of
/// its own. Where a sync takes 30 ms (S3), 16 groups are in flight about
/// 2 ms apart; where it takes a millisecond or two, a group mostly starts
/// as the one before finishes.
const MIN_GROUP_GAP: Duration = Duration::from_millis(2);

/// A group prepared and in flight: what finishing it needs.
struct InFlight {
    /// Its number among the groups prepared.
    order: u64,
    /// When its sync started.
    started: Instant,
    sync: Option<PendingSync>,
    /// The version to publish (`None`: the group changed nothing).
    next: Option<Arc<Version>>,
    replies: Replies,
    batches: usize,
    committing: bool,
    reclaimed: u64,
    log_file_bytes: u64,
    /// Where its records began, for cutting the log off if it fails.
    segment: SegmentId,
    start: u64,
    seq_before: u64,
}

/// One operation of a group: a put (`Some(value)`) or a delete.
type Op<'a> = crate::write_buffer::Write<'a>;

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
    /// The group holds a `Db::clear`: every key written before it (and
    /// before it in the group) is gone; `ops` are what follows it.
    clears: bool,
    /// Expired keys the group deletes (`BatchOp::Reclaim`).
    reclaimed: u64,
    /// One per key, the last one written, in key order.
    ops: Vec<Op<'g>>,
    checkpoints: Vec<GroupCheckpoint<'g>>,
}

impl CommitPath {
    /// `group_wait`: how long a leader waits for more writes before it
    /// takes a group (`Options::commit_wait`).
    /// `in_flight`: how many groups may be in flight at once (the
    /// storage's `syncs_in_flight`, 1 unless every commit is synced).
    pub fn new(
        writer: Option<Writer>,
        group_wait: std::time::Duration,
        in_flight: usize,
    ) -> CommitPath {
        CommitPath {
            pipeline: Pipeline::new(group_wait),
            writer: Mutex::new(writer),
            flight: Mutex::default(),
            flight_done: Condvar::new(),
            max_in_flight: in_flight.clamp(1, MAX_GROUPS_IN_FLIGHT) as u64,
            sync_nanos: AtomicU64::new(0),
            last_start: Mutex::new(None),
        }
    }

    /// Waits until no group is in flight, then, if one of them failed,
    /// starts the writer again from the published version: the commit
    /// segment is cut off where the failed group began. Under the writer
    /// lock (`w`); the groups finish without it.
    fn settle(&self, w: &mut Writer) {
        if self.max_in_flight == 1 {
            return;
        }
        let mut f = self.flight.lock();
        while f.finished != f.started {
            self.flight_done.wait(&mut f);
        }
        if let Some(failed) = f.failed.take() {
            w.seq = failed.seq_before;
            w.log
                .cut_off(failed.segment, failed.start, failed.seq_before);
        }
        w.ahead = None;
    }

    /// Commits `request` with the next group; durable when it returns.
    pub fn submit(&self, store: &Store, bp: &Backpressure, request: Request) -> Result<Reply> {
        if store.is_closed() {
            return Err(Error::Closed);
        }
        if let Request::Write(b) = &request {
            bp.wait_for_write_buffer(store, Backpressure::write_cost(b.size_bytes(), b.len()));
        }
        self.pipeline.submit(
            request,
            &GroupCommitter {
                path: self,
                store,
                bp,
            },
        )
    }

    /// Commits `requests` (writes), queued all at once; one reply each.
    pub fn submit_many(
        &self,
        store: &Store,
        bp: &Backpressure,
        requests: Vec<Request>,
        queued: Option<Box<dyn FnOnce() + '_>>,
    ) -> Vec<Result<Reply>> {
        if !requests.is_empty() {
            let cost = requests
                .iter()
                .map(|r| match r {
                    Request::Write(b) => Backpressure::write_cost(b.size_bytes(), b.len()),
                    Request::Checkpoint { .. } => 0,
                })
                .sum();
            bp.wait_for_write_buffer(store, cost);
        }
        self.pipeline.submit_many(
            requests,
            &GroupCommitter {
                path: self,
                store,
                bp,
            },
            queued,
        )
    }

    /// The version a checkpoint writes, taken while no commit is in
    /// progress, with the commit log told to start a new segment after it:
    /// once the checkpoint is durable, every older commit segment can go.
    /// `merge`: the write buffer goes into the tree first.
    pub fn version_to_checkpoint(&self, store: &Store, merge: bool) -> Result<Arc<Version>> {
        let mut writer = self.writer.lock();
        if let Some(w) = writer.as_mut() {
            self.settle(w);
            w.log.roll_before_next();
        }
        let v = store.current_full();
        // A tree whose count is not known (right after an open) is
        // counted by merging (see `TreePairs`), never checkpointed as is.
        match merge || v.pairs.known().is_none() {
            false => Ok(v),
            true => store.merge_buffer(&v, false),
        }
    }

    /// Merges the write buffer into the tree, on one thread, if the tree
    /// has room for it; a failure is left for the next commit to report.
    pub fn merge_idle_buffer(&self, store: &Store) {
        // Idle stores tick here too: no writer lock for an empty buffer.
        if store.current().buffer.is_empty() {
            return;
        }
        let mut writer = self.writer.lock();
        if let Some(w) = writer.as_mut() {
            self.settle(w);
        }
        let v = store.current_full();
        if v.buffer.is_empty() || !store.merge_has_room(&v) {
            return;
        }
        if let Err(e) = store.merge_buffer(&v, true) {
            store.note_error("merging the write buffer", &e);
        }
    }

    /// Groups that may be in flight at once (1: each commits whole).
    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight as usize
    }

    /// Bytes of the commit log's files.
    pub fn log_bytes(&self) -> u64 {
        self.writer.lock().as_ref().map_or(0, |w| w.log.bytes())
    }

    /// Commit segments in the log.
    pub fn log_segments(&self) -> usize {
        self.writer
            .lock()
            .as_ref()
            .map_or(0, |w| w.log.segment_count())
    }

    /// The commit segment being appended to and the bytes written to it.
    pub fn log_appending(&self) -> Option<(SegmentId, u64)> {
        self.writer.lock().as_ref().and_then(|w| w.log.current())
    }

    /// Syncs the commit log; taking the writer lock, it waits for a group
    /// in progress.
    pub fn sync_log(&self) -> Result<()> {
        if let Some(w) = self.writer.lock().as_mut() {
            self.settle(w);
            w.log.sync()?;
        }
        Ok(())
    }

    /// Commits one group: decides conditional writes in order, applies the
    /// resulting operations to a new tree version, appends one commit record
    /// (and any checkpoint records) in one write, syncs, publishes. The
    /// phases are described at the top of this module.
    fn commit_group<'s>(
        &'s self,
        store: &'s Store,
        bp: &'s Backpressure,
        group: &[Arc<Ticket>],
    ) -> Committed<'s> {
        use Committed::Done;
        let mut guard = self.writer.lock();
        let Some(w) = guard.as_mut() else {
            return Done(group.iter().map(|_| Err(Error::ReadOnly)).collect());
        };
        if store.is_closed() {
            return Done(group.iter().map(|_| Err(Error::Closed)).collect());
        }
        // Groups go in flight when every commit is synced on storage that
        // overlaps syncs; a group with a checkpoint or a clear commits whole,
        // once nothing is in flight.
        let overlap = self.max_in_flight > 1 && store.opts().durability == Durability::Fsync;
        let in_flight = overlap && !group.iter().any(|t| t.request.checkpoints_or_clears());
        if overlap && (!in_flight || self.must_settle(store, w)) {
            self.settle(w);
        }
        let base = match &w.ahead {
            Some(ahead) => Ok(ahead.clone()),
            None => base_for_group(store),
        };
        let base = match base {
            Ok(base) => base,
            Err(e) => {
                store.counters().commit_failed();
                return Done(group.iter().map(|_| Err(e.duplicate())).collect());
            }
        };
        // On top of groups in flight, nothing else may publish.
        let behind_others = w.ahead.is_some();
        let Decided {
            mut replies,
            clears,
            reclaimed,
            ops,
            checkpoints,
        } = decide_group(store, group, &base);
        let op_refs: Vec<OpRef<'_>> = ops
            .iter()
            .map(|&(k, v)| match v {
                Some((v, deadline)) => OpRef::Put(k, v, deadline),
                None => OpRef::Delete(k),
            })
            .collect();
        if op_refs.is_empty() && checkpoints.is_empty() && !clears {
            if behind_others {
                // Decided against groups not yet durable: answered after them.
                let p = self.start(w, base, None, replies, group.len(), 0, false, 0);
                drop(guard);
                return Committed::InFlight(Box::new(move || self.finish(store, bp, p)));
            }
            return Done(
                replies
                    .into_iter()
                    .map(|r| r.expect("every write decided"))
                    .collect(),
            );
        }
        // After a clear the group goes on from an empty tree. The empty tree
        // is said to hold the commits up to the one before this group's: a
        // checkpoint of it then replays this group's record, clear and all.
        let base = if clears {
            Arc::new(Version {
                epoch: base.epoch.clone(),
                ..Version::of_tree(None, w.seq, 0, base.visible_log_bytes)
            })
        } else {
            base
        };
        let (base, buffered) = route_group(store, base, &ops, op_refs.len(), !behind_others);
        let applied = if op_refs.is_empty() || buffered {
            None
        } else {
            match apply(
                store.pager(),
                store.tree_cfg(),
                base.root.as_ref(),
                &op_refs,
            ) {
                Ok(a) => Some(a),
                Err(e) => return Done(fail_group(store, replies, &e.into())),
            }
        };
        let committing = applied.is_some() || buffered || clears;
        let seq = w.seq + u64::from(committing);
        let appended_before = w.log.appended;
        let appended = match append_group(
            store,
            w,
            seq,
            committing,
            clears,
            &op_refs,
            &checkpoints,
            in_flight,
        ) {
            Ok(appended) => appended,
            Err(e) => {
                store.note_error("group commit (append and fdatasync to the commit log)", &e);
                return Done(fail_group(store, replies, &e));
            }
        };
        let visible_log_bytes = base.visible_log_bytes + (w.log.appended - appended_before);
        let mut next = next_version(
            store,
            &base,
            applied,
            buffered,
            seq,
            visible_log_bytes,
            &ops,
        );
        if in_flight {
            let seq_before = w.seq;
            if committing {
                w.seq = seq;
            }
            drop(base);
            let p = self.start(
                w,
                Arc::new(next),
                Some(appended),
                replies,
                group.len(),
                reclaimed,
                committing,
                seq_before,
            );
            drop(guard);
            return Committed::InFlight(Box::new(move || self.finish(store, bp, p)));
        }
        if committing {
            w.seq = seq;
            store.counters().set_last_commit_ms(store.now_ms());
            store.counters().keys_reclaimed(reclaimed);
        }
        if clears {
            // The next checkpoint writes the whole tree, so that the pages
            // from before the clear can go (see `Checkpointer::run`).
            store.note_cleared();
        }
        let old_epoch = release_checkpointed(store, &mut next, &checkpoints);
        let next = Arc::new(next);
        let old = store.publish(next.clone());
        drop(base);
        answer_checkpoints(w, group, &mut replies, old_epoch);
        let log_file_bytes = w.log.bytes();
        drop(guard);
        // Outside the writer lock: the next group's leader need not wait
        // for it.
        store.reclaimer().superseded(old, &next);
        drop(next);
        after_group(store, bp, group.len(), log_file_bytes);
        Done(replies.into_iter().map(|r| r.expect("filled")).collect())
    }

    /// Whether the next group must wait until nothing is in flight: one
    /// in flight failed, the write buffer wants merging, or the commit log
    /// is about to start a new segment.
    fn must_settle(&self, store: &Store, w: &Writer) -> bool {
        let Some(ahead) = &w.ahead else {
            return false;
        };
        self.flight.lock().failed.is_some() || store.buffer_wants_merge(ahead) || w.log.would_roll()
    }

    /// Puts a prepared group in flight: the next group starts from `next`.
    /// `appended`: its records and their sync (`None` if it wrote none);
    /// `committing`: whether it is a commit (it has a sequence number).
    #[allow(clippy::too_many_arguments)]
    fn start(
        &self,
        w: &mut Writer,
        next: Arc<Version>,
        appended: Option<Appended>,
        replies: Replies,
        batches: usize,
        reclaimed: u64,
        committing: bool,
        seq_before: u64,
    ) -> InFlight {
        let publish = appended.is_some();
        w.ahead = Some(next.clone());
        let order = {
            let mut f = self.flight.lock();
            f.started += 1;
            f.started - 1
        };
        let started = Instant::now();
        *self.last_start.lock() = Some(started);
        let (segment, start, sync) = match appended {
            Some(a) => (a.segment, a.start, a.sync),
            None => (0, 0, None),
        };
        InFlight {
            order,
            started,
            sync,
            next: publish.then_some(next),
            replies,
            batches,
            committing,
            reclaimed,
            log_file_bytes: w.log.bytes(),
            segment,
            start,
            seq_before,
        }
    }

    /// Finishes a group in flight: waits for its sync and for the groups
    /// before it, then publishes it and answers, or fails it (and with it
    /// every group after it, see `Flight::failed`).
    fn finish(&self, store: &Store, bp: &Backpressure, p: InFlight) -> Vec<Result<Reply>> {
        let synced = p.sync.map_or(Ok(()), PendingSync::wait);
        if synced.is_ok() {
            // A moving average: 7/8 of the last, 1/8 of this one.
            let took = p.started.elapsed().as_nanos().min(u64::MAX as u128) as u64;
            let avg = self.sync_nanos.load(Relaxed);
            let next = if avg == 0 {
                took
            } else {
                avg - avg / 8 + took / 8
            };
            self.sync_nanos.store(next, Relaxed);
        }
        let mut f = self.flight.lock();
        while f.finished != p.order {
            self.flight_done.wait(&mut f);
        }
        let outcome = match (&f.failed, synced) {
            (Some(failed), _) => Err(failed.error.duplicate()),
            (None, Err(e)) => {
                let e = Error::Io(e);
                store.note_error("group commit (its put to the log, in flight)", &e);
                f.failed = Some(Failed {
                    error: e.duplicate(),
                    segment: p.segment,
                    start: p.start,
                    seq_before: p.seq_before,
                });
                Err(e)
            }
            (None, Ok(())) => Ok(()),
        };
        let old = match (&outcome, &p.next) {
            (Ok(()), Some(next)) => Some(store.publish(next.clone())),
            _ => None,
        };
        if outcome.is_ok() && p.committing {
            store.counters().set_last_commit_ms(store.now_ms());
            store.counters().keys_reclaimed(p.reclaimed);
        }
        f.finished += 1;
        drop(f);
        self.flight_done.notify_all();
        match outcome {
            Ok(()) => {
                if let (Some(old), Some(next)) = (old, p.next) {
                    store.reclaimer().superseded(old, &next);
                }
                after_group(store, bp, p.batches, p.log_file_bytes);
                p.replies
                    .into_iter()
                    .map(|r| r.expect("every write decided"))
                    .collect()
            }
            Err(e) => fail_group(store, p.replies, &e),
        }
    }
}

/// The pipeline's view of the commit path.
struct GroupCommitter<'a> {
    path: &'a CommitPath,
    store: &'a Store,
    bp: &'a Backpressure,
}

impl Committer for GroupCommitter<'_> {
    fn wait_for_room(&self) {
        let path = self.path;
        if path.max_in_flight == 1 {
            return;
        }
        let gap = MIN_GROUP_GAP.max(Duration::from_nanos(
            path.sync_nanos.load(Relaxed) / path.max_in_flight,
        ));
        let mut f = path.flight.lock();
        loop {
            let in_flight = f.started - f.finished;
            if in_flight == 0 {
                return;
            }
            if in_flight < path.max_in_flight {
                let since = path.last_start.lock().map_or(gap, |t| t.elapsed());
                if since >= gap {
                    return;
                }
                // Woken early if a group finishes (none in flight: go).
                path.flight_done.wait_for(&mut f, gap - since);
            } else {
                path.flight_done.wait(&mut f);
            }
        }
    }

    fn commit<'s>(&'s self, group: &[Arc<Ticket>]) -> Committed<'s> {
        self.path.commit_group(self.store, self.bp, group)
    }
}

/// The version a group starts from: the published one, its write
/// buffer merged into the tree first when due. `Err` fails the group.
fn base_for_group(store: &Store) -> Result<Arc<Version>> {
    let base = store.current_full();
    if !store.buffer_wants_merge(&base) {
        return Ok(base);
    }
    match store.merge_buffer(&base, false) {
        Ok(merged) => Ok(merged),
        Err(e) => {
            store.note_error("merging the write buffer", &e);
            // Past twice its bound the buffer takes no more: writes
            // fail with the error until a merge succeeds.
            if base.buffer.bytes() >= store.buffer_limit().saturating_mul(2) {
                return Err(e);
            }
            Ok(base)
        }
    }
}

/// Decides each request of the group in order: unconditional writes are
/// applied, conditional ones decided against `base` and the writes
/// before them, checkpoints set aside (their replies come at publishing).
fn decide_group<'g>(store: &Store, group: &'g [Arc<Ticket>], base: &Version) -> Decided<'g> {
    let mut replies: Replies = Vec::with_capacity(group.len());
    let mut ops: Vec<Op<'g>> = Vec::new();
    let mut checkpoints = Vec::new();
    let mut reclaimed = 0;
    let mut clears = false;
    // After a clear in the group, conditions are decided against nothing.
    let empty = Version::default();
    let conditional = group
        .iter()
        .any(|t| matches!(&t.request, Request::Write(b) if b.conditional));
    let mut overlay: HashMap<&[u8], Option<Stored<'_>>> = HashMap::new();
    // One moment for the whole group: its conditions see expiry as of it.
    let now = store.clock_now();
    for t in group {
        match &t.request {
            Request::Write(batch) if !batch.conditional => {
                for op in &batch.ops {
                    if let BatchOp::Clear = op {
                        ops.clear();
                        overlay.clear();
                        clears = true;
                        continue;
                    }
                    let effect = match op {
                        BatchOp::Put {
                            key,
                            value,
                            deadline,
                        } => (key.as_slice(), Some((value.as_slice(), *deadline))),
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
                let base = if clears { &empty } else { base };
                let outcome =
                    decide(store, batch, base, now, &mut overlay, &mut ops).map(|(outcome, n)| {
                        reclaimed += n;
                        outcome
                    });
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
        clears,
        reclaimed,
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
/// `may_merge`: false while groups are in flight (`base` is not published).
fn route_group(
    store: &Store,
    mut base: Arc<Version>,
    ops: &[Op<'_>],
    op_count: usize,
    may_merge: bool,
) -> (Arc<Version>, bool) {
    let crowded = |base: &Version| op_count >= DIRECT_APPLY_OPS || dense(store, base, ops);
    let mut buffered = op_count > 0 && (!base.buffer.is_empty() || !crowded(&base));
    if buffered
        && may_merge
        && op_count >= FLUSH_BEFORE_DIRECT_MIN_OPS
        && !base.buffer.is_empty()
        && base.buffer.bytes() <= WriteBuffer::group_cost(ops)
        && crowded(&base)
    {
        // On failure the group is buffered, as before.
        match store.merge_buffer(&base, false) {
            Ok(merged) => {
                base = merged;
                buffered = false;
            }
            Err(e) => {
                store.note_error("merging the write buffer", &e);
            }
        }
    }
    (base, buffered)
}

/// Appends the group's commit record (if `committing`, as commit
/// `seq`) and checkpoint records in one write, synced when durability
/// asks for it or a checkpoint is among them. Returns the bytes
/// appended.
#[allow(clippy::too_many_arguments)]
fn append_group(
    store: &Store,
    w: &mut Writer,
    seq: u64,
    committing: bool,
    clears: bool,
    op_refs: &[OpRef<'_>],
    checkpoints: &[GroupCheckpoint<'_>],
    in_flight: bool,
) -> Result<Appended> {
    let sync = store.opts().durability == Durability::Fsync || !checkpoints.is_empty();
    let appended = w.log.append_group(
        committing.then_some(seq),
        checkpoints
            .iter()
            .map(|c| (c.record.seq, c.fresh_segment))
            .max_by_key(|c| c.0),
        &mut |emit, synced| {
            if committing {
                emit(RecordType::Commit, &mut |out| {
                    CommitRecord::encode(out, synced, seq, clears, op_refs.iter().copied())
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
        in_flight,
    )?;
    Ok(appended)
}

/// The version after the group: the new tree (`applied`), or `base`
/// with the group in its write buffer (`buffered`) or with nothing new
/// but the log (a group of checkpoints only).
fn next_version(
    store: &Store,
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
            let tree_pairs = base
                .pairs
                .known()
                .expect("a version with an empty write buffer has a known count");
            let pairs = (tree_pairs as i64 + a.pairs_delta) as u64;
            Version {
                epoch: base.epoch.clone(),
                deadlines: base.deadlines.after(a.deadlines_delta),
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
                next.buffer = Arc::new(base.buffer.with_group(ops, store.run_spares()));
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
    store: &Store,
    next: &mut Version,
    checkpoints: &[GroupCheckpoint<'_>],
) -> Option<Weak<Epoch>> {
    let mut old_epoch = None;
    for c in checkpoints {
        // The checkpoint is durable: what it wrote may now leave memory,
        // and what the cleaner copied is read from its copy.
        store.pager().set_durable_generation(c.generation);
        if let Some(root) = next
            .root
            .as_ref()
            .and_then(|r| release_written(store.pager(), r, c.moved))
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

/// Answers the group's checkpoints, now durable: the commit segments
/// their records made obsolete, and the epoch before them (see
/// `Reply::Checkpoint`).
fn answer_checkpoints(
    w: &mut Writer,
    group: &[Arc<Ticket>],
    replies: &mut Replies,
    old_epoch: Option<Weak<Epoch>>,
) {
    for (r, t) in replies.iter_mut().zip(group) {
        if let Request::Checkpoint { record, .. } = &t.request {
            *r = Some(Ok(Reply::Checkpoint {
                obsolete: w.log.release_through(record.replay_from),
                old_epoch: old_epoch.clone().expect("a checkpoint in the group"),
            }));
        }
    }
}

/// Fails every write of the group not already failed with `e` (the
/// group's commit failed: nothing of it is in the log).
fn fail_group(store: &Store, mut replies: Replies, e: &Error) -> Vec<Result<Reply>> {
    for r in replies.iter_mut() {
        if matches!(r, None | Some(Ok(_))) {
            *r = Some(Err(e.duplicate()));
        }
    }
    store.counters().commit_failed();
    replies.into_iter().map(|r| r.expect("filled")).collect()
}

/// After a group is published and the writer lock let go: counts it,
/// paces page writes, and wakes the checkpointer when one is due.
fn after_group(store: &Store, bp: &Backpressure, batches: usize, log_file_bytes: u64) {
    store.counters().group_committed(batches as u64);
    // A checkpoint writes the tree: the commits still in the write
    // buffer are not yet its to retire.
    let log_bytes = store.current().log_bytes;
    let redo = log_bytes.saturating_sub(store.counters().checkpointed_log_bytes());
    let replayable = log_bytes.saturating_sub(store.counters().replayable_log_from());
    let buffer_full = store.write_buffer_full();
    bp.pace_page_writes(store);
    if replayable >= store.opts().checkpoint_bytes
        || buffer_full
        || (redo >= EARLY_CHECKPOINT_MIN_BYTES && log_over_target(store, log_file_bytes))
    {
        bp.wake();
    }
}

/// Whether the keys of `ops` (sorted, unique) crowd into the leaves of
/// `v`'s tree: sampled at up to `DENSITY_SAMPLES` evenly spaced keys,
/// the leaf each falls in holds `DENSE_KEYS_PER_LEAF` of them or more
/// on average. `false` when a page read fails (the buffer needs none).
fn dense(store: &Store, v: &Version, ops: &[Op<'_>]) -> bool {
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
        match keys_in_leaf_of(store.pager(), root, &keys, s * keys.len() / samples) {
            Ok(n) => total += n,
            Err(_) => return false,
        }
    }
    total >= DENSE_KEYS_PER_LEAF * samples
}

/// Decides a batch with conditions against the tree plus the effects of
/// earlier batches of the group (`overlay`); appends its effects to `ops`
/// if every condition holds, with the number of expired keys it deletes. A
/// value whose deadline is before `now` is absent to every condition.
fn decide<'a>(
    store: &Store,
    batch: &'a WriteBatch,
    base: &Version,
    now: Millis,
    overlay: &mut HashMap<&'a [u8], Option<Stored<'a>>>,
    ops: &mut Vec<Op<'a>>,
) -> Result<(WriteOutcome, u64)> {
    let mut local: HashMap<&'a [u8], Option<Stored<'a>>> = HashMap::new();
    let mut effects = Vec::with_capacity(batch.ops.len());
    let mut buf = Vec::new();
    let mut reclaimed = 0;
    for (i, op) in batch.ops.iter().enumerate() {
        let key = op.key();
        // The value this op sees: this batch's, then the group's, then the tree's.
        let stored: Option<Stored<'_>> = match local.get(key).or_else(|| overlay.get(key)) {
            Some(v) => *v,
            None => store
                .read(base, key, &mut buf)?
                .map(|deadline| (buf.as_slice(), deadline)),
        };
        if let BatchOp::Reclaim { deadline, .. } = op {
            // Still the expired value the reclaimer found: delete it.
            if stored.is_some_and(|(_, d)| d == *deadline && !is_live(d, now)) {
                local.insert(key, None);
                effects.push((key, None));
                reclaimed += 1;
            }
            continue;
        }
        let current = stored.filter(|&(_, d)| is_live(d, now));
        let matches = |expected: &[u8], expected_deadline: &Option<Millis>| {
            current.is_some_and(|(v, d)| {
                v == expected && expected_deadline.is_none_or(|want| want == d)
            })
        };
        let effect: Option<Option<Stored<'a>>> = match op {
            BatchOp::Put {
                value, deadline, ..
            } => Some(Some((value, *deadline))),
            BatchOp::Delete { .. } => Some(None),
            BatchOp::InsertIfAbsent {
                value, deadline, ..
            } => current.is_none().then_some(Some((value, *deadline))),
            BatchOp::UpdateIfPresent {
                value, deadline, ..
            } => current.is_some().then_some(Some((value, *deadline))),
            BatchOp::CompareAndSwap {
                expected,
                expected_deadline,
                value,
                deadline,
                ..
            } => matches(expected, expected_deadline).then_some(Some((value, *deadline))),
            BatchOp::CompareAndDelete {
                expected,
                expected_deadline,
                ..
            } => matches(expected, expected_deadline).then_some(None),
            BatchOp::Reclaim { .. } => unreachable!("decided above"),
            BatchOp::Clear => unreachable!("a clear is alone in an unconditional batch"),
        };
        match effect {
            Some(e) => {
                local.insert(key, e);
                effects.push((key, e));
            }
            None => return Ok((WriteOutcome::ConditionFailed { op: i }, 0)),
        }
    }
    for (k, v) in effects {
        overlay.insert(k, v);
        ops.push((k, v));
    }
    Ok((WriteOutcome::Applied, reclaimed))
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
