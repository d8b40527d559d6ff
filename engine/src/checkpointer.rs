//! Checkpoints, and the background thread that takes them.
//!
//! A checkpoint writes the tree nodes that changed since the last one to the
//! page log, syncs them, then commits a checkpoint record naming the new root
//! through the ordinary commit pipeline. Once that record is durable, the
//! commit segments holding only older commits are deleted and the written
//! nodes are handed to the page cache. It runs beside writers (it works on a
//! published, immutable version) and never blocks readers.
//!
//! The background thread takes one when the commit log has grown by
//! `Options::checkpoint_bytes` since the last, when the store has been idle a
//! second with a sixteenth of that pending, and once more at close when the
//! backlog is worth it (1 MiB, or 8 commit segments to retire).

use crate::cleaner::plan::{
    choose_slice, plan_floor, slice_floor, Plan, PlanInput, SliceCandidate,
};
use crate::db::Inner;
use crate::error::{Error, Result};
use crate::page_log::PageLog;
use crate::pipeline::{Reply, Request};
use crate::version::{Epoch, Version};
use kivi_log::CheckpointRecord;
use kivi_storage::SegmentId;
use kivi_tree::{root_children, write_tree, DiskRef, TreeWrite, WriteStats};
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the background thread looks at the store when nothing wakes it.
const TICK: Duration = Duration::from_millis(200);
/// Quiet time after which a smaller backlog is checkpointed.
const IDLE_MS: u64 = 1000;
/// Milliseconds without commits after which the write buffer is merged
/// into the tree.
const BUFFER_IDLE_MS: u64 = 20;
/// A store closing with at least this much commit log since the last
/// checkpoint takes one more checkpoint.
const FINAL_CHECKPOINT_MIN_BYTES: u64 = 1 << 20;
/// ... or with at least this many commit segments to retire.
const FINAL_CHECKPOINT_MIN_SEGMENTS: usize = 8;
/// Pause after a failed checkpoint before trying again.
const RETRY_PAUSE: Duration = Duration::from_secs(1);
/// Writers wait while unwritten changes pass this many write buffers: one
/// being written by a checkpoint, one gathering beside it.
const WRITE_STALL_FACTOR: u64 = 2;
/// The longest one write waits for the write buffer to drain.
const MAX_WRITE_STALL: Duration = Duration::from_secs(1);
/// How often a waiting writer looks again without a signal.
const WRITE_STALL_STEP: Duration = Duration::from_millis(10);

pub(crate) struct Checkpointer {
    pages: PageLog,
    /// Obsolete commit segments whose deletion failed, oldest first; retried
    /// before newer ones, so that what remains is always the log's oldest.
    undeleted: Vec<u64>,
    generation: u64,
    /// Sequence number of the newest durable checkpoint, if any this session.
    last_seq: Option<u64>,
    /// The cleaner's line: the next checkpoint copies whatever the tree
    /// still references in page segments before it. Never moves back.
    floor: u32,
    /// Page segments before this hold nothing the newest durable checkpoint
    /// references (its tree's oldest segment).
    durable_oldest: u32,
    /// Page segments no durable checkpoint references any more, each with
    /// the epochs of the versions that may still read it (every epoch before
    /// the checkpoint that let it go and still alive then); deleted once all
    /// of those are gone.
    retiring: Vec<(Vec<Weak<Epoch>>, SegmentId)>,
    /// Epochs before the newest checkpoint's that were alive at its end.
    old_epochs: Vec<Weak<Epoch>>,
    /// Bytes the last checkpoint wrote: about what the next one will add
    /// before the segments it frees can go.
    last_written: Option<u64>,
    /// The newest durable root's children (when it is an internal node
    /// written this session), each with the commit its content is as of:
    /// what a sliced checkpoint may keep.
    root_slices: Option<Vec<RootSlice>>,
    /// The newest durable checkpoint's `replay_from`: the log holds every
    /// commit after it.
    replay_from: u64,
    /// (seq, `Version::log_bytes`) of the versions durable checkpoints of
    /// this session took, from the one `replay_from` names on.
    log_at: Vec<(u64, u64)>,
}

