//! The cleaner: copies the live records out of old page segments (as part
//! of a checkpoint) so that the segments can be deleted, keeping the files
//! within `Options::space_amplification_max` of the live bytes.
//! What to clean is decided by `plan`, without I/O; this module keeps what
//! the decisions start from and deletes the segments once no reader is left.

pub(crate) mod plan;

use crate::checkpoint_format::unreferenced_below;
use crate::page_log::PageLog;
use crate::store::Store;
use crate::version::Epoch;
use kivi_log::CheckpointRecord;
use kivi_storage::SegmentId;
use plan::{plan_floor, Plan, PlanInput};
use std::sync::Weak;
use std::time::Instant;

/// What the cleaner keeps between checkpoints. Part of the checkpointer's
/// state, under its lock: cleaning is done by checkpoints.
pub(crate) struct Cleaner {
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
    retiring: Vec<(Vec<Weak<Epoch>>, SegmentId, Instant)>,
    /// Epochs before the newest checkpoint's that were alive at its end.
    old_epochs: Vec<Weak<Epoch>>,
    /// Bytes the last checkpoint wrote: about what the next one will add
    /// before the segments it frees can go.
    last_written: Option<u64>,
}

impl Cleaner {
    /// `durable_oldest`: of the newest durable checkpoint found at open.
    pub fn new(durable_oldest: u32) -> Cleaner {
        Cleaner {
            floor: 0,
            durable_oldest,
            retiring: Vec::new(),
            old_epochs: Vec::new(),
            last_written: None,
        }
    }

    /// Page segments before this hold nothing the newest durable
    /// checkpoint references.
    pub fn durable_oldest(&self) -> u32 {
        self.durable_oldest
    }

    /// What the next checkpoint cleans (see `plan::plan_floor`), for a
    /// store whose durable tree holds `tree_bytes` and whose commit log
    /// `log_bytes`, within `max` times the live bytes.
    pub fn plan(
        &self,
        pages: &PageLog,
        tree_bytes: u64,
        log_bytes: u64,
        max: f64,
        new_pages: bool,
    ) -> Plan {
        plan_floor(&PlanInput {
            segments: pages.segments(),
            current: pages.current(),
            floor: self.floor,
            durable_oldest: self.durable_oldest,
            last_written: self.last_written,
            tree_bytes,
            log_bytes,
            max,
            new_pages,
        })
    }

    /// The floor of a compaction, which copies everything written before
    /// the segment `pages` just started.
    pub fn compact_floor(&self, pages: &PageLog) -> u32 {
        pages
            .current_id()
            .map_or(self.floor, |id| id as u32)
            .max(self.floor)
    }

    /// After checkpoint `rec`, cleaning up to `floor`, is durable: the page
    /// segments its tree no longer uses retire; the versions of the epoch
    /// before it (`old_epoch`) and older may still read them. `written`:
    /// the bytes it wrote (`None` for a compaction, which says nothing of
    /// what the next checkpoint writes).
    pub fn checkpoint_durable(
        &mut self,
        pages: &PageLog,
        rec: &CheckpointRecord,
        floor: u32,
        old_epoch: Weak<Epoch>,
        written: Option<u64>,
    ) {
        debug_assert!(
            rec.root.is_none()
                || rec.replay_from < rec.seq
                || rec.root_oldest >= floor.min(rec.page_end.segment)
        );
        self.floor = self.floor.max(floor);
        self.durable_oldest = unreferenced_below(rec);
        let retire: Vec<SegmentId> = pages
            .segments()
            .range(..u64::from(self.durable_oldest))
            .map(|(&id, _)| id)
            .filter(|id| !self.retiring.iter().any(|(_, r, _)| r == id))
            .collect();
        self.old_epochs.retain(|e| e.strong_count() > 0);
        self.old_epochs.push(old_epoch);
        let epochs = self.old_epochs.clone();
        self.retiring.extend(
            retire
                .into_iter()
                .map(|id| (epochs.clone(), id, Instant::now())),
        );
        if written.is_some() {
            self.last_written = written;
        }
    }

    /// Deletes the page segments no checkpoint references once no version
    /// that could read them is left, and the storage's grace for readers
    /// elsewhere (`Storage::retired_grace`) has passed. Oldest first is not
    /// needed here: page segments are found by listing, not by a chain.
    pub fn delete_retired(&mut self, store: &Store, pages: &mut PageLog) {
        let counters = store.counters();
        let grace = store.storage().retired_grace();
        let mut i = 0;
        while i < self.retiring.len() {
            let (epochs, id, retired_at) = &self.retiring[i];
            if epochs.iter().any(|e| e.strong_count() > 0) || retired_at.elapsed() < grace {
                i += 1;
                continue;
            }
            let id = *id;
            match store.storage().delete_segment(id) {
                Ok(()) => {
                    store.pager().close_segment(id as u32);
                    pages.forget(id);
                    self.retiring.swap_remove(i);
                    counters.segment_cleaned();
                }
                Err(e) => {
                    store.note_error(
                        &format!(
                            "cleaner: deleting page segment {}",
                            store.storage().segment_name(id)
                        ),
                        &e,
                    );
                    i += 1;
                }
            }
        }
        counters.set_retiring_segments(self.retiring.len() as u64);
    }
}
