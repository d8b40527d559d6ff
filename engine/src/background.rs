//! The background thread: takes checkpoints when they are due, merges the
//! write buffer when writes pause, reclaims expired keys (reclaim.rs),
//! deletes retired page segments, and takes a last checkpoint at close.
//!
//! A checkpoint is due when the commit log has grown by
//! `Options::checkpoint_bytes` since the last, when the store has been idle a
//! second with a sixteenth of that pending, and once more at close when the
//! backlog is worth it (1 MiB, or 8 commit segments to retire).

use crate::backpressure::{log_over_target, Backpressure, EARLY_CHECKPOINT_MIN_BYTES};
use crate::checkpointer::{space_now, CheckpointKind, Checkpointer};
use crate::commit::CommitPath;
use crate::error::{Error, Result};
use crate::reclaim::{self, ReclaimCursor};
use crate::store::Store;
use parking_lot::Mutex;
use std::thread::JoinHandle;
use std::time::Duration;

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

/// The background thread's handle.
#[derive(Default)]
pub(crate) struct Background {
    thread: Mutex<Option<JoinHandle<Result<()>>>>,
}

impl Background {
    /// Starts the thread running `work` (`run`, on the store's owners).
    pub fn start(&self, work: impl FnOnce() -> Result<()> + Send + 'static) {
        let handle = std::thread::Builder::new()
            .name("kivi-checkpoint".into())
            .spawn(work)
            .expect("spawn checkpoint thread");
        *self.thread.lock() = Some(handle);
    }

    /// Stops the thread and returns the result of its final checkpoint.
    pub fn stop(&self, bp: &Backpressure) -> Option<Result<()>> {
        bp.stop();
        let handle = self.thread.lock().take()?;
        Some(handle.join().unwrap_or(Err(Error::Closed)))
    }
}

/// The background thread's loop, until `Backpressure::stop`.
pub(crate) fn run(
    store: &Store,
    commit: &CommitPath,
    checkpointer: &Checkpointer,
    bp: &Backpressure,
) -> Result<()> {
    let mut reclaim_cursor = ReclaimCursor::default();
    let mut reclaim_more = false;
    // Expired keys reclaimed when the last checkpoint started: reclaiming
    // since (a cache's keys expiring together) makes the next quiet second
    // take one, whatever the log's size, so their space comes back.
    let mut reclaimed_at_checkpoint = 0;
    loop {
        // Soon after writes pause, the write buffer is merged so that
        // reads no longer look through it; expired keys are reclaimed
        // without a pause while there are many.
        let stop = bp.wait_for_work(|| {
            if reclaim_more {
                return Duration::ZERO;
            }
            match store.current().buffer.is_empty() {
                true => TICK,
                false => Duration::from_millis(BUFFER_IDLE_MS),
            }
        });
        if stop {
            break;
        }
        if store.storage().is_fenced() {
            // Another writer took over: nothing here may be written again,
            // so there is nothing to merge, checkpoint or reclaim (and a
            // reclaim left wanting more must not keep the wait at zero:
            // the loop would spin until the store closes).
            reclaim_more = false;
            continue;
        }
        let counters = store.counters();
        let v = store.current();
        let redo = v
            .log_bytes
            .saturating_sub(counters.checkpointed_log_bytes());
        // What recovery would replay: a sliced checkpoint retires only the
        // commits its oldest kept slice holds, so `checkpoint_bytes` bounds
        // this (and so recovery time), not the log since the last one.
        let replayable = v.log_bytes.saturating_sub(counters.replayable_log_from());
        drop(v);
        let quiet_ms = store.now_ms().saturating_sub(counters.last_commit_ms());
        let idle = quiet_ms >= IDLE_MS;
        if quiet_ms >= BUFFER_IDLE_MS {
            commit.merge_idle_buffer(store);
        }
        reclaim_more = match reclaim::round(store, commit, bp, &mut reclaim_cursor) {
            Ok(more) => more,
            Err(e) => {
                store.note_error("reclaiming expired keys", &e);
                false
            }
        };
        let opts = store.opts();
        let reclaimed = counters.values().expired_reclaimed;
        let due = replayable >= opts.checkpoint_bytes
            || store.write_buffer_full()
            || (idle && reclaimed > reclaimed_at_checkpoint)
            || (idle && redo >= opts.checkpoint_bytes / 16)
            || (idle && checkpointer.cleaning_wanted(store, commit))
            || (redo >= EARLY_CHECKPOINT_MIN_BYTES
                && log_over_target(store, space_now(store, commit).log));
        // Checkpoints for the commit log's growth or for memory go a slice
        // at a time (memory: each slice frees what it writes, and the next
        // follows while the buffer is full); when idle, every change.
        let kind = if idle {
            CheckpointKind::Regular
        } else {
            CheckpointKind::Slice
        };
        if due {
            reclaimed_at_checkpoint = reclaimed;
            let result = checkpointer.run(store, commit, bp, kind);
            bp.notify_written();
            if result.is_err() {
                bp.pause(RETRY_PAUSE);
            }
        }
        checkpointer.delete_retired(store);
    }
    final_checkpoint(store, commit, checkpointer, bp)
}

/// A last checkpoint, so that the next open has little to replay. Not
/// for a small backlog, though: each checkpoint starts a page segment, and
/// a store opened for a single write (`kivi put`) would otherwise gain a
/// file per run. Replaying a small backlog is quick.
fn final_checkpoint(
    store: &Store,
    commit: &CommitPath,
    checkpointer: &Checkpointer,
    bp: &Backpressure,
) -> Result<()> {
    let v = store.current();
    let checkpointed = store.counters().checkpointed_log_bytes();
    let pending = v.visible_log_bytes.saturating_sub(checkpointed);
    drop(v);
    let segments = commit.log_segments();
    if pending >= FINAL_CHECKPOINT_MIN_BYTES
        || (pending > 0 && segments >= FINAL_CHECKPOINT_MIN_SEGMENTS)
    {
        checkpointer.run(store, commit, bp, CheckpointKind::Regular)?;
    }
    checkpointer.delete_retired(store);
    Ok(())
}