/// A child of the durable root (see `Checkpointer::root_slices`).
#[derive(Debug, Clone)]
struct RootSlice {
    /// The separator its key range starts at (`None` for the first); the
    /// next child's is where it ends.
    low: Option<Vec<u8>>,
    page: DiskRef,
    /// Every commit up to this one is in its pages.
    seq: u64,
    /// The first page segment of the checkpoint that wrote it.
    since: u32,
}

impl Checkpointer {
    pub fn new(pages: PageLog, durable_oldest: u32, replay_from: u64) -> Self {
        Checkpointer {
            pages,
            undeleted: Vec::new(),
            generation: 0,
            last_seq: None,
            floor: 0,
            durable_oldest,
            retiring: Vec::new(),
            old_epochs: Vec::new(),
            last_written: None,
            root_slices: None,
            replay_from,
            log_at: Vec::new(),
        }
    }

    /// For a sliced checkpoint of the tree under `root` (`tree_bytes` on
    /// disk): per root child, the previous page to keep instead of writing
    /// the changed child (`None`: written), choosing to write the children
    /// whose pages are oldest until about a `SLICES`th of the tree. Empty
    /// (write everything) without a previous root to take pages from.
    fn plan_slice(
        &self,
        pager: &kivi_tree::Pager,
        root: &kivi_tree::Node,
        tree_bytes: u64,
    ) -> Vec<Option<DiskRef>> {
        let Some(prev) = &self.root_slices else {
            return Vec::new();
        };
        let now = root_children(pager, root);
        // Where child `i` of a list of range starts ends (`None`: at the end).
        let prev_high = |j: usize| prev.get(j + 1).map(|c| &c.low);
        let now_high = |i: usize| now.get(i + 1).map(|c| &c.0);
        let by_low: HashMap<&Option<Vec<u8>>, usize> =
            prev.iter().enumerate().map(|(j, p)| (&p.low, j)).collect();
        // Changed children whose key range the previous root had too.
        let mut candidates = Vec::new();
        for (i, (low, page)) in now.iter().enumerate() {
            if page.is_some() {
                continue;
            }
            let Some(&j) = by_low.get(low) else {
                continue;
            };
            if prev_high(j) != now_high(i) {
                continue;
            }
            candidates.push(SliceCandidate {
                seq: prev[j].seq,
                child: i,
                page: prev[j].page,
                subtree: prev[j].page.subtree,
            });
        }
        choose_slice(candidates, now.len(), tree_bytes)
    }

    /// What the cleaner plans the next checkpoint's cleaning from.
    fn plan_floor(&self, tree_bytes: u64, log_bytes: u64, max: f64, new_pages: bool) -> Plan {
        plan_floor(&PlanInput {
            segments: self.pages.segments(),
            current: self.pages.current(),
            floor: self.floor,
            durable_oldest: self.durable_oldest,
            last_written: self.last_written,
            tree_bytes,
            log_bytes,
            max,
            new_pages,
        })
    }
}

/// The commit log is retired early (a checkpoint before `checkpoint_bytes`)
/// once it takes a quarter of the room the space target leaves beside the
/// tree (sliced checkpoints keep the commits since their oldest slice), but
/// never for less than this.
pub(crate) const EARLY_CHECKPOINT_MIN_BYTES: u64 = 256 << 10;

/// Space figures the cleaner plans with.
#[derive(Debug, Clone, Copy)]
struct Space {
    /// The durable tree.
    tree: u64,
    /// The commit log's files.
    log: u64,
}

/// What a checkpoint is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CheckpointKind {
    /// Retire the commit log; clean as the space target needs.
    Regular,
    /// As `Regular`, but write about a `SLICES`th of the tree's changed
    /// root children (those whose pages are oldest), the previous pages
    /// standing in for the others. Under random updates nearly every leaf
    /// changes between two checkpoints; a checkpoint that rewrites them all
    /// holds two trees on disk until it is durable (the files passed twice
    /// the live bytes while one was in flight). A slice holds a quarter.
    Slice,
    /// Copy every live page into a new segment and delete everything else.
    Compact,
}

