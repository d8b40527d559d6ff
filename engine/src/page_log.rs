//! The page log: segments that checkpoints write tree pages and large values
//! to. Records are buffered and written in large appends; a checkpoint syncs
//! once at its end, before its checkpoint record is committed, so a page is
//! never referenced before it is durable.

use crate::latency::{timed, SyncTimes};
use crate::pacing::Pacer;
use crate::segment_chain::SegmentChain;
use kivi_log::{Addr, Error, PageRef, RecordType, SegmentIds, SegmentKind};
use kivi_storage::{SegmentId, Storage};
use kivi_tree::PageSink;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Appends are gathered up to this size before they are written.
const WRITE_BUFFER: usize = 1 << 20;
/// Page segments are at least this large (unless `segment_bytes` is less).
const MIN_SEGMENT_BYTES: u64 = 1 << 20;

pub(crate) struct PageLog {
    /// Bulk segments, which a backend may write back as they are appended,
    /// so that a checkpoint's sync never puts a burst of pages in front of a
    /// commit's (see `Storage::create_bulk_segment`).
    chain: SegmentChain,
    /// Most bytes a segment takes (`segment_bytes`); see `segment_target`.
    max_target: u64,
    target: u64,
    /// End of the current segment as of the last durable checkpoint.
    durable_end: u64,
    /// Every page segment on disk and its length, the current one included:
    /// what the cleaner chooses from.
    segments: BTreeMap<SegmentId, u64>,
    /// The segment being appended to and its length, for `stats` to read
    /// while a checkpoint holds the page log (the file itself is grown
    /// ahead of its data; see `SegmentWriter`).
    appending: Arc<Mutex<Option<(SegmentId, u64)>>>,
    /// Where each sync's time is recorded (`page_log`).
    syncs: Arc<SyncTimes>,
}

impl PageLog {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        storage: Arc<dyn Storage>,
        ids: Arc<SegmentIds>,
        store_id: [u8; 16],
        target: u64,
        prev: Option<(SegmentId, u64)>,
        segments: BTreeMap<SegmentId, u64>,
        pacer: Arc<Pacer>,
        syncs: Arc<SyncTimes>,
    ) -> Self {
        PageLog {
            chain: SegmentChain::new(
                storage,
                ids,
                store_id,
                SegmentKind::Pages,
                Some(Arc::new(move || pacer.after_step())),
                prev,
            ),
            max_target: target,
            target,
            durable_end: 0,
            segments,
            appending: Arc::default(),
            syncs,
        }
    }

    /// Where `appending` is published.
    pub fn appending(&self) -> Arc<Mutex<Option<(SegmentId, u64)>>> {
        self.appending.clone()
    }

    fn publish(&self) {
        *self.appending.lock() = self.current();
    }

    /// Sizes segments for a tree of `tree_bytes`: an eighth of it, between
    /// 1 MiB and `segment_bytes`. Space comes back a whole segment at a time,
    /// when nothing in it is live any more; segments as large as the tree
    /// itself (64 MiB under a 73 MiB tree) each held a mix of several
    /// checkpoints' pages and kept about a segment of dead ones.
    pub fn set_tree_bytes(&mut self, tree_bytes: u64) {
        let least = MIN_SEGMENT_BYTES.min(self.max_target);
        self.target = (tree_bytes / 8).clamp(least, self.max_target);
    }

    /// Page segments on disk, oldest first, with their lengths.
    pub fn segments(&self) -> &BTreeMap<SegmentId, u64> {
        &self.segments
    }

    /// Forgets a segment that was deleted.
    pub fn forget(&mut self, id: SegmentId) {
        debug_assert!(self.chain.current().is_none_or(|c| c.id() != id));
        self.segments.remove(&id);
    }

    /// The segment being appended to, if one is open.
    pub fn current_id(&self) -> Option<SegmentId> {
        self.chain.current().map(|c| c.id())
    }

    /// The segment being appended to and the bytes written to it.
    pub fn current(&self) -> Option<(SegmentId, u64)> {
        self.chain.current().map(|c| (c.id(), c.len()))
    }

    /// Closes the current segment, so the next record starts a new one (and
    /// everything before can be cleaned).
    pub fn finish_segment(&mut self) -> Result<(), Error> {
        if self.chain.current().is_some() {
            self.roll()?;
        }
        Ok(())
    }

    /// Starts a new segment even when none is open, so that every segment
    /// on disk lies before it and can be cleaned. Used by compaction: in a
    /// session that has written no pages yet, the segment the last session
    /// ended in is the log's tail, and would otherwise stay however little
    /// of it is live (a store emptied and compacted kept it whole).
    pub fn start_segment(&mut self) -> Result<(), Error> {
        if self.chain.current().is_some() || self.chain.prev().is_some() {
            self.roll()?;
        }
        Ok(())
    }

    fn roll(&mut self) -> Result<(), Error> {
        // Unsynced, a page segment validly ends where the last durable
        // checkpoint's pages do.
        let durable_end = self.durable_end;
        self.chain.close(|_, _| durable_end)?;
        let app = self.chain.open_next()?;
        self.durable_end = app.len();
        self.segments.insert(app.id(), app.len());
        self.publish();
        Ok(())
    }

    /// Makes everything written so far durable.
    pub fn sync(&mut self) -> Result<(), Error> {
        match self.chain.current_mut() {
            Some(cur) => timed(&self.syncs.page_log, || cur.sync()),
            None => Ok(()),
        }
    }

    /// Where the next record would go: every page written so far lies before it.
    pub fn end(&self) -> Addr {
        match (self.chain.current(), self.chain.prev()) {
            (Some(cur), _) => Addr::new(cur.id(), cur.len()),
            (None, Some((id, end))) => Addr::new(id, end),
            (None, None) => Addr::default(),
        }
    }

    /// Called once a checkpoint referencing everything written is durable.
    pub fn checkpoint_durable(&mut self) {
        if let Some(cur) = self.chain.current() {
            self.durable_end = cur.len();
        }
    }

    /// Called when a checkpoint failed: its records are abandoned and the next
    /// checkpoint starts a new segment that declares where this one validly ends.
    pub fn checkpoint_failed(&mut self) {
        self.chain.abandon(self.durable_end);
        self.publish();
    }
}

impl PageSink for PageLog {
    fn write_record(
        &mut self,
        ty: RecordType,
        body: &mut dyn FnMut(&mut Vec<u8>),
    ) -> Result<PageRef, Error> {
        let full = self
            .chain
            .current()
            .is_none_or(|c| c.is_broken() || c.len() >= self.target);
        if full {
            self.roll()?;
        }
        let cur = self.chain.current_mut().expect("page segment open");
        let r = cur.buffer_record(ty, |out| body(out));
        self.segments.insert(cur.id(), cur.len());
        if cur.buffered() >= WRITE_BUFFER {
            cur.flush()?;
            self.publish();
        }
        Ok(r)
    }
}
