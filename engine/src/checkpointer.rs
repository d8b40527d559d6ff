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

use crate::db::Inner;
use crate::error::{Error, Result};
use crate::page_log::PageLog;
use crate::pipeline::{Reply, Request};
use kivi_log::CheckpointRecord;
use kivi_tree::{write_tree, WriteStats};
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the background thread looks at the store when nothing wakes it.
const TICK: Duration = Duration::from_millis(200);
/// Quiet time after which a smaller backlog is checkpointed.
const IDLE_MS: u64 = 1000;
/// A store closing with at least this much commit log since the last
/// checkpoint takes one more checkpoint.
const FINAL_CHECKPOINT_MIN_BYTES: u64 = 1 << 20;
/// ... or with at least this many commit segments to retire.
const FINAL_CHECKPOINT_MIN_SEGMENTS: usize = 8;
/// Pause after a failed checkpoint before trying again.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

pub(crate) struct Checkpointer {
    pages: PageLog,
    /// Obsolete commit segments whose deletion failed, oldest first; retried
    /// before newer ones, so that what remains is always the log's oldest.
    undeleted: Vec<u64>,
    generation: u64,
    /// Sequence number of the newest durable checkpoint, if any this session.
    last_seq: Option<u64>,
}

impl Checkpointer {
    pub fn new(pages: PageLog) -> Self {
        Checkpointer {
            pages,
            undeleted: Vec::new(),
            generation: 0,
            last_seq: None,
        }
    }
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
                inner.background.cond.wait_for(&mut st, TICK);
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
        let idle = inner
            .now_ms()
            .saturating_sub(inner.counters.last_commit_ms.load(Ordering::Relaxed))
            >= IDLE_MS;
        let due = redo >= inner.opts.checkpoint_bytes
            || (idle && redo >= inner.opts.checkpoint_bytes / 16);
        drop(v);
        if due && inner.run_checkpoint().is_err() {
            let mut st = inner.background.state.lock();
            if !st.stop {
                inner.background.cond.wait_for(&mut st, RETRY_PAUSE);
            }
        }
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
    let pending = v.log_bytes.saturating_sub(checkpointed);
    drop(v);
    let segments = inner
        .writer
        .lock()
        .as_ref()
        .map_or(0, |w| w.log.segment_count());
    if pending >= FINAL_CHECKPOINT_MIN_BYTES
        || (pending > 0 && segments >= FINAL_CHECKPOINT_MIN_SEGMENTS)
    {
        inner.run_checkpoint()?;
    }
    Ok(())
}

impl Inner {
    /// Takes a checkpoint of the current version. `Ok(false)` when there was
    /// nothing new to write.
    pub(crate) fn run_checkpoint(&self) -> Result<bool> {
        let mut guard = self.checkpointer.lock();
        let Some(c) = guard.as_mut() else {
            return Err(Error::ReadOnly);
        };
        let v = self.published.load_full();
        let covered = c
            .last_seq
            .unwrap_or(self.counters.checkpointed_seq.load(Ordering::Relaxed));
        if v.seq == covered
            && v.log_bytes == self.counters.checkpointed_log_bytes.load(Ordering::Relaxed)
        {
            return Ok(false);
        }
        c.generation += 1;
        let generation = c.generation;
        let mut stats = WriteStats::default();
        let attempt = (|| -> Result<(CheckpointRecord, Vec<u64>)> {
            let root = match &v.root {
                Some(r) => Some(write_tree(
                    &self.pager,
                    r,
                    generation,
                    &mut c.pages,
                    &mut stats,
                )?),
                None => None,
            };
            c.pages.sync()?;
            let rec = CheckpointRecord {
                seq: v.seq,
                // Set by the leader when it appends the record.
                log_seq: v.seq,
                root: root.map(|d| d.page),
                root_level: v.root.as_ref().map_or(0, |r| r.level()),
                page_end: c.pages.end(),
                pairs: v.pairs,
                tree_bytes: root.map_or(0, |d| d.subtree),
            };
            match self.submit(Request::Checkpoint {
                record: rec,
                generation,
            })? {
                Reply::Checkpoint(obsolete) => Ok((rec, obsolete)),
                Reply::Write(_) => unreachable!("checkpoint answered as a write"),
            }
        })();
        let (rec, obsolete) = match attempt {
            Ok(x) => x,
            Err(e) => {
                c.pages.checkpoint_failed();
                self.counters
                    .failed_checkpoints
                    .fetch_add(1, Ordering::Relaxed);
                *self.last_error.lock() = Some(format!("checkpoint failed: {e}"));
                return Err(e);
            }
        };
        self.pager.set_durable_generation(generation);
        c.pages.checkpoint_durable();
        c.last_seq = Some(rec.seq);
        // Oldest first, stopping at a failure: deleting a newer segment while
        // an older one stays would leave a gap in the log's chain.
        c.undeleted.extend(obsolete);
        while let Some(&id) = c.undeleted.first() {
            if let Err(e) = self.storage.delete_segment(id) {
                *self.last_error.lock() = Some(format!("deleting an obsolete commit segment: {e}"));
                break;
            }
            c.undeleted.remove(0);
        }
        let counters = &self.counters;
        counters.checkpoints.fetch_add(1, Ordering::Relaxed);
        counters
            .checkpoint_bytes
            .fetch_add(stats.bytes, Ordering::Relaxed);
        counters
            .checkpointed_log_bytes
            .store(v.log_bytes, Ordering::Relaxed);
        counters
            .checkpointed_tree_bytes
            .store(rec.tree_bytes, Ordering::Relaxed);
        counters.checkpointed_seq.store(rec.seq, Ordering::Relaxed);
        Ok(true)
    }
}