#[derive(Default)]
struct BgState {
    stop: bool,
    wake: bool,
}

#[derive(Default)]
pub(crate) struct Background {
    state: Mutex<BgState>,
    cond: Condvar,
    /// Signalled after each background checkpoint: writers held back by a
    /// full write buffer (`Inner::wait_for_write_buffer`) look again.
    written: Condvar,
    thread: Mutex<Option<JoinHandle<Result<()>>>>,
}

impl Background {
    pub fn start(inner: &Arc<Inner>) {
        let me = inner.clone();
        let handle = std::thread::Builder::new()
            .name("kivi-checkpoint".into())
            .spawn(move || run(&me))
            .expect("spawn checkpoint thread");
        *inner.background.thread.lock() = Some(handle);
    }

    pub fn wake(&self) {
        let mut st = self.state.lock();
        st.wake = true;
        self.cond.notify_one();
    }

    /// Wakes the thread and waits until it finishes a checkpoint, or
    /// `at_most` passes, or it is stopping.
    pub fn wait_written(&self, at_most: Duration) {
        let mut st = self.state.lock();
        if st.stop {
            return;
        }
        st.wake = true;
        self.cond.notify_one();
        self.written.wait_for(&mut st, at_most);
    }

    fn notify_written(&self) {
        let _st = self.state.lock();
        self.written.notify_all();
    }

    /// Stops the thread and returns the result of its final checkpoint.
    pub fn stop(&self) -> Option<Result<()>> {
        {
            let mut st = self.state.lock();
            st.stop = true;
            self.cond.notify_one();
        }
        let handle = self.thread.lock().take()?;
        Some(handle.join().unwrap_or(Err(Error::Closed)))
    }
}

fn run(inner: &Inner) -> Result<()> {
    loop {
        {
            let mut st = inner.background.state.lock();
            if !st.stop && !st.wake {
                // Soon after writes pause, the write buffer is merged so
                // that reads no longer look through it.
                let tick = match inner.published.load().buffer.is_empty() {
                    true => TICK,
                    false => Duration::from_millis(BUFFER_IDLE_MS),
                };
                inner.background.cond.wait_for(&mut st, tick);
            }
            if st.stop {
                break;
            }
            st.wake = false;
        }
        let v = inner.published.load();
        let redo = v.log_bytes.saturating_sub(
            inner
                .counters
                .checkpointed_log_bytes
                .load(Ordering::Relaxed),
        );
        // What recovery would replay: a sliced checkpoint retires only the
        // commits its oldest kept slice holds, so `checkpoint_bytes` bounds
        // this (and so recovery time), not the log since the last one.
        let replayable = v
            .log_bytes
            .saturating_sub(inner.counters.replayable_log_from.load(Ordering::Relaxed));
        drop(v);
        let quiet_ms = inner
            .now_ms()
            .saturating_sub(inner.counters.last_commit_ms.load(Ordering::Relaxed));
        let idle = quiet_ms >= IDLE_MS;
        if quiet_ms >= BUFFER_IDLE_MS {
            inner.merge_idle_buffer();
        }
        let due = replayable >= inner.opts.checkpoint_bytes
            || inner.write_buffer_full()
            || (idle && redo >= inner.opts.checkpoint_bytes / 16)
            || (idle && inner.cleaning_wanted())
            || (redo >= EARLY_CHECKPOINT_MIN_BYTES && inner.log_over_target(inner.space_now().log));
        // Checkpoints for the commit log's growth or for memory go a slice
        // at a time (memory: each slice frees what it writes, and the next
        // follows while the buffer is full); when idle, every change.
        let kind = if idle {
            CheckpointKind::Regular
        } else {
            CheckpointKind::Slice
        };
        if due {
            let result = inner.run_checkpoint(kind);
            inner.background.notify_written();
            if result.is_err() {
                let mut st = inner.background.state.lock();
                if !st.stop {
                    inner.background.cond.wait_for(&mut st, RETRY_PAUSE);
                }
            }
        }
        inner.delete_retired();
    }
    // A last checkpoint, so that the next open has little to replay. Not
    // for a small backlog, though: each checkpoint starts a page segment, and
    // a store opened for a single write (`kivi put`) would otherwise gain a
    // file per run. Replaying a small backlog is quick.
    let v = inner.published.load();
    let checkpointed = inner
        .counters
        .checkpointed_log_bytes
        .load(Ordering::Relaxed);
    let pending = v.visible_log_bytes.saturating_sub(checkpointed);
    drop(v);
    let segments = inner
        .writer
        .lock()
        .as_ref()
        .map_or(0, |w| w.log.segment_count());
    if pending >= FINAL_CHECKPOINT_MIN_BYTES
        || (pending > 0 && segments >= FINAL_CHECKPOINT_MIN_SEGMENTS)
    {
        inner.run_checkpoint(CheckpointKind::Regular)?;
    }
    inner.delete_retired();
    Ok(())
}

