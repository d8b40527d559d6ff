//! Reclaiming expired keys: the background deletes the entries of values
//! whose deadlines have passed, so their space comes back (through the
//! checkpoints and the cleaner, as for any delete).
//!
//! Reads never need this: an expired value is absent to them whether or not
//! its entry is still there (expiry.rs). What it bounds is space: a cache
//! whose keys all expire would otherwise keep every one.
//!
//! A round walks the published tree from where the last one stopped,
//! descending only into subtrees whose earliest deadline has passed
//! (`kivi_tree::expired_each`), so it costs what the expired keys' leaves
//! cost, never a scan of the keyspace. What it finds is deleted by batches
//! of `BatchOp::Reclaim`, each deleting a key only if the value the walk
//! found is still there: a key written again since (or deleted) is left as
//! it is. Keys still in the write buffer wait for its merge into the tree.

use crate::backpressure::Backpressure;
use crate::batch::WriteBatch;
use crate::commit::CommitPath;
use crate::error::Result;
use crate::pipeline::Request;
use crate::store::Store;
use std::ops::ControlFlow;
use std::time::{Duration, Instant};

/// Expired keys deleted by one batch, at most (each is looked up again
/// when its batch is decided: about 10 ms of the commit leader's time).
const BATCH_KEYS: usize = 4096;
/// How long one round may go on while it keeps finding full batches (the
/// background thread has checkpoints to take too).
const ROUND_TIME: Duration = Duration::from_millis(100);

/// Where the walk over the tree stands between rounds.
#[derive(Default)]
pub(crate) struct ReclaimCursor {
    /// The last key a batch took; the next round starts after it.
    after: Option<Vec<u8>>,
}

/// One round: batches of expired keys from the cursor on, until a walk
/// finds less than a batch (then the cursor goes back to the start) or the
/// round's time is up. Returns whether there is more to do at once (the
/// round ended on its time, not on the walk's end).
pub(crate) fn round(
    store: &Store,
    commit: &CommitPath,
    bp: &Backpressure,
    cursor: &mut ReclaimCursor,
) -> Result<bool> {
    // Read-only: nothing to do. Writes waiting for a checkpoint (which this
    // thread takes): the checkpoint first.
    if store.opts().read_only || store.write_buffer_full() {
        return Ok(false);
    }
    let started = Instant::now();
    loop {
        let v = store.current();
        let Some(root) = v.root.clone() else {
            return Ok(false);
        };
        let now = store.clock_now();
        let mut found: Vec<(Vec<u8>, u64)> = Vec::new();
        // Stopped at a full batch, or walked to the end: `found` says which.
        let _ = kivi_tree::expired_each(
            store.pager(),
            &root,
            cursor.after.as_deref(),
            now,
            &mut |key, deadline| {
                // A key the write buffer holds was written since: its newest
                // write decides, and reaches the tree with the next merge.
                if v.buffer.find(key).is_some() {
                    return ControlFlow::Continue(());
                }
                found.push((key.to_vec(), deadline));
                if found.len() >= BATCH_KEYS {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            },
        )?;
        drop(root);
        drop(v);
        let full = found.len() >= BATCH_KEYS;
        cursor.after = if full {
            found.last().map(|(k, _)| k.clone())
        } else {
            None
        };
        if !found.is_empty() {
            let mut b = WriteBatch::new();
            for (key, deadline) in found.drain(..) {
                b.reclaim(key, deadline)?;
            }
            commit.submit(store, bp, Request::Write(b))?;
        }
        if !full {
            return Ok(false);
        }
        if started.elapsed() >= ROUND_TIME {
            return Ok(true);
        }
    }
}