impl Inner {
    /// Live bytes as `stats` counts them (the durable tree plus the commit
    /// log since) and the bytes of the commit log.
    fn space_now(&self) -> Space {
        let tree = self
            .counters
            .checkpointed_tree_bytes
            .load(Ordering::Relaxed);
        let log = self.writer.lock().as_ref().map_or(0, |w| w.log.bytes());
        Space { tree, log }
    }

    fn plan_floor(&self, c: &Checkpointer, space: Space, new_pages: bool) -> Plan {
        c.plan_floor(
            space.tree,
            space.log,
            self.opts.space_amplification_max,
            new_pages,
        )
    }

    /// Merges the write buffer into the tree if no commit came for
    /// `BUFFER_IDLE_MS`; a failure is left for the next commit to report.
    fn merge_idle_buffer(&self) {
        // Idle stores tick here too: no writer lock for an empty buffer.
        if self.published.load().buffer.is_empty() {
            return;
        }
        let _writer = self.writer.lock();
        let v = self.published.load_full();
        if v.buffer.is_empty() || !self.merge_has_room(&v) {
            return;
        }
        if let Err(e) = self.merge_buffer(&v, true) {
            *self.last_error.lock() = Some(format!("merging the write buffer: {e}"));
        }
    }

    /// Memory held by changes no checkpoint has written yet: the tree's,
    /// and the write buffer's (which a merge turns into the tree's).
    fn unwritten_bytes(&self) -> u64 {
        self.pager.dirty_bytes() + self.published.load().buffer.bytes()
    }

    /// Whether the changes not yet written by a checkpoint hold as much
    /// memory as `write_buffer_bytes` allows.
    pub(crate) fn write_buffer_full(&self) -> bool {
        self.pager.dirty_bytes() >= self.opts.write_buffer_bytes
    }

    /// Holds a writer back while the changes not yet written by a
    /// checkpoint pass `WRITE_STALL_FACTOR` times the write buffer, until
    /// background checkpoints bring them under it or `MAX_WRITE_STALL`
    /// passes. Without it, writers that outrun the checkpoints gathered
    /// changes without bound: random updates on a 10M-pair store held 3.5x
    /// a 64 MiB write buffer (docs/benchmarks.md, "Memory"). The wait is
    /// bounded so that a checkpoint that keeps failing (a full disk) turns
    /// into slow writes that report their own errors, not a hang.
    pub(crate) fn wait_for_write_buffer(&self) {
        let limit = self
            .opts
            .write_buffer_bytes
            .saturating_mul(WRITE_STALL_FACTOR);
        if self.unwritten_bytes() < limit {
            return;
        }
        let start = Instant::now();
        self.counters.write_stalls.fetch_add(1, Ordering::Relaxed);
        while self.unwritten_bytes() >= limit && !self.closed.load(Ordering::Acquire) {
            let left = MAX_WRITE_STALL.saturating_sub(start.elapsed());
            if left.is_zero() {
                break;
            }
            self.background.wait_written(left.min(WRITE_STALL_STEP));
        }
        self.counters
            .write_stall_us
            .fetch_add(start.elapsed().as_micros() as u64, Ordering::Relaxed);
    }

    /// Whether the commit log, `log_bytes` long, takes so much of the room
    /// the space target leaves beside the tree that it should be retired now.
    /// Never before there is a durable tree to measure it against: until
    /// then the log is all the store holds (its amplification is 1), and
    /// `checkpoint_bytes` alone decides. (An early checkpoint at 256 KiB of
    /// a fresh store also raced explicit ones, which made tests that expect
    /// only their own checkpoints flaky.)
    pub(crate) fn log_over_target(&self, log_bytes: u64) -> bool {
        let tree = self
            .counters
            .checkpointed_tree_bytes
            .load(Ordering::Relaxed);
        if tree == 0 {
            return false;
        }
        let room = (tree as f64 * (self.opts.space_amplification_max - 1.0) / 4.0) as u64;
        log_bytes > room.max(EARLY_CHECKPOINT_MIN_BYTES)
    }

    /// Whether the files are over the space target and a checkpoint could
    /// clean some of it away.
    fn cleaning_wanted(&self) -> bool {
        let space = self.space_now();
        let guard = self.checkpointer.lock();
        let Some(c) = guard.as_ref() else {
            return false;
        };
        // Only asked when idle: whatever the next checkpoint writes beyond
        // its copies is small.
        self.plan_floor(c, space, false).floor > c.durable_oldest
    }

    /// Deletes the page segments no checkpoint references once no version
    /// that could read them is left. Oldest first is not needed here: page
    /// segments are found by listing, not by a chain.
    pub(crate) fn delete_retired(&self) {
        let mut guard = self.checkpointer.lock();
        let Some(c) = guard.as_mut() else {
            return;
        };
        let mut i = 0;
        while i < c.retiring.len() {
            let (epochs, id) = &c.retiring[i];
            if epochs.iter().any(|e| e.strong_count() > 0) {
                i += 1;
                continue;
            }
            let id = *id;
            match self.storage.delete_segment(id) {
                Ok(()) => {
                    self.pager.close_segment(id as u32);
                    c.pages.forget(id);
                    c.retiring.swap_remove(i);
                    self.counters
                        .cleaned_segments
                        .fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    *self.last_error.lock() = Some(format!("deleting a cleaned page segment: {e}"));
                    i += 1;
                }
            }
        }
        self.counters
            .retiring_segments
            .store(c.retiring.len() as u64, Ordering::Relaxed);
    }

    /// Takes a checkpoint of the current version. `Ok(false)` when there was
    /// nothing to do: nothing new to write and nothing to clean.
    ///
    /// The phases, in order: take the version (`version_to_checkpoint`),
    /// plan what to clean (`plan_cleaning`) and what to write
    /// (`plan_writing`), write and sync the pages, then commit the record
    /// through the pipeline (`write_and_commit`), and once it is durable
    /// retire what it made obsolete (`checkpoint_durable`).
    pub(crate) fn run_checkpoint(&self, kind: CheckpointKind) -> Result<bool> {
        let space = self.space_now();
        let mut guard = self.checkpointer.lock();
        let Some(c) = guard.as_mut() else {
            return Err(Error::ReadOnly);
        };
        let v = self.version_to_checkpoint(kind)?;
        let covered = c
            .last_seq
            .unwrap_or(self.counters.checkpointed_seq.load(Ordering::Relaxed));
        let nothing_new = v.seq == covered
            && v.log_bytes == self.counters.checkpointed_log_bytes.load(Ordering::Relaxed);
        let floor = self.plan_cleaning(c, kind, space, nothing_new)?;
        if kind != CheckpointKind::Compact && nothing_new && floor <= c.durable_oldest {
            return Ok(false);
        }
        c.pages.set_tree_bytes(space.tree);
        let writing = c.plan_writing(&self.pager, &v, kind, space.tree, floor)?;
        c.generation += 1;
        let generation = c.generation;
        let mut stats = WriteStats::default();
        let done = match self.write_and_commit(c, &v, kind, generation, &writing, &mut stats) {
            Ok(done) => done,
            Err(e) => {
                // Marks it left on nodes later checkpoints keep must never
                // be taken for durable places.
                self.pager.set_failed_generation(generation);
                c.pages.checkpoint_failed();
                self.counters
                    .failed_checkpoints
                    .fetch_add(1, Ordering::Relaxed);
                *self.last_error.lock() = Some(format!("checkpoint failed: {e}"));
                return Err(e);
            }
        };
        self.checkpoint_durable(c, &v, kind, generation, writing.floor, done, &stats);
        drop(v);
        drop(guard);
        self.delete_retired();
        Ok(true)
    }

    /// The version a checkpoint writes, taken while no commit is in
    /// progress, with the commit log told to start a new segment after it:
    /// once this checkpoint is durable, every older commit segment can go.
    fn version_to_checkpoint(&self, kind: CheckpointKind) -> Result<Arc<Version>> {
        let mut writer = self.writer.lock();
        if let Some(w) = writer.as_mut() {
            w.log.roll_before_next();
        }
        let v = self.published.load_full();
        // A checkpoint asked for (or an idle one) covers every commit:
        // the write buffer goes into the tree first. Slices, taken while
        // writes go on, leave it to fill.
        match kind {
            CheckpointKind::Slice => Ok(v),
            CheckpointKind::Regular | CheckpointKind::Compact => self.merge_buffer(&v, false),
        }
    }

    /// The cleaner's floor for this checkpoint (see `cleaner::plan`),
    /// closing or starting the page segment being written when the plan
    /// (or compaction) asks for it.
    fn plan_cleaning(
        &self,
        c: &mut Checkpointer,
        kind: CheckpointKind,
        space: Space,
        nothing_new: bool,
    ) -> Result<u32> {
        Ok(match kind {
            CheckpointKind::Regular | CheckpointKind::Slice => {
                let plan = self.plan_floor(c, space, !nothing_new);
                if plan.close_current {
                    c.pages.finish_segment()?;
                }
                plan.floor
            }
            CheckpointKind::Compact => {
                // Everything written so far is to be copied into a segment
                // of its own, so every older one can go.
                c.pages.start_segment()?;
                c.pages
                    .current_id()
                    .map_or(c.floor, |id| id as u32)
                    .max(c.floor)
            }
        })
    }

    /// Writes the tree's changed pages (those `writing` does not keep) and
    /// syncs them, then commits the checkpoint record through the commit
    /// pipeline and waits until it is durable.
    fn write_and_commit(
        &self,
        c: &mut Checkpointer,
        v: &Version,
        kind: CheckpointKind,
        generation: u64,
        writing: &Writing,
        stats: &mut WriteStats,
    ) -> Result<Committed> {
        let written = match &v.root {
            Some(r) => write_tree(
                &self.pager,
                r,
                generation,
                writing.floor,
                &writing.keep,
                &mut c.pages,
                stats,
            )?,
            None => TreeWrite::default(),
        };
        c.pages.sync()?;
        let root = written.root;
        let slices = c.root_slices_after(&self.pager, v, writing, &written);
        let replay_from = slices
            .as_ref()
            .and_then(|s| s.iter().map(|s| s.seq).min())
            .unwrap_or(v.seq);
        let rec = CheckpointRecord {
            seq: v.seq,
            replay_from,
            // Set by the leader when it appends the record.
            log_seq: v.seq,
            root: root.map(|d| d.page),
            root_level: v.root.as_ref().map_or(0, |r| r.level()),
            page_end: c.pages.end(),
            pairs: v.pairs,
            tree_bytes: root.map_or(0, |d| d.subtree),
            root_oldest: root.map_or(0, |d| d.oldest),
        };
        match self.submit(Request::Checkpoint {
            record: rec,
            generation,
            moved: Box::new(written),
            fresh_segment: kind == CheckpointKind::Compact,
        })? {
            Reply::Checkpoint {
                obsolete,
                old_epoch,
            } => Ok(Committed {
                rec,
                obsolete,
                old_epoch,
                slices,
            }),
            Reply::Write(_) => unreachable!("checkpoint answered as a write"),
        }
    }

    /// After the checkpoint's record is durable: its pages are the durable
    /// ones, the commit segments before its `replay_from` are deleted, the
    /// page segments it no longer references retire, and it is counted.
    #[allow(clippy::too_many_arguments)]
    fn checkpoint_durable(
        &self,
        c: &mut Checkpointer,
        v: &Version,
        kind: CheckpointKind,
        generation: u64,
        floor: u32,
        done: Committed,
        stats: &WriteStats,
    ) {
        let Committed {
            rec,
            obsolete,
            old_epoch,
            slices,
        } = done;
        self.pager.set_durable_generation(generation);
        c.pages.checkpoint_durable();
        c.last_seq = Some(rec.seq);
        c.root_slices = slices;
        c.replay_from = rec.replay_from;
        c.log_at.push((v.seq, v.log_bytes));
        c.log_at.retain(|&(seq, _)| seq >= rec.replay_from);
        // Before any checkpoint of this session the count starts at the
        // open, whose replay started at the record's `replay_from`.
        let replayable_from = c
            .log_at
            .iter()
            .find(|&&(seq, _)| seq == rec.replay_from)
            .map_or(0, |&(_, bytes)| bytes);
        self.counters
            .replayable_log_from
            .store(replayable_from, Ordering::Relaxed);
        self.delete_obsolete_commit_segments(c, obsolete);
        c.retire_page_segments(&rec, floor, old_epoch);
        if kind != CheckpointKind::Compact {
            c.last_written = Some(stats.bytes - stats.relocated_bytes);
        }
        let counters = &self.counters;
        counters.checkpoints.fetch_add(1, Ordering::Relaxed);
        if rec.replay_from < rec.seq {
            counters.sliced_checkpoints.fetch_add(1, Ordering::Relaxed);
        }
        counters
            .checkpoint_bytes
            .fetch_add(stats.bytes, Ordering::Relaxed);
        counters
            .cleaner_copied_bytes
            .fetch_add(stats.relocated_bytes, Ordering::Relaxed);
        counters
            .checkpointed_log_bytes
            .store(v.log_bytes, Ordering::Relaxed);
        counters
            .checkpointed_tree_bytes
            .store(rec.tree_bytes, Ordering::Relaxed);
        counters.checkpointed_seq.store(rec.seq, Ordering::Relaxed);
    }

    /// Deletes the commit segments a durable checkpoint made obsolete (and
    /// any whose deletion failed before), oldest first, stopping at a
    /// failure: deleting a newer segment while an older one stays would
    /// leave a gap in the log's chain.
    fn delete_obsolete_commit_segments(&self, c: &mut Checkpointer, obsolete: Vec<SegmentId>) {
        c.undeleted.extend(obsolete);
        while let Some(&id) = c.undeleted.first() {
            if let Err(e) = self.storage.delete_segment(id) {
                *self.last_error.lock() = Some(format!("deleting an obsolete commit segment: {e}"));
                break;
            }
            c.undeleted.remove(0);
        }
    }
}

/// What a checkpoint writes (see `Checkpointer::plan_writing`).
struct Writing {
    /// Per root child, the previous page a slice keeps (`None`: written);
    /// empty when everything changed is written.
    keep: Vec<Option<DiskRef>>,
    /// Records before this page segment are copied (cleaned).
    floor: u32,
    /// The page segment the checkpoint's writes start in.
    first_segment: u32,
}

/// A checkpoint whose record is durable, and what its commit answered.
struct Committed {
    rec: CheckpointRecord,
    obsolete: Vec<SegmentId>,
    old_epoch: Weak<Epoch>,
    slices: Option<Vec<RootSlice>>,
}

impl Checkpointer {
    /// What the checkpoint of `v` writes: for a slice, the root children
    /// it keeps and its cleaning line (see `slice_floor`); otherwise
    /// everything changed, cleaning up to `floor`.
    fn plan_writing(
        &mut self,
        pager: &kivi_tree::Pager,
        v: &Version,
        kind: CheckpointKind,
        tree_bytes: u64,
        floor: u32,
    ) -> Result<Writing> {
        let keep = match (&v.root, kind) {
            (Some(r), CheckpointKind::Slice) => self.plan_slice(pager, r, tree_bytes),
            _ => Vec::new(),
        };
        let sliced = keep.iter().any(Option::is_some);
        if sliced {
            // The slice's pages start a segment of their own, which the
            // next writes of the same slice free whole.
            self.pages.finish_segment()?;
        }
        let first_segment = self.pages.end().segment;
        let floor = match sliced {
            true => {
                let since: Vec<u32> = self
                    .root_slices
                    .iter()
                    .flatten()
                    .filter(|s| keep.contains(&Some(s.page)))
                    .map(|s| s.since)
                    .collect();
                slice_floor(since, floor)
            }
            false => floor,
        };
        Ok(Writing {
            keep,
            floor,
            first_segment,
        })
    }

    /// The durable root's children after writing `v` (see `root_slices`):
    /// those kept from the previous root hold the commits up to theirs;
    /// the others, all of `v`'s.
    fn root_slices_after(
        &self,
        pager: &kivi_tree::Pager,
        v: &Version,
        writing: &Writing,
        written: &TreeWrite,
    ) -> Option<Vec<RootSlice>> {
        let first_segment = writing.first_segment;
        let r = v.root.as_ref()?;
        if r.is_leaf() {
            return None;
        }
        let slices = root_children(pager, r)
            .into_iter()
            .zip(&written.root_children)
            .enumerate()
            .map(|(i, ((low, _), page))| {
                let kept = writing.keep.get(i).copied().flatten() == Some(*page);
                let prev = self
                    .root_slices
                    .as_ref()
                    .and_then(|p| p.iter().find(|s| s.page == *page));
                let (seq, since) = match (kept, prev) {
                    (true, Some(p)) => (p.seq, p.since),
                    // Not found: as old as the log allows.
                    (true, None) => (self.replay_from, 0),
                    (false, _) => (
                        v.seq,
                        // The first segment this checkpoint wrote.
                        self.pages
                            .segments()
                            .range(u64::from(first_segment)..)
                            .next()
                            .map_or(first_segment, |(&id, _)| id as u32),
                    ),
                };
                RootSlice {
                    low,
                    page: *page,
                    seq,
                    since,
                }
            })
            .collect();
        Some(slices)
    }

    /// Page segments the durable tree (of `rec`) no longer uses retire; the
    /// versions of the epoch before this checkpoint (`old_epoch`) and older
    /// may still read them.
    fn retire_page_segments(&mut self, rec: &CheckpointRecord, floor: u32, old_epoch: Weak<Epoch>) {
        debug_assert!(
            rec.root.is_none()
                || rec.replay_from < rec.seq
                || rec.root_oldest >= floor.min(rec.page_end.segment)
        );
        self.floor = self.floor.max(floor);
        self.durable_oldest = unreferenced_below(rec);
        let retire: Vec<SegmentId> = self
            .pages
            .segments()
            .range(..u64::from(self.durable_oldest))
            .map(|(&id, _)| id)
            .filter(|id| !self.retiring.iter().any(|(_, r)| r == id))
            .collect();
        self.old_epochs.retain(|e| e.strong_count() > 0);
        self.old_epochs.push(old_epoch);
        let epochs = self.old_epochs.clone();
        self.retiring
            .extend(retire.into_iter().map(|id| (epochs.clone(), id)));
    }
}

/// Page segments before the returned id hold nothing checkpoint `rec`
/// references: its tree's oldest segment, or for an empty tree the segment
/// its page stream ends in (which recovery expects to find).
pub(crate) fn unreferenced_below(rec: &CheckpointRecord) -> u32 {
    match rec.root {
        Some(_) => rec.root_oldest,
        None => rec.page_end.segment,
    }
}
